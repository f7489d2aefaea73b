"""Round callbacks: the hooks a run calls and what they see, EarlyStopping's rule, an early stop
as a finished run that ``--ckpt_path last`` does not train past, its resume, its errors, and
the processes of a run stopping together."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from fedlight.cli import main
from fedlight.clients import FedAvg
from fedlight.core.errors import ConfigError
from fedlight.federation.callbacks import EarlyStopping, RoundCallback
from fedlight.federation.probes import Probe
from tests.conftest import make_client, tiny_data, tiny_trainer


class Recorder(RoundCallback):
    """Records every hook call with what it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def on_fit_start(self, trainer, client):
        self.calls.append(("fit_start", type(client).__name__))

    def on_round_start(self, trainer, client, round_idx):
        self.calls.append(("round_start", round_idx))

    def on_round_end(self, trainer, client, round_idx, metrics):
        self.calls.append(("round_end", round_idx, metrics.get("round"), "train_loss" in metrics))

    def on_fit_end(self, trainer, client, summary):
        self.calls.append(("fit_end", summary["rounds"]))


class Flat(Probe):
    """A metric column that never improves (1.0 every evaluated round)."""

    def on_round_end(self, trainer, round_idx):
        return {"flat": 1.0}


def test_hooks_are_called_in_order_with_each_rounds_metrics(tmp_path):
    recorder = Recorder()
    tiny_trainer(tmp_path, rounds=3, eval_every=2, callbacks=[recorder]).fit(
        make_client(FedAvg), tiny_data())
    assert recorder.calls == [
        ("fit_start", "FedAvg"),
        ("round_start", 0), ("round_end", 0, None, True),  # not evaluated: training columns
        ("round_start", 1), ("round_end", 1, 2, True),  # evaluated: the row
        ("round_start", 2), ("round_end", 2, 3, True),
        ("fit_end", 3)]


def fake_trainer():
    return SimpleNamespace(should_stop=False, stop_reason=None)


@pytest.mark.parametrize("mode, values, min_delta, stops_at", [
    ("max", [0.5, 0.6, 0.6, 0.59], 0.0, 4),  # 0.6 ties: not an improvement
    ("max", [0.5, 0.6, 0.65, 0.66], 0.0, None),
    ("max", [0.5, 0.6, 0.61, 0.62], 0.05, 4),  # under min_delta: not an improvement
    ("min", [1.0, 0.9, 0.95, 0.91], 0.0, 4),
    ("min", [1.0, 0.9, 0.8, 0.95], 0.0, None)])
def test_early_stopping_stops_after_patience_evaluations_without_improvement(
        mode, values, min_delta, stops_at):
    callback, trainer = EarlyStopping("m", patience=2, mode=mode, min_delta=min_delta), \
        fake_trainer()
    stopped = None
    for round_number, value in enumerate(values, 1):
        callback.on_round_end(trainer, None, round_number - 1,
                              {"round": round_number, "m": value})
        if trainer.should_stop and stopped is None:
            stopped = round_number
    assert stopped == stops_at
    if stops_at:
        assert trainer.stop_reason.startswith("EarlyStopping: m did not improve for 2 "
                                              "evaluations (best ")


def test_rounds_without_evaluation_do_not_count():
    callback, trainer = EarlyStopping("m", patience=1), fake_trainer()
    callback.on_round_end(trainer, None, 0, {"round": 1, "m": 0.5})
    callback.on_round_end(trainer, None, 1, {"train_loss": 0.3})  # not evaluated
    assert not trainer.should_stop and callback.wait == 0


def test_an_early_stop_finishes_the_run_and_last_does_not_train_past_it(tmp_path, capsys):
    trainer = tiny_trainer(tmp_path, rounds=6, run_name="early", probes=[Flat()],
                           callbacks=[EarlyStopping("flat", patience=2)])
    summary = trainer.fit(make_client(FedAvg), tiny_data())
    assert "fedlight: stopped early after round 3: EarlyStopping: flat did not improve for 2 " \
           "evaluations (best 1.0000 at round 1)" in capsys.readouterr().out
    assert [row["round"] for row in trainer.history] == [1, 2, 3]
    written = json.loads((trainer.run_dir / "summary.json").read_text())
    assert written["stopped_early_round"] == summary["stopped_early_round"] == 3
    assert written["stop_reason"].startswith("EarlyStopping: flat")
    assert (trainer.run_dir / "checkpoints" / "last.ckpt").is_file()
    again = tiny_trainer(tmp_path, rounds=6, run_name="early", probes=[Flat()],
                         callbacks=[EarlyStopping("flat", patience=2)])
    with pytest.raises(ConfigError, match=r"nothing to train: the run stopped early at round 3 "
                                          r"\(EarlyStopping: flat"):
        again.fit(make_client(FedAvg), tiny_data(), ckpt_path="last")


