import csv
import json
import math
import time
from pathlib import Path

import pytest

from fedlight.analysis.report import (
    RunRecord,
    group_statistics,
    read_run,
    results_table,
    write_report,
)
from fedlight.cli import main
from fedlight.clients import FedAvg, Local
from tests.conftest import tiny_data, tiny_trainer


def run(tmp_path, cls, seed, rounds=2, **trainer_kwargs):
    client = cls(backbone="mlp", num_classes=4, input_shape=(1, 8, 8), lr=0.1)
    name = f"{cls.__name__}-{seed}"
    tiny_trainer(tmp_path, rounds=rounds, seed=seed, run_name=name, **trainer_kwargs).fit(
        client, tiny_data())
    return tmp_path / name


def test_report_tables_and_pngs_from_two_methods(tmp_path):
    runs = [run(tmp_path, cls, seed) for cls in (FedAvg, Local) for seed in (0, 1)]
    main(["report", *map(str, runs), "--out", str(tmp_path / "report"), "--compare", "Local",
          "FedAvg"])
    report = (tmp_path / "report" / "report.md").read_text()
    fedavg_row = next(line for line in report.splitlines() if line.startswith("| FedAvg"))
    best = [json.loads((r / "summary.json").read_text())["best_personalized_accuracy"]
            for r in runs[:2]]
    mean = 100 * sum(best) / 2
    # the sample std of two values is their distance over sqrt(2) (population: over 2)
    std = 100 * abs(best[0] - best[1]) / math.sqrt(2)
    assert f"{mean:.2f} ± {std:.2f}" in fedavg_row and "| 2 |" in fedavg_row
    mean_last = [json.loads((r / "summary.json").read_text())["mean_last_personalized_accuracy"]
                 for r in runs[:2]]
    assert f"{100 * sum(mean_last) / 2:.2f} ±" in fedavg_row
    assert "synthetic/iid" in fedavg_row
    local_row = next(line for line in report.splitlines() if line.startswith("| Local"))
    assert "| - | - |" in local_row  # Local has no global model
    for png in ("curves.png", "partition_synthetic_iid.png",
                "client_gain_Local_vs_FedAvg_synthetic_iid.png"):
        assert (tmp_path / "report" / png).stat().st_size > 1000, png
    assert "% of clients gain accuracy" in report


def test_report_pdf_writes_every_figure_as_pdf_too(tmp_path):
    runs = [run(tmp_path, FedAvg, seed) for seed in (0, 1)]
    main(["report", *map(str, runs), "--out", str(tmp_path / "report"), "--pdf"])
    for name in ("curves", "partition_synthetic_iid"):
        assert (tmp_path / "report" / f"{name}.png").is_file()
        assert (tmp_path / "report" / f"{name}.pdf").read_bytes().startswith(b"%PDF"), name


