"""W&B as a researcher reads it, from an offline run's own files (WANDB_MODE=offline, set in
conftest; no mock): the full configuration with the run's labels as config keys, every figure
of summary.json in the run summary, W&B's step at the round count, the closing images at the
last round and a per-client table at every evaluated round."""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml

from fedlight.cli import main
from fedlight.sweep.plan import plan_cell
from fedlight.sweep.spec import Cell

ROUNDS = 3


def offline_run(folder: Path) -> Path:
    return next((folder / "wandb").glob("offline-run-*"))


def test_an_offline_run_carries_the_config_summary_and_rounds_of_the_run(tmp_path):
    runs = tmp_path / "runs"
    main(["fit", "--model", "FedAvg", "--model.init_args.backbone", "mlp", "--data.source",
          "Synthetic", "--data.num_clients", "3", "--data.source.samples", "90",
          "--data.source.shape", "[1,4,4]", "--trainer.rounds", str(ROUNDS),
          "--trainer.progress_bar", "false", "--trainer.verbose", "false",
          "--trainer.accelerator", "cpu", "--trainer.default_root_dir", str(runs),
          "--trainer.logger", "wandb", "--trainer.per_client_scores", "true",
          "--trainer.wandb_labels", '{"method": "FedAvg", "setting": "iid", "seed": 0}'])
    (folder,) = runs.iterdir()
    files = offline_run(folder) / "files"
    config = {key: entry["value"] for key, entry in
              yaml.safe_load((files / "config.yaml").read_text()).items()}
    # the full configuration, as the run's config.yaml holds it, and the labels beside it
    run_config = yaml.safe_load((folder / "config.yaml").read_text())
    assert {k: config[k] for k in run_config} == json.loads(json.dumps(run_config))
    assert config["trainer"]["rounds"] == ROUNDS
    assert config["data"]["source"]["class_path"].endswith(".Synthetic")
    assert (config["method"], config["setting"], config["seed"]) == ("FedAvg", "iid", 0)

    summary = json.loads((folder / "summary.json").read_text())
    logged = json.loads((files / "wandb-summary.json").read_text())
    for key in ("best_personalized_accuracy", "best_personalized_accuracy_round",
                "mean_last_personalized_accuracy", "last_personalized_accuracy",
                "report_window", "bytes_up", "bytes_down", "seconds"):
        assert key in summary, key
    assert {k: logged[k] for k in summary} == summary  # every figure of summary.json
    assert logged["_step"] == ROUNDS  # W&B's own step: the images did not advance it

    media = files / "media"
    images = sorted(p.name for p in (media / "images").iterdir())
    for key in ("accuracy", "partition"):  # at the last round (W&B names media <key>_<step>_)
        assert any(name.startswith(f"{key}_{ROUNDS}_") for name in images), images
    tables = sorted(p.name.split("_")[3] for p in (media / "table").glob("per_client_scores_*"))
    assert tables == [str(r) for r in range(1, ROUNDS + 1)]  # one per evaluated round
    assert list((media / "table").glob(f"per_client_accuracy_{ROUNDS}_*"))
    # the tags are in W&B's own file (written by its service, maybe after finish returns)
    deadline = time.monotonic() + 30
    while b"method=FedAvg" not in next(offline_run(folder).glob("run-*.wandb")).read_bytes():
        assert time.monotonic() < deadline, "the tags never reached the .wandb file"
        time.sleep(0.5)


def test_a_sweeps_runs_are_grouped_by_sweep_and_labelled_by_method_setting_and_seed(
        tmp_path):
    arguments = ("--model", "FedAvg", "--data.source", "Synthetic", "--trainer.rounds", "1")
    planned = plan_cell(Cell("FedAvg", "iid", (("model.init_args.lr", 0.1),), 2, arguments),
                        tmp_path, "my-sweep")
    trainer = planned.config["trainer"]
    assert trainer["wandb_group"] == "my-sweep"
    assert trainer["wandb_labels"] == {"sweep": "my-sweep", "method": "FedAvg",
                                       "setting": "iid lr=0.1", "seed": 2}


def test_wandb_is_online_with_a_key_from_the_environment_or_wandb_login(tmp_path,
                                                                         monkeypatch):
    from fedlight.federation.outputs.loggers import wandb_offline

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    assert wandb_offline()  # no key anywhere
    (tmp_path / "netrc").write_text("machine api.wandb.ai\n  login user\n  password k3y\n")
    assert not wandb_offline()  # what wandb login writes
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert wandb_offline()
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.setenv("NETRC", str(tmp_path / "none"))
    monkeypatch.setenv("WANDB_API_KEY", "k3y")
    assert not wandb_offline()
