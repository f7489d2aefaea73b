"""fedlight analyze: the papers' analyses on finished run folders (t-SNE, Fisher k-NN probe,
feature sparsity, important-feature overlap, FedPick's selection), their numbers on constructed
cases and their one-line errors; GPFL's DLG attack surfaces and the Table 5 post-processor."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math

import pytest
import torch

from fedlight.analysis import analyses, analyze
from fedlight.analysis.dlg_table import write_table
from fedlight.analysis.features import client_features, module_inputs
from fedlight.analysis.fisher_knn import fisher_ranking, knn_accuracy, probe_curve
from fedlight.analysis.overlap import jaccard, overlap_matrix, top_features
from fedlight.analysis.runs import load_finished_run
from fedlight.analysis.selection import finite_mean
from fedlight.analysis.sparsity import FeatureSparsity, sparsity
from fedlight.cli import main
from fedlight.clients import GPFL, FedAvg, FedPick
from fedlight.core.errors import ConfigError, MissingFileError
from fedlight.core.seeding import derive_seed
from fedlight.data import FederatedDataModule
from fedlight.data.partitions.dirichlet import Dirichlet
from fedlight.data.partitions.iid import IID
from fedlight.data.sources.digits import Digits
from fedlight.federation.options import TrainerOptions
from fedlight.federation.trainer import FederatedTrainer
from fedlight.privacy.dlg import DLGProbe, attack_surface, attacked_batches, psnr

CLIENTS = 2


def fit(root, method, rounds: int, name: str, probes=(), **options):
    """A tiny finished run: scikit-learn's 8x8 digits over 2 clients, an MLP."""
    torch.manual_seed(0)
    client = method(backbone="mlp", num_classes=10, input_shape=(1, 8, 8), lr=0.05, **options)
    data = FederatedDataModule(source=Digits(), partition=Dirichlet(beta=0.5), num_clients=CLIENTS)
    trainer = FederatedTrainer(rounds=rounds, batch_size=32, accelerator="cpu", devices=1,
                               default_root_dir=str(root), run_name=name, progress_bar=False,
                               verbose=False, checkpoint_every=1, threads=1,
                               probes=list(probes))
    with contextlib.redirect_stdout(io.StringIO()):
        trainer.fit(client, data)
    return root / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return {"fedpick": fit(root, FedPick, 2, "fedpick", [FeatureSparsity()]),
            "fedpick_1": fit(root, FedPick, 1, "fedpick_1"),
            "fedavg": fit(root, FedAvg, 1, "fedavg"),
            "gpfl": fit(root, GPFL, 1, "gpfl")}


def read(path):
    with open(path) as handle:
        return list(csv.DictReader(handle))


# ------------------------------------------------------------------------- constructed cases
def test_fisher_ranking_puts_the_feature_that_separates_the_classes_first():
    generator = torch.Generator().manual_seed(0)
    labels = torch.arange(40) % 2
    features = torch.randn(40, 6, generator=generator)
    features[:, 4] = 10.0 * labels + 0.1 * torch.randn(40, generator=generator)
    assert fisher_ranking(features, labels)[0].item() == 4


def test_knn_probe_on_separable_features_is_perfect_and_keeps_the_asked_share():
    generator = torch.Generator().manual_seed(0)
    labels = torch.arange(60) % 3
    features = 3.0 * torch.randn(60, 10, generator=generator)
    features[:, 7] = labels  # the one informative component, exact
    train, test = (features[:40], labels[:40]), (features[40:], labels[40:])
    assert knn_accuracy((train[0][:, [7]], train[1]), (test[0][:, [7]], test[1])) == 1.0
    rows = probe_curve(train, test, ratios=(0.1, 0.5, 1.0))
    assert [r["features_kept"] for r in rows] == [1, 5, 10]
    assert rows[0]["accuracy"] == 1.0  # the top 10 % is exactly the informative component
    assert rows[2]["accuracy"] < 0.7  # with the nine noise components the neighbours blur


def test_overlap_is_intersection_over_union():
    assert jaccard({1, 2, 3}, {1, 2, 3}) == 1.0
    assert jaccard({1, 2}, {3, 4}) == 0.0
    assert jaccard({1, 2, 3}, {2, 3, 4}) == pytest.approx(2 / 4)
    importance = torch.tensor([0.9, 0.1, 0.8, 0.2])
    assert top_features(importance, 0.5) == {0, 2}
    assert overlap_matrix([{0, 2}, {0, 2}, {1, 3}]) == [[1, 1, 0], [1, 1, 0], [0, 0, 1]]


