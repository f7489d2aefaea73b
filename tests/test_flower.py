"""fedlight under Flower: the same client modules and server rules, driven by Flower's
ClientApp / ServerApp / Strategy, give the run fedlight fit gives."""

import importlib
import json
import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("flwr")

from fedlight.cli import FedlightCLI, main  # noqa: E402
from fedlight.flower import build_client_app, build_server_app  # noqa: E402
from fedlight.flower.client import ClientNode  # noqa: E402
from fedlight.flower.codec import unpack  # noqa: E402
from fedlight.flower.inline import InlineGrid, run_inline  # noqa: E402
from fedlight.flower.server import serve  # noqa: E402
from fedlight.flower.settings import load_run  # noqa: E402
from fedlight.flower.simulate import simulate  # noqa: E402

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


def _rows(history):
    return [{k: v for k, v in row.items() if k != "seconds"} for row in history]


@pytest.fixture(scope="module")
def fedavg_fit(tmp_path_factory):
    root = tmp_path_factory.mktemp("fit")
    return root, _fit("fedavg/mnist5k_dirichlet.yaml", _tiny(root))


def _same_run(outcome, trainer):
    assert set(outcome.global_state) == set(trainer.global_state)
    for key, value in trainer.global_state.items():
        torch.testing.assert_close(outcome.global_state[key], value.cpu(), rtol=1e-5, atol=1e-6)
    for ours, theirs in zip(_rows(outcome.history), _rows(trainer.history), strict=True):
        assert ours == pytest.approx(theirs, rel=1e-5)


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
        stored = node.population.states[client_id]
        assert set(stored) == head
        for key in head:
            torch.testing.assert_close(stored[key], private[key], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("config", "compare"), [
    ("gpfl/mnist5k_dirichlet.yaml", False),  # private modules and GPFL's own losses
    ("map/mnist5k_incomplete.yaml", True),  # per-client HPM, scores right after training
    ("fedproto/mnist5k_dirichlet.yaml", True),  # a payload up, a message down (prototypes)
])
def test_private_modules_payloads_and_scores_after_training_work_under_flower(
        tmp_path, config, compare):
    overrides = _tiny(tmp_path, "--trainer.local_epochs", "1")
    out = []
    run_inline(build_server_app(str(CONFIGS / config), overrides, on_finish=out.append),
               build_client_app(str(CONFIGS / config), overrides, str(tmp_path / "state")), 20)
    (outcome,) = out
    assert [row["round"] for row in outcome.history] == [2]
    if compare:
        assert outcome.summary["last_personalized_accuracy"] == pytest.approx(
            _fit(config, overrides).history[-1]["personalized_accuracy"], rel=1e-6)
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


def test_a_client_id_outside_the_federation_is_rejected(tmp_path):
    run = load_run(str(CONFIGS / "fedavg/mnist5k_dirichlet.yaml"), tuple(_tiny(tmp_path)))
    with pytest.raises(ValueError, match="client id 20 is outside 0..19"):
        ClientNode(run, 20, tmp_path)


@pytest.mark.skipif(os.environ.get("FEDLIGHT_TEST_RAY") != "1",
                    reason="Flower's Ray engine takes ~35 s to start here; FEDLIGHT_TEST_RAY=1")
def test_fedavg_on_flowers_ray_engine_gives_the_global_state_of_fit(fedavg_fit, tmp_path):
    root, trainer = fedavg_fit
    outcome = simulate(str(CONFIGS / "fedavg/mnist5k_dirichlet.yaml"), _tiny(root),
                       str(tmp_path / "state"))
    _same_run(outcome, trainer)


def test_fedlight_flower_command_writes_the_run_folder(tmp_path, capsys):
    main(["flower", str(CONFIGS / "fedavg/mnist5k_dirichlet.yaml"), "--engine", "inline",
          *_tiny(tmp_path, "--data.num_clients", "4", "--trainer.rounds", "1")])
    folder = Path(capsys.readouterr().out.strip().splitlines()[-1].split(": ", 1)[1])
    assert {"metrics.csv", "summary.json", "config.yaml", "partition.json"} <= {
        p.name for p in folder.iterdir()}
    assert json.loads((folder / "summary.json").read_text())["num_clients"] == 4


def test_the_example_flower_app_names_fedlights_apps_and_a_runnable_config():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    app = Path(__file__).resolve().parents[1] / "examples" / "flower"
    flwr_app = tomllib.loads((app / "pyproject.toml").read_text())["tool"]["flwr"]["app"]
    for reference in flwr_app["components"].values():
        module, attribute = reference.split(":")
        assert hasattr(importlib.import_module(module), attribute)
    run = load_run(str(app / flwr_app["config"]["config"]), ("--trainer.rounds", "1"))
    assert run.method == "FedAvg" and run.datamodule.num_clients == 4
