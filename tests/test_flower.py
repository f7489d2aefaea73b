"""fedlight under Flower: the same client modules and server rules, driven by Flower's
ClientApp / ServerApp / Strategy, give the run fedlight fit gives."""

import dataclasses
import importlib
import json
import logging
import logging.handlers
import math
import time
import warnings
from pathlib import Path

import pytest
import torch

pytest.importorskip("flwr")

import fedlight  # noqa: E402
from fedlight.cli import FedlightCLI, main  # noqa: E402
from fedlight.config import read_config  # noqa: E402
from fedlight.core.messages import TrainTask  # noqa: E402
from fedlight.federation.processes import cpus  # noqa: E402
from fedlight.flower import build_client_app, build_server_app  # noqa: E402
from fedlight.flower.client import ClientNode  # noqa: E402
from fedlight.flower.codec import decode_task, encode_task, unpack, unpack_scores  # noqa: E402
from fedlight.flower.inline import InlineGrid, run_inline  # noqa: E402
from fedlight.flower.server import serve  # noqa: E402
from fedlight.flower.settings import load_run  # noqa: E402
from fedlight.flower.simulate import (  # noqa: E402
    RAY_ACCELERATOR_NOTE,
    RUN_SIMULATION_NOTE,
    simulate,
    without_engine_notes,
)
from fedlight.server.mean import WeightedMean  # noqa: E402
from tests.metric_rows import assert_same_rows  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TINY = ["--data.num_clients", "20", "--trainer.rounds", "2", "--trainer.join_ratio", "0.1",
        "--trainer.batch_size", "32", "--trainer.eval_every", "2",
        "--trainer.progress_bar", "false", "--trainer.verbose", "false", "--trainer.logger", "csv"]


def _tiny(tmp_path: Path, *extra: str) -> list[str]:
    return [*TINY, "--trainer.default_root_dir", str(tmp_path / "runs"), *extra]


def _fit(config: str, overrides: list[str]):
    return FedlightCLI(args=["fit", "-c", str(CONFIGS / config), *overrides]).trainer


def _flower(config: str, overrides: list[str], state_dir: Path, grid_class=InlineGrid):
    run = load_run(str(CONFIGS / config), tuple(overrides))
    grid = grid_class(build_client_app(str(CONFIGS / config), overrides, str(state_dir)),
                      run.datamodule.num_clients)
    return run, serve(grid, run)


@pytest.fixture(scope="module")
def fedavg_fit(tmp_path_factory):
    root = tmp_path_factory.mktemp("fit")
    return root, _fit("fedavg/mnist5k_dirichlet.yaml", _tiny(root))


def _same_run(outcome, trainer):
    assert set(outcome.global_state) == set(trainer.global_state)
    for key, value in trainer.global_state.items():
        torch.testing.assert_close(outcome.global_state[key], value.cpu(), rtol=1e-5, atol=1e-6)
    assert_same_rows(outcome.history, trainer.history, rel=1e-5)


def test_fedavg_under_flower_gives_the_global_state_of_fit(fedavg_fit, tmp_path):
    root, trainer = fedavg_fit
    _, outcome = _flower("fedavg/mnist5k_dirichlet.yaml", _tiny(root), tmp_path / "state")
    _same_run(outcome, trainer)
    folder = Path(outcome.summary["run_dir"])
    assert (folder / "metrics.csv").is_file()
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["engine"] == "flower" and summary["rounds"] == 2


class _RecordingGrid(InlineGrid):
    """Keeps every train reply, as the SuperLink would receive it."""

    def push_messages(self, messages):
        ids = list(super().push_messages(messages))
        self.sent = getattr(self, "sent", []) + [self.replies[i] for i in ids]
        return ids