def test_features_are_the_input_of_the_named_module():
    torch.manual_seed(0)
    model = FedAvg(backbone="mlp", num_classes=10, input_shape=(1, 8, 8)).eval()
    x = torch.randn(700, 1, 8, 8)
    captured = module_inputs(model, ["model.head"], model, x, batch_size=256)["model.head"]
    with torch.no_grad():
        assert torch.allclose(captured, model.model.encoder(x).flatten(1))
    with pytest.raises(ConfigError, match=r"no module 'model.hed'; valid .*model.head"):
        module_inputs(model, ["model.hed"], model, x)


# ------------------------------------------------------------------------- on finished runs
def test_the_loaded_run_scores_as_the_run_did(runs):
    run = load_finished_run(runs["fedpick"])
    assert (run.method, run.rounds_done, run.num_clients) == ("FedPick", 2, CLIENTS)
    x, y = run.datamodule.client_test(1)
    accuracy = (run.load_client(1)(x).argmax(1) == y).float().mean().item()
    per_client = json.loads((runs["fedpick"] / "per_client.json").read_text())
    assert accuracy == pytest.approx(per_client[1]["personalized_accuracy"])


def test_a_local_round_from_a_checkpoint_is_the_runs_next_round(runs):
    # round 2 re-trained from the 1-round run's checkpoint and averaged = the 2-round run's state
    one, two = load_finished_run(runs["fedpick_1"]), load_finished_run(runs["fedpick"])
    uploads = {k: one.train_locally(k)[1] for k in range(CLIENTS)}
    expected = two.global_state
    for key, value in one.weighted_mean(uploads).items():
        assert torch.allclose(value, expected[key], atol=1e-6), key


def test_a_saved_runs_trainer_options_are_those_it_recorded(runs):
    config = load_finished_run(runs["fedpick"]).trainer_config
    options = TrainerOptions.from_saved({**config, "an_option_of_another_version": 1})
    assert (options.batch_size, options.seed, options.local_epochs, options.rounds) == (
        config["batch_size"], config["seed"], config["local_epochs"], config["rounds"])
    assert options.local_options["optimizer_state"] == config["optimizer_state"]


@pytest.mark.parametrize(("name", "options"), [
    ("tsne", {"samples_per_client": 20, "perplexity": 5}), ("fisher-knn", {"ratios": (1.0,)}),
    ("selection", {}), ("sparsity", {})])
def test_an_analysis_sets_the_clients_up_and_copies_their_data_once(runs, tmp_path,
                                                                     monkeypatch, name, options):
    # the per-client loops load, score and train every client: a client side rebuilt per
    # call would set the module up and copy every client's data once per client
    import fedlight.analysis.runs as finished
    from fedlight.federation import runtime

    builds, populations = [], []
    build, population = finished.ClientRuntime, runtime.Population
    monkeypatch.setattr(finished, "ClientRuntime",
                        lambda *a, **k: builds.append(1) or build(*a, **k))
    monkeypatch.setattr(runtime, "Population",
                        lambda *a, **k: populations.append(1) or population(*a, **k))
    analyze(name, runs["fedpick"], tmp_path, **options)
    assert (len(builds), len(populations)) == (1, 1)


def test_tsne_embeds_the_personalized_and_the_global_model(runs, tmp_path):
    paths = analyze("tsne", runs["fedavg"], tmp_path, samples_per_client=30, perplexity=10)
    assert [p.name for p in paths] == ["tsne.csv", "tsne.png"]
    rows = read(tmp_path / "tsne.csv")
    assert list(rows[0]) == ["model", "features", "client", "sample", "label", "tsne_x",
                             "tsne_y"]
    assert len(rows) == 2 * CLIENTS * 30  # FedAvg: personalized and global model
    assert {r["model"] for r in rows} == {"personalized", "global"}
    assert (tmp_path / "tsne.png").stat().st_size > 0