def test_a_resumed_run_stops_where_an_uninterrupted_one_does(tmp_path):
    def fit(name, rounds, ckpt_path=None):
        trainer = tiny_trainer(tmp_path, rounds=rounds, run_name=name, probes=[Flat()],
                               callbacks=[EarlyStopping("flat", patience=3)])
        return trainer.fit(make_client(FedAvg), tiny_data(), ckpt_path=ckpt_path)

    whole = fit("whole", 6)
    fit("parts", 2)  # ends with one evaluation without improvement counted
    resumed = fit("parts", 6, "last")
    assert whole["stopped_early_round"] == resumed["stopped_early_round"] == 4
    assert whole["best_personalized_accuracy"] == resumed["best_personalized_accuracy"]


def test_an_unknown_monitor_is_one_line_and_leaves_no_run(tmp_path):
    trainer = tiny_trainer(tmp_path, rounds=2, run_name="typo",
                           callbacks=[EarlyStopping("val_personalized_acuracy")])
    with pytest.raises(ConfigError) as error:
        trainer.fit(make_client(FedAvg), tiny_data())
    message = str(error.value)
    assert message.startswith("trainer.callbacks: EarlyStopping monitor "
                              "'val_personalized_acuracy' is not a metric of this run")
    assert "personalized_accuracy" in message and "\n" not in message
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("options, message", [
    ({"mode": "maximum"}, "EarlyStopping: mode must be 'min' or 'max', got 'maximum'"),
    ({"patience": 0}, "EarlyStopping: patience must be an integer >= 1, got 0"),
    ({"min_delta": -0.1}, "EarlyStopping: min_delta must be >= 0, got -0.1")])
def test_bad_early_stopping_options_are_refused(options, message):
    with pytest.raises(ConfigError, match=message):
        EarlyStopping("m", **options)


def test_a_callback_that_is_not_a_round_callback_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="trainer.callbacks: Flat is not a RoundCallback"):
        tiny_trainer(tmp_path, callbacks=[Flat()])


CLI_RUN = ["fit", "--model", "FedAvg", "--model.init_args.backbone", "mlp", "--data.source",
           "Synthetic", "--data.num_clients", "2", "--data.source.samples", "60",
           "--data.source.shape", "[1,4,4]", "--trainer.progress_bar", "false",
           "--trainer.verbose", "false", "--trainer.accelerator", "cpu"]


def test_yaml_callbacks_take_a_class_path_as_lightnings_do(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("trainer:\n  callbacks:\n    - class_path: EarlyStopping\n"
                      "      init_args: {monitor: train_loss, patience: 1, mode: max}\n")
    main([*CLI_RUN, "-c", str(config), "--trainer.rounds", "4",
          "--trainer.default_root_dir", str(tmp_path / "runs")])
    (summary_file,) = (tmp_path / "runs").glob("*/summary.json")
    summary = json.loads(summary_file.read_text())
    # train_loss falls round after round: under mode max, round 2 is not an improvement
    assert summary["rounds"] < 4 and summary["stop_reason"].startswith("EarlyStopping: ")


def test_an_unknown_callback_class_is_one_line_with_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FEDLIGHT_DEBUG", raising=False)
    runs = tmp_path / "runs"
    with pytest.raises(SystemExit) as exit_info:
        main([*CLI_RUN, "--trainer.callbacks+=EarlyStoping", "--trainer.default_root_dir",
              str(runs)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert "EarlyStoping" in err
    assert not runs.exists()


def test_the_processes_of_a_run_stop_together(tmp_path):
    trainer = tiny_trainer(tmp_path, rounds=6, run_name="ranks", threads=1, devices=2,
                           strategy="ddp_fork", probes=[Flat()],
                           callbacks=[EarlyStopping("flat", patience=2)])
    summary = trainer.fit(make_client(FedAvg), tiny_data())
    assert summary["stopped_early_round"] == 3
    rows = (trainer.run_dir / "metrics.csv").read_text().splitlines()
    assert len(rows) == 1 + 3