def test_report_writes_every_evaluated_round_of_every_run_as_curves_csv(tmp_path):
    runs = [run(tmp_path, cls, seed, rounds=3) for cls in (FedAvg, Local) for seed in (0, 1)]
    write_report(runs, tmp_path / "report")
    with (tmp_path / "report" / "curves.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 4 * 3  # runs x evaluated rounds
    for folder in runs:
        method, seed = folder.name.split("-")
        with (folder / "metrics.csv").open() as handle:
            history = [r for r in csv.DictReader(handle) if r["personalized_accuracy"]]
        mine = [r for r in rows if r["method"] == method and r["seed"] == seed]
        assert [int(r["round"]) for r in mine] == [int(float(h["round"])) for h in history]
        for row, written in zip(mine, history, strict=True):
            assert float(row["personalized_accuracy"]) == float(written["personalized_accuracy"])
            assert row["global_accuracy"] == (written["global_accuracy"] and str(float(
                written["global_accuracy"])))
        assert {r["setting"] for r in mine} == {"synthetic/iid"}
        assert {r["rounds"] for r in mine} == {"3"}


def test_report_rejects_a_folder_that_is_not_a_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a finished fedlight run"):
        write_report([tmp_path], tmp_path / "out")


def test_offline_wandb_run_holds_metrics_and_images(tmp_path, monkeypatch, capfd):
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_SILENT", raising=False)  # W&B's own notes shown
    settings: list[str] = []
    start = wandb.init

    def init(**kwargs):
        settings.extend(kwargs)
        return start(**kwargs)

    monkeypatch.setattr(wandb, "init", init)
    path = run(tmp_path, FedAvg, 0, logger=["wandb", "tensorboard"])
    # W&B's deprecated anonymous setting is not passed (W&B warns once per process about it)
    assert settings and "anonymous" not in settings
    assert "anonymous" not in capfd.readouterr().err
    offline = next((path / "wandb").glob("offline-run-*"))
    keys = (b"personalized_accuracy", b"global_accuracy", b"train_loss")
    # wandb's service process may still be writing the file when finish() returns on a
    # loaded machine (seen once with two other processes busy): give it up to 30 s
    deadline = time.monotonic() + 30
    while True:
        logged = next(offline.glob("run-*.wandb")).read_bytes()
        if all(key in logged for key in keys) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for key in keys:
        assert key in logged
    images = sorted(p.name for p in (offline / "files" / "media" / "images").iterdir())
    assert any(n.startswith("accuracy") for n in images)
    assert any(n.startswith("partition") for n in images)
    assert list((offline / "files" / "media" / "table").glob("per_client_accuracy*.json"))
    assert list((path / "tensorboard").glob("events.out.tfevents.*"))
    assert read_run(path).method == "FedAvg"


def test_report_counts_distinct_seeds(tmp_path):
    first, again = run(tmp_path / "a", FedAvg, 0), run(tmp_path / "b", FedAvg, 0)
    write_report([first, again], tmp_path / "report")
    report = (tmp_path / "report" / "report.md").read_text()
    fedavg_row = next(line for line in report.splitlines() if line.startswith("| FedAvg"))
    assert "| 1 |" in fedavg_row and "±" not in fedavg_row
    assert (f"Not counted (an older run of the same method, setting, rounds and seed): {first}"
            in report)


def test_report_never_pools_runs_of_different_lengths(tmp_path):
    long_runs = [run(tmp_path / "long", FedAvg, seed, rounds=3) for seed in (0, 1)]
    short = run(tmp_path / "short", FedAvg, 0, rounds=1)  # newest, same method, setting, seed
    write_report([*long_runs, short], tmp_path / "report")
    report = (tmp_path / "report" / "report.md").read_text()
    rows = [line for line in report.splitlines() if line.startswith("| FedAvg")]
    assert len(rows) == 2 and "Not counted" not in report
    assert "| 3 | 2 |" in rows[1] and "| 1 | 1 |" in rows[0]  # rounds, seeds
    assert "| rounds | seeds |" in report


@pytest.mark.parametrize("pair, message", [
    (("FedAvg", "MAP"), "--compare FedAvg MAP: no run of MAP; methods in these runs: FedAvg, "
                        "Local"),
    (("FedAvg", "Local"), "--compare FedAvg Local: the two methods share no setting and round "
                          "count (FedAvg in synthetic/iid (2 rounds); Local in synthetic/iid "
                          "(1 rounds))"),
])
def test_report_compare_says_in_one_line_what_is_missing(tmp_path, capsys, pair, message):
    runs = [run(tmp_path, FedAvg, 0), run(tmp_path, Local, 0, rounds=1)]
    with pytest.raises(SystemExit) as exit_:
        main(["report", *map(str, runs), "--out", str(tmp_path / "report"), "--compare", *pair])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[0] == f"error: {message}"
    assert not (tmp_path / "report").exists()


def test_report_names_a_pattern_that_matched_no_run(tmp_path, capsys):
    existing = run(tmp_path, FedAvg, 0)
    with pytest.raises(SystemExit):
        main(["report", str(existing), str(tmp_path / "fedavg-*")])
    assert "fedavg-*' matches no run folder" in capsys.readouterr().err


def by_hand(values):
    """Mean, sample std (n - 1) and population std of ``values``, written out."""
    mean = sum(values) / len(values)
    squares = sum((v - mean) ** 2 for v in values)
    return mean, math.sqrt(squares / (len(values) - 1)), math.sqrt(squares / len(values))


def made_run(seed, best, best_global=None, method="FedAvg"):
    summary = {"rounds": 2, "best_personalized_accuracy": best,
               "best_global_accuracy": best_global}
    history = [{"round": 2.0, "personalized_accuracy": best}]
    return RunRecord(Path(f"{method}-{seed}"), method, "synthetic/iid", seed, summary, history)


def test_tables_show_the_sample_std_over_seeds_and_say_so(tmp_path):
    best = [0.50, 0.70, 0.66]
    runs = [made_run(seed, value) for seed, value in enumerate(best)]
    mean, sample, population = by_hand(best)
    assert f"{100 * sample:.2f}" != f"{100 * population:.2f}"  # the two conventions differ
    row = next(line for line in results_table(runs).splitlines() if line.startswith("| FedAvg"))
    assert f"| {100 * mean:.2f} ± {100 * sample:.2f} |" in row  # 62.00 ± 10.58
    statistics_row = group_statistics(runs)[0]
    assert statistics_row["best personalized std"] == pytest.approx(sample, abs=1e-12)
    assert statistics_row["best personalized n"] == 3
    for run in runs:  # write_report reads run folders: give the made runs theirs
        run.path = tmp_path / run.path
        run.path.mkdir()
        (run.path / "summary.json").write_text("{}")
    from fedlight.analysis.report import write_report_of_runs

    report = write_report_of_runs(runs, tmp_path / "report").read_text()
    assert "mean ± the sample standard deviation (n - 1 in the denominator)" in report


def test_a_cell_of_one_run_shows_its_value_alone_and_how_many_runs_it_has():
    single = results_table([made_run(0, 0.5, best_global=0.25)])
    row = next(line for line in single.splitlines() if line.startswith("| FedAvg"))
    assert "| 50.00 |" in row and "| 25.00 |" in row and "±" not in row
    # two seeds, the global model's score in one of them only
    pair = results_table([made_run(0, 0.5, best_global=0.25), made_run(1, 0.7)])
    row = next(line for line in pair.splitlines() if line.startswith("| FedAvg"))
    mean, sample, _ = by_hand([0.5, 0.7])
    assert f"| {100 * mean:.2f} ± {100 * sample:.2f} |" in row
    assert "| 25.00 (n=1) |" in row and "± 0.00" not in row