def test_tsne_reads_gpfls_personalized_feature_and_fedpicks_selected_ones(runs, tmp_path):
    run = load_finished_run(runs["gpfl"])
    model = run.load_client(0)
    x = run.datamodule.client_test(0)[0][:20]
    with torch.no_grad():
        assert torch.allclose(client_features(model, ["model.head"], x)["model.head"],
                              model.personalized_features(x))
    analyze("tsne", runs["fedpick"], tmp_path, samples_per_client=20,
            features=("pfsm.relevant_head", "pfsm.irrelevant_head"))
    rows = read(tmp_path / "tsne.csv")
    assert {r["features"] for r in rows} == {"pfsm.relevant_head", "pfsm.irrelevant_head"}
    assert {r["model"] for r in rows} == {"personalized"}  # FedPick keeps a private part


def test_fisher_knn_writes_a_curve_per_client_and_their_mean(runs, tmp_path):
    analyze("fisher-knn", runs["fedavg"], tmp_path, ratios=(0.25, 1.0))
    rows = read(tmp_path / "fisher_knn.csv")
    assert list(rows[0]) == ["client", "ratio", "features_kept", "accuracy"]
    assert [r["client"] for r in rows] == ["0", "0", "1", "1", "mean", "mean"]
    run = load_finished_run(runs["fedavg"])
    model = run.load_client(1)
    train, test = run.datamodule.client_train(1), run.datamodule.client_test(1)
    features = [client_features(model, ["model.head"], x)["model.head"] for x in (train[0],
                                                                                  test[0])]
    full = knn_accuracy((features[0], train[1]), (features[1], test[1]))
    assert float(rows[3]["accuracy"]) == pytest.approx(full)  # ratio 1: every feature
    assert float(rows[5]["accuracy"]) == pytest.approx(
        (float(rows[1]["accuracy"]) + full) / 2)


def test_overlap_by_mask_and_by_fisher(runs, tmp_path):
    analyze("overlap", runs["fedpick"], tmp_path)
    matrix = [[float(v) for k, v in row.items() if k != "client"]
              for row in read(tmp_path / "overlap.csv")]
    assert len(matrix) == CLIENTS and all(len(row) == CLIENTS for row in matrix)
    assert all(matrix[i][i] == 1.0 for i in range(CLIENTS))
    assert matrix[0][1] == matrix[1][0] and 0 <= matrix[0][1] <= 1
    with pytest.raises(ConfigError, match="overlap by mask reads feature masks, which FedAvg"):
        analyze("overlap", runs["fedavg"], tmp_path / "no")
    assert not (tmp_path / "no").exists()  # nothing written
    analyze("overlap", runs["fedavg"], tmp_path, by="fisher", top=0.25)
    assert len(read(tmp_path / "overlap.csv")) == CLIENTS


def test_sparsity_over_rounds_and_around_aggregation(runs, tmp_path):
    analyze("sparsity", runs["fedpick"], tmp_path)
    series = read(tmp_path / "sparsity_rounds.csv")
    assert [r["round"] for r in series] == ["1", "2"]
    assert {"feature_sparsity", "feature_sparsity/client_0", "mask_sparsity"} <= set(series[0])
    # the probe's last value is the sparsity of each client's model in the final checkpoint
    run = load_finished_run(runs["fedpick"])
    x = run.datamodule.client_test(0)[0]
    assert float(series[-1]["feature_sparsity/client_0"]) == pytest.approx(
        sparsity(run.load_client(0), "model.head", x))
    clients = read(tmp_path / "sparsity.csv")
    assert list(clients[0]) == ["client", "feature_sparsity_before", "feature_sparsity_after",
                                "mask_sparsity_before", "mask_sparsity_after"]
    assert all(0 <= float(v) <= 1 for row in clients for k, v in row.items() if k != "client")
    assert clients[0]["feature_sparsity_before"] != clients[0]["feature_sparsity_after"]
    analyze("sparsity", runs["gpfl"], tmp_path / "gpfl")  # no mask, no per-round column
    assert sorted(p.name for p in (tmp_path / "gpfl").iterdir()) == ["sparsity.csv",
                                                                     "sparsity.png"]


def test_selection_ratio_and_fisher_scores_of_the_selected_features(runs, tmp_path):
    analyze("selection", runs["fedpick"], tmp_path)
    rows = read(tmp_path / "selection.csv")
    assert list(rows[0]) == ["client", "keep_ratio", "fisher_relevant", "fisher_irrelevant"]
    run = load_finished_run(runs["fedpick"])
    x = run.datamodule.client_test(1)[0]
    assert float(rows[1]["keep_ratio"]) == pytest.approx(run.load_client(1).keep_ratio(x))
    assert finite_mean(torch.tensor([1.0, math.inf, 3.0, math.nan])) == 2.0
    with pytest.raises(ConfigError, match="selection reads feature masks, which GPFL"):
        analyze("selection", runs["gpfl"], tmp_path)