def test_fedper_under_flower_matches_fit_and_keeps_the_head_on_the_client(tmp_path):
    overrides = _tiny(tmp_path)
    trainer = _fit("fedper/mnist5k_dirichlet.yaml", overrides)
    grids = []

    def grid(*args):
        grids.append(_RecordingGrid(*args))
        return grids[-1]

    run, outcome = _flower("fedper/mnist5k_dirichlet.yaml", overrides, tmp_path / "state", grid)
    assert [r["personalized_accuracy"] for r in outcome.history] == pytest.approx(
        [r["personalized_accuracy"] for r in trainer.history], rel=1e-6)
    assert outcome.history[-1]["global_accuracy"] is None  # FedPer has no global model

    head = set(run.model.partition.private)
    assert head and all(".head." in k for k in head)
    uploads = [m.content for m in grids[0].sent if "result" in m.content]
    assert len(uploads) == 2 * 2  # two rounds, a tenth of 20 clients
    for content in uploads:
        sent = set(content["arrays"]) | set(unpack(content["result"]["payload"]))
        assert sent == set(run.model.partition.shared) and not sent & head

    # The head lives on the client's disk; a restarted SuperNode reads it back as fit's.
    run_key = Path(outcome.summary["run_dir"]).name
    for client_id, private in trainer.client_states.items():
        node = ClientNode(run, client_id, tmp_path / "state" / run_key / f"client-{client_id}")
        node.restore(before=2)
        stored = node.runtime.population.states[client_id]
        assert set(stored) == head
        for key in head:
            torch.testing.assert_close(stored[key], private[key], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("config", [
    "gpfl/mnist5k_dirichlet.yaml",  # private modules and GPFL's own losses
    "map/mnist5k_incomplete.yaml",  # per-client HPM, scores right after training
    "fedproto/mnist5k_dirichlet.yaml",  # a payload up, a message down (prototypes)
])
def test_private_modules_payloads_and_scores_after_training_work_under_flower(tmp_path, config):
    overrides = _tiny(tmp_path, "--trainer.local_epochs", "1")
    out = []
    run_inline(build_server_app(str(CONFIGS / config), overrides, on_finish=out.append),
               build_client_app(str(CONFIGS / config), overrides, str(tmp_path / "state")), 20)
    (outcome,) = out
    assert [row["round"] for row in outcome.history] == [2]
    assert_same_rows(outcome.history, _fit(config, overrides).history, rel=1e-6)
    assert (Path(outcome.summary["run_dir"]) / "summary.json").is_file()
    assert list((tmp_path / "state").glob("*/client-*/round-*.pt"))


def test_dropout_under_flower_matches_fit(tmp_path):
    overrides = _tiny(tmp_path, "--trainer.join_ratio", "0.2", "--trainer.drop_rate", "0.5")
    trainer = _fit("fedavg/mnist5k_dirichlet.yaml", overrides)
    _, outcome = _flower("fedavg/mnist5k_dirichlet.yaml", overrides, tmp_path / "state")
    assert [r["dropped"] for r in outcome.history] == [2]
    _same_run(outcome, trainer)


def test_probes_are_refused_under_flower(tmp_path):
    with pytest.raises(ValueError, match="probes are not supported under Flower"):
        _flower("fedavg/mnist5k_dirichlet.yaml",
                _tiny(tmp_path, "--trainer.probes+=DLGProbe"), tmp_path / "state")


def test_a_flower_app_reads_devices_auto_as_one_process_and_keeps_a_count(tmp_path,
                                                                           monkeypatch):
    monkeypatch.setattr(cpus, "cpu_cores", lambda: 2)
    monkeypatch.setattr(cpus, "busy_cores", lambda window=0.25: 0.0)  # both cores idle
    config = str(CONFIGS / "fedavg/mnist5k_dirichlet.yaml")
    assert read_config(config, _tiny(tmp_path)).trainer.fabric.world_size == 2  # fedlight fit
    assert load_run(config, tuple(_tiny(tmp_path))).trainer.fabric.world_size == 1
    two = load_run(config, tuple(_tiny(tmp_path, "--trainer.devices", "2")))
    assert two.trainer.fabric.world_size == 2  # the engine refuses it (test below)


def test_a_client_id_outside_the_federation_is_rejected(tmp_path):
    run = load_run(str(CONFIGS / "fedavg/mnist5k_dirichlet.yaml"), tuple(_tiny(tmp_path)))
    with pytest.raises(ValueError, match="client id 20 is outside 0..19"):
        ClientNode(run, 20, tmp_path)


@pytest.mark.slow  # Flower's Ray engine (fedlight flower's default) takes ~35 s to start
def test_fedavg_on_flowers_ray_engine_gives_the_global_state_of_fit(fedavg_fit, tmp_path):
    root, trainer = fedavg_fit
    outcome = simulate(str(CONFIGS / "fedavg/mnist5k_dirichlet.yaml"), _tiny(root),
                       str(tmp_path / "state"))
    _same_run(outcome, trainer)


def test_fedlight_flower_command_writes_the_run_folder(tmp_path, capsys, monkeypatch, recwarn):
    monkeypatch.setenv("JSONARGPARSE_DEPRECATION_WARNINGS", "all")  # every note shown
    main(["flower", str(CONFIGS / "fedavg/mnist5k_dirichlet.yaml"), "--engine", "inline",
          *_tiny(tmp_path, "--data.num_clients", "4", "--trainer.rounds", "1")])
    folder = Path(capsys.readouterr().out.strip().splitlines()[-1].split(": ", 1)[1])
    assert {"metrics.csv", "summary.json", "config.yaml", "partition.json"} <= {
        p.name for p in folder.iterdir()}
    assert json.loads((folder / "summary.json").read_text())["num_clients"] == 4
    assert (folder / "config.yaml").read_text().startswith(
        f"# fedlight=={fedlight.__version__}\ntrainer:\n")
    # the server's and every client's reading of the config: no jsonargparse notes
    assert [str(w.message) for w in recwarn if issubclass(w.category, DeprecationWarning)] == []


def test_flowers_and_rays_notes_on_their_own_apis_are_dropped_and_the_rest_kept(recwarn):
    from flwr.common.logger import warn_deprecated_feature

    recorder = logging.handlers.BufferingHandler(capacity=100)
    flower_log = logging.getLogger("flwr")
    flower_log.addHandler(recorder)
    try:
        with without_engine_notes():
            warn_deprecated_feature(RUN_SIMULATION_NOTE + " and will be removed (Flower's text)")
            warn_deprecated_feature("another Flower feature")
            warnings.warn_explicit(RAY_ACCELERATOR_NOTE + " ...", FutureWarning, "worker.py", 1,
                                   module="ray._private.worker")
            warnings.warn("a note of fedlight's own", UserWarning, stacklevel=1)
    finally:
        flower_log.removeHandler(recorder)
    records = [record.getMessage() for record in recorder.buffer]
    assert len(records) == 1 and "another Flower feature" in records[0]
    assert [str(w.message) for w in recwarn] == ["a note of fedlight's own"]
    assert flower_log.filters == []


def test_the_example_flower_app_names_fedlights_apps_and_a_runnable_config():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    app = Path(__file__).resolve().parents[1] / "examples" / "flower"
    flwr_app = tomllib.loads((app / "pyproject.toml").read_text())["tool"]["flwr"]["app"]
    for reference in flwr_app["components"].values():
        module, attribute = reference.split(":")
        assert hasattr(importlib.import_module(module), attribute)
    run = load_run(str(app / flwr_app["config"]["config"]), ("--trainer.rounds", "1"))
    assert run.method == "FedAvg" and run.datamodule.num_clients == 4


# ----------------------------------------------------------------- lifecycle and defects
FEDAVG = "fedavg/mnist5k_dirichlet.yaml"
FOUR = ["--data.num_clients", "4", "--trainer.join_ratio", "1.0", "--trainer.eval_every", "1",
        "--trainer.checkpoint_every", "1"]


def _inline(tmp_path, overrides, num_nodes=4, state="state"):
    out = []
    run_inline(build_server_app(str(CONFIGS / FEDAVG), overrides, on_finish=out.append),
               build_client_app(str(CONFIGS / FEDAVG), overrides, str(tmp_path / state)),
               num_nodes)
    return out[0]


def test_the_same_config_served_twice_in_one_process_gives_the_same_run(tmp_path):
    overrides = _tiny(tmp_path, *FOUR, "--server", "FedAdam", "--server.lr", "0.05")
    first, second = _inline(tmp_path, overrides), _inline(tmp_path, overrides)
    for key, value in first.global_state.items():
        assert torch.equal(value, second.global_state[key]), key


def test_a_client_exception_under_flower_counts_as_a_dropped_client(tmp_path, monkeypatch):
    original = ClientNode.train

    def breaks_on_client_1(self, task):
        if self.client_id == 1 and task.round_idx == 1:
            raise RuntimeError("client 1 broke")
        return original(self, task)

    monkeypatch.setattr(ClientNode, "train", breaks_on_client_1)
    outcome = _inline(tmp_path, _tiny(tmp_path, *FOUR))
    assert [row.get("dropped", 0) for row in outcome.history] == [0, 1]
    assert outcome.summary["rounds"] == 2


class _FailsAtRoundTwo(WeightedMean):
    def end_round(self, collectives):
        if getattr(self, "ended", 0) == 1:
            raise RuntimeError("the server broke")
        self.ended = getattr(self, "ended", 0) + 1
        super().end_round(collectives)


def test_a_failed_flower_run_keeps_the_rounds_it_wrote(tmp_path):
    overrides = _tiny(tmp_path, *FOUR, "--trainer.checkpoint_every", "5")
    run = dataclasses.replace(load_run(str(CONFIGS / FEDAVG), tuple(overrides)),
                              server=_FailsAtRoundTwo())
    grid = InlineGrid(build_client_app(str(CONFIGS / FEDAVG), overrides,
                                       str(tmp_path / "state")), 4)
    with pytest.raises(RuntimeError, match="the server broke"):
        serve(grid, run)
    (folder,) = (tmp_path / "runs").iterdir()
    assert (folder / "metrics.csv").read_text().count("\n") == 2  # header + round 1


def test_a_flower_run_checkpoints_and_resumes_like_fit(tmp_path):
    whole = _inline(tmp_path, _tiny(tmp_path / "whole", *FOUR, "--trainer.rounds", "3"),
                    state="whole")
    _inline(tmp_path, _tiny(tmp_path, *FOUR))  # stops after round 2 of 3
    (folder,) = (tmp_path / "runs").iterdir()
    assert (folder / "checkpoints" / "last.ckpt").is_file()
    resumed = _inline(tmp_path, _tiny(tmp_path, *FOUR, "--trainer.rounds", "3",
                                      "--ckpt_path", "last"))
    assert resumed.summary["run_dir"] == str(folder)
    assert_same_rows(resumed.history, whole.history)
    for key, value in whole.global_state.items():
        assert torch.equal(value, resumed.global_state[key]), key


def test_a_wrong_number_of_supernodes_fails_at_once_naming_both_numbers(tmp_path):
    started = time.monotonic()
    with pytest.raises(ValueError, match="3 SuperNodes.*data.num_clients=4"):
        _inline(tmp_path, _tiny(tmp_path, *FOUR), num_nodes=3)
    assert time.monotonic() - started < 30
    assert not (tmp_path / "runs").exists()  # nothing written


def test_bfloat16_states_travel_bit_for_bit():
    state = {"w": torch.randn(3, 4).to(torch.bfloat16), "n": torch.tensor(7),
             "b": torch.randn(2)}
    task = TrainTask(2, 5, state, {"p": torch.ones(2, dtype=torch.bfloat16)}, True, 512.0, 3)
    decoded, run_key = decode_task(encode_task(task, "run-a"))
    assert run_key == "run-a" and decoded.loss_scale == 512.0 and decoded.keep_from == 3
    for key, value in state.items():
        assert decoded.shared[key].dtype == value.dtype and torch.equal(decoded.shared[key], value)
    assert torch.equal(decoded.message["p"], task.message["p"])


def test_class_counts_leave_a_client_only_when_the_run_shares_them(tmp_path):
    grids = []

    def grid(*args):
        grids.append(_RecordingGrid(*args))
        return grids[-1]

    overrides = _tiny(tmp_path, *FOUR, "--trainer.rounds", "1", "--trainer.share_class_counts",
                      "false")
    _, outcome = _flower(FEDAVG, overrides, tmp_path / "state", grid)
    scores = [unpack_scores(m.content["scores"]["scores"]) for m in grids[0].sent
              if "scores" in m.content]
    assert len(scores) == 4 and all(not s["personalized"].class_counts for s in scores)
    assert math.isnan(outcome.history[-1]["personalized_macro_f1"])


def test_the_flower_client_starts_from_the_rounds_loss_scale(tmp_path):
    run = load_run(str(CONFIGS / FEDAVG), tuple(_tiny(tmp_path, *FOUR)))
    node = ClientNode(run, 0, tmp_path / "client-0")
    node.runtime.grad_scale.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    shared = {k: v for k, v in run.model.state_dict().items() if k in run.model.partition.shared}
    result = node.train(TrainTask(0, 0, shared, {}, loss_scale=1024.0))
    assert node.runtime.grad_scale.scaler.get_scale() == 1024.0 and result.loss_scale == 1024.0


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="16-mixed (fp16 loss scaling) needs a GPU")
def test_fp16_loss_scale_under_flower_matches_fit(tmp_path):
    overrides = _tiny(tmp_path, *FOUR, "--trainer.accelerator", "cuda", "--trainer.precision",
                      "16-mixed")
    trainer = _fit(FEDAVG, overrides)
    outcome = _inline(tmp_path, overrides)
    assert trainer.grad_scale.value is not None
    assert load_run(str(CONFIGS / FEDAVG), tuple(overrides)).trainer.grad_scale.value == (
        trainer.grad_scale.value)
    _same_run(outcome, trainer)


def test_dp_fedavg_under_flower_matches_fit_with_epsilon_in_the_summary(tmp_path):
    config = "dp/fedavg_mnist5k_dirichlet.yaml"
    overrides = _tiny(tmp_path, *FOUR, "--trainer.rounds", "1")
    trainer = _fit(config, overrides)
    out = []
    run_inline(build_server_app(str(CONFIGS / config), overrides, on_finish=out.append),
               build_client_app(str(CONFIGS / config), overrides, str(tmp_path / "state")), 4)
    (outcome,) = out
    assert type(outcome.rule).__name__ == "DPFedAvg"
    _same_run(outcome, trainer)  # the same clipping and the same seeded noise
    summary = json.loads((Path(outcome.summary["run_dir"]) / "summary.json").read_text())
    assert summary["engine"] == "flower" and summary["dp_epsilon"] > 0
    assert summary["dp_epsilon"] == pytest.approx(trainer.server.summary(1)["dp_epsilon"])
    assert all(math.isfinite(row["dp_epsilon"]) for row in outcome.history)