# ------------------------------------------------------------------------- command line
def test_the_command_writes_into_the_run_folder_and_lists_the_analyses(runs, capsys):
    main(["analyze", "--help"])
    out = capsys.readouterr().out
    assert all(f"\n  {name} " in out for name in analyses())
    assert set(analyses()) == {"fisher-knn", "overlap", "selection", "sparsity",
                                "tsne"}
    main(["analyze", "overlap", str(runs["fedavg"]), "--by", "fisher"])
    assert "overlap.csv" in capsys.readouterr().out
    assert (runs["fedavg"] / "overlap.png").is_file()


@pytest.mark.parametrize("argv, message", [
    (["tsnee", "RUN"], "unknown analysis 'tsnee'; valid: fisher-knn, overlap, selection, "
                       "sparsity, tsne; did you mean 'tsne'?"),
    (["tsne", "nowhere"], "'nowhere' is not a finished run folder (no config.yaml, "
                          "partition.json)"),
    (["overlap", "RUN", "--by", "frequency"], "unknown by 'frequency'; valid: mask, fisher"),
    (["sparsity", "RUN", "--checkpoint", "best"], "best.ckpt' does not exist; valid: last, best"),
])
def test_bad_input_is_one_line_naming_the_value_and_what_is_valid(runs, capsys, argv, message):
    argv = [str(runs["fedpick"]) if a == "RUN" else a for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        main(["analyze", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err


def test_python_errors_are_fedlights_own(runs, tmp_path):
    with pytest.raises(MissingFileError):
        load_finished_run(tmp_path)
    with pytest.raises(ConfigError, match="client 5 does not exist"):
        load_finished_run(runs["fedavg"]).load_client(5)
    assert [row["round"] for row in load_finished_run(runs["fedavg"]).metrics()] == [1.0]


# ------------------------------------------------------------------------- DLG surfaces
def test_gpfls_pseudo_modules_are_its_global_route_and_eq_13(runs):
    run = load_finished_run(runs["gpfl"])
    client = run.load_client(0)
    x = run.datamodule.client_test(0)[0][:5]
    with torch.no_grad():
        global_features = client.routes(x)[0]
        # CoV reads one condition here and two (g, p_k) in routes(): float rounding differs
        assert torch.allclose(attack_surface(client, "sfe")(x), global_features, atol=1e-5)
        assert torch.allclose(attack_surface(client, "sm")(x),
                              client.alignment_logits(global_features), atol=1e-5)
    fedavg = load_finished_run(runs["fedavg"]).load_client(0)
    with pytest.raises(ValueError, match="unknown surface 'sfe'; valid: encoder, model"):
        attack_surface(fedavg, "sfe")


def test_dlg_probe_logs_a_column_per_surface_and_the_guesses(tmp_path):
    attack = {"every": 1, "batches": 1, "options": {"iterations": 3}}
    probes = [DLGProbe(surface="sm", guesses=True, **attack), DLGProbe(**attack)]
    folder = fit(tmp_path, GPFL, 1, "dlg", probes)
    row = read(folder / "metrics.csv")[0]
    for column in ("dlg_psnr_sm", "dlg_psnr", "dlg_psnr_guess_noise", "dlg_psnr_guess_black"):
        assert math.isfinite(float(row[column])), column
    data = load_finished_run(folder).datamodule.client_train(0)
    seed = derive_seed(0, 0, 0)  # the probe's: trainer seed, round index, client 0
    (image, _), = attacked_batches(data, 1, 1, seed)
    scaled = (image - data[0].min()) / (data[0].max() - data[0].min())
    assert float(row["dlg_psnr_guess_black"]) == pytest.approx(
        psnr(torch.zeros_like(scaled), scaled), rel=1e-6)
    with pytest.raises(ValueError, match="got surface 'sm' and options.surface 'model'"):
        DLGProbe(surface="sm", options={"surface": "model"})


def test_the_dlg_table_names_cells_as_gpfls_table_5(tmp_path):
    header = ["method", "seed", "last dlg_psnr_encoder", "last dlg_psnr_model",
              "last dlg_psnr_sm", "last dlg_psnr_guess_black"]
    rows = [["FedPer", 0, 17.0, "", "", ""], ["FedPer", 1, 19.0, "", "", ""],
            ["FedAvg", 0, 13.0, 12.0, "", 10.0], ["FedAvg", 1, 13.0, 12.0, "", 12.0],
            ["GPFL", 0, 14.0, "", 4.0, 10.0]]
    with open(tmp_path / "runs.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([header, *rows])
    write_table(tmp_path)
    cells = {r["cell"]: r for r in read(tmp_path / "dlg_table.csv")}
    assert list(cells) == ["Per-fe", "Avg-fe", "Avg", "GPFL-fe", "GPFL-sm", "guess: black"]
    assert float(cells["Per-fe"]["mean"]) == 18.0
    assert float(cells["Per-fe"]["std"]) == pytest.approx(2 ** 0.5)
    assert float(cells["guess: black"]["mean"]) == 11.0  # each seed once
    assert "| 18.00 ± 1.41 |" in (tmp_path / "dlg_table.md").read_text()
    with pytest.raises(MissingFileError, match="runs.csv' does not exist"):
        write_table(tmp_path / "nothing")


# ------------------------------------------------------------------------- figures
@pytest.fixture
def legends(monkeypatch):
    """The legend entries (title, texts) of every panel of every figure saved meanwhile."""
    from matplotlib.figure import Figure

    seen: list[tuple[str, list[str]]] = []
    savefig = Figure.savefig

    def record(figure, *args, **kwargs):
        for ax in figure.axes:
            legend = ax.get_legend()
            if legend is not None:
                seen.append((legend.get_title().get_text(),
                             [text.get_text() for text in legend.get_texts()]))
        return savefig(figure, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    return seen


def test_tsne_names_every_one_of_twenty_clients_in_its_legend(tmp_path, legends):
    torch.manual_seed(0)
    client = FedAvg(backbone="mlp", num_classes=10, input_shape=(1, 8, 8), lr=0.05)
    data = FederatedDataModule(source=Digits(), partition=IID(), num_clients=20)
    trainer = FederatedTrainer(rounds=1, batch_size=32, accelerator="cpu", devices=1,
                               default_root_dir=str(tmp_path), run_name="twenty",
                               progress_bar=False, verbose=False, threads=1)
    with contextlib.redirect_stdout(io.StringIO()):
        trainer.fit(client, data)
    analyze("tsne", tmp_path / "twenty", tmp_path / "out", samples_per_client=3,
            perplexity=5)
    by_client = [texts for title, texts in legends if title == "client"]
    assert by_client == [[str(k) for k in range(20)]] * 2  # personalized and global model
    by_class = [texts for title, texts in legends if title == "class"]
    assert by_class and all(texts == sorted(texts, key=int) for texts in by_class)


def test_analyze_pdf_writes_a_vector_figure_beside_the_png_without_paper_figure_numbers(
        runs, tmp_path, capsys, monkeypatch):
    from matplotlib.figure import Figure

    titles: list[str] = []
    savefig = Figure.savefig

    def record(figure, *args, **kwargs):
        titles.extend(ax.get_title() for ax in figure.axes)
        return savefig(figure, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    main(["analyze", "selection", str(runs["fedpick"]), "--out", str(tmp_path), "--pdf"])
    assert (tmp_path / "selection.pdf").read_bytes().startswith(b"%PDF")
    assert f"wrote {tmp_path / 'selection.pdf'}" in capsys.readouterr().out
    assert titles and not [t for t in titles if "Fig." in t]


def test_figures_name_clients_by_their_domain_where_the_data_names_them():
    from types import SimpleNamespace

    from fedlight.analysis.runs import RestoredRun
    from fedlight.analysis.sparsity import series_label

    domains = SimpleNamespace(num_clients=3, client_names=lambda: ["mnist", "svhn", None])
    run = RestoredRun(None, None, domains, {}, None)
    assert run.client_labels == ["mnist", "svhn", "2"]
    assert series_label("feature_sparsity/client_1", run.client_labels) == "svhn"
    assert series_label("feature_sparsity/client_2", run.client_labels) == "client 2"
    assert series_label("feature_sparsity", run.client_labels) == "mean over clients"
