"""fedlight sweep with a search: section: an Optuna study over the sweep's cells, pruning on the
round-wise metric, resuming from its SQLite storage, and one-line errors for bad search specs.

Runs that must behave in a set way (hold after a round until they are stopped) are stood in
for by ``stand_in_run``, which writes metrics.csv as a run does; one test runs real tiny runs.
No outcome depends on timing: a held run waits until the search stops it."""

from __future__ import annotations

import csv
import json
import os
import signal
import time
from pathlib import Path

import optuna
import pytest
import yaml

import fedlight.sweep.search as search_module
from fedlight.cli import main
from fedlight.sweep import runner
from fedlight.sweep.search import STORAGE_FILE, exclusive
from fedlight.sweep.trial import PRUNED_FILE
from tests.test_sweep import BASE, write

LR = "model.init_args.lr"
METRIC = "val_personalized_accuracy"
VALIDATED = {**BASE, "data": {**BASE["data"], "val_fraction": 0.25},
             "trainer": {**BASE["trainer"], "rounds": 3}}
#: the stand-in runs' metric by learning rate, and their length
VALUES = {0.3: 0.9, 0.2: 0.8, 0.1: 0.7, 1e-6: 0.1}
ROUNDS = 3


def search(tmp_path, space=None, base=VALIDATED, **given):
    spec = {"metric": METRIC, "n_trials": 2, "pruner": "NopPruner",
            "space": {LR: {"type": "float", "low": 1e-6, "high": 0.5, "log": True}}
            if space is None else space,
            **given}
    return write(tmp_path, {"methods": ["FedAvg"], "search": spec}, base=base)


def run_search(path, out, *options):
    main(["sweep", str(path), "--out", str(out), *options])


def trials(out, name="sweep/FedAvg"):
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{out / STORAGE_FILE}")
    return study.get_trials()


def wait_for(condition, what):
    """Block until ``condition()`` (set by the test or the search); the deadline only turns a
    broken test into a failure instead of a hang."""
    deadline = time.monotonic() + 120
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.01)


def stand_in_run(config_file: str, resume: bool, *_: object) -> dict:
    """Stands in for a cell's run in its trial's process: writes metrics.csv round by round
    (the value VALUES[lr]) and summary.json, and appends its lr to calls.txt. A run whose lr
    is named in ``hold.txt`` waits after its first round until a signal stops it (SIGTERM
    as the search prunes, SIGINT as Ctrl-C), then stops as a run stopped after its round."""
    config = yaml.safe_load(Path(config_file).read_text())
    lr = config["model"]["init_args"]["lr"]
    folder = Path(config_file).with_suffix("")
    root = folder.parents[2]
    with (root / "calls.txt").open("a") as calls:
        calls.write(f"{lr}\n")
    held = (root / "hold.txt").is_file() and str(lr) in (root / "hold.txt").read_text().split()
    stops: list[int] = []
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda signum, frame: stops.append(signum))
    folder.mkdir(parents=True, exist_ok=True)
    metrics = folder / "metrics.csv"
    metrics.write_text(f"round,{METRIC},personalized_accuracy\n")
    for round_idx in range(1, ROUNDS + 1):
        with metrics.open("a") as handle:
            handle.write(f"{round_idx},{VALUES[lr]},{VALUES[lr]}\n")
        if held:
            wait_for(lambda: stops, f"a signal to the run of lr {lr}")
        if stops:
            raise KeyboardInterrupt
    (folder / "summary.json").write_text(json.dumps(
        {"method": "FedAvg", "rounds": ROUNDS, "best_personalized_accuracy": VALUES[lr]}))
    return {"wall": 0.0, "cpu": 0.0, "resumed": resume, "error": None}


@pytest.fixture
def stand_in(monkeypatch):
    monkeypatch.setattr(runner, "run_cell", stand_in_run)


def calls(tmp_path):
    path = tmp_path / "calls.txt"
    return [float(v) for v in path.read_text().split()] if path.is_file() else []


def test_a_trial_worse_than_the_median_is_pruned_on_real_runs(tmp_path):
    path = search(tmp_path, enqueue=[{LR: 0.3}, {LR: 1e-6}],
                  pruner={"name": "MedianPruner", "n_startup_trials": 1})
    out = tmp_path / "out"
    run_search(path, out)
    complete, pruned = trials(out)
    assert complete.state.name == "COMPLETE" and pruned.state.name == "PRUNED"
    runs = out / "runs"
    rows = [list(csv.DictReader((runs / t.user_attrs["run"] / "metrics.csv").open()))
            for t in (complete, pruned)]
    # the complete trial saw every round; its value is the best one
    assert complete.intermediate_values == {int(r["round"]): float(r[METRIC]) for r in rows[0]}
    assert complete.value == max(float(r[METRIC]) for r in rows[0])
    # the other was reported its first round only: below the median there, it was pruned
    first = float(rows[1][0][METRIC])
    assert pruned.intermediate_values == {1: first} and first < complete.intermediate_values[1]
    marker = json.loads((runs / pruned.user_attrs["run"] / PRUNED_FILE).read_text())
    assert marker == {"trial": 1, "round": 1, "metric": METRIC, "value": first}
    assert not (runs / f"{pruned.user_attrs['run']}.json").exists()  # no record: not finished
    table = list(csv.DictReader((out / "trials.csv").open()))
    assert [(r["trial"], r["state"], r["rounds reported"]) for r in table] == [
        ("0", "COMPLETE", "3"), ("1", "PRUNED", "1")]
    report = (out / "report.md").read_text()
    best = f"| sweep/FedAvg | 1 complete, 1 pruned | 0 | {complete.value:.4f} | {LR}=0.3 |"
    assert best in report
    rows = [line for line in report.splitlines() if line.startswith("| FedAvg")]
    assert len(rows) == 1 and rows[0].startswith("| FedAvg (trial 0: lr=0.3) |")
    assert len(list(csv.DictReader((out / "runs.csv").open()))) == 1


def test_a_pruned_trial_s_run_stops_after_the_round_it_was_pruned_at(tmp_path, stand_in):
    (tmp_path / "hold.txt").write_text("1e-06")  # it would wait forever unless stopped
    path = search(tmp_path, enqueue=[{LR: 0.3}, {LR: 1e-6}],
                  pruner={"name": "MedianPruner", "n_startup_trials": 1})
    out = tmp_path / "out"
    run_search(path, out)
    complete, pruned = trials(out)
    assert (complete.state.name, pruned.state.name) == ("COMPLETE", "PRUNED")
    folder = out / "runs" / pruned.user_attrs["run"]
    assert len(list(csv.DictReader((folder / "metrics.csv").open()))) == 1  # stopped there
    assert json.loads((folder / PRUNED_FILE).read_text())["round"] == 1
    assert complete.value == VALUES[0.3] and calls(tmp_path) == [0.3, 1e-6]


def test_a_stopped_search_resumes_without_running_a_finished_trial_again(tmp_path, stand_in,
                                                                          monkeypatch):
    (tmp_path / "hold.txt").write_text("0.2")
    path = search(tmp_path, n_trials=3, enqueue=[{LR: 0.3}, {LR: 0.2}, {LR: 0.1}])
    out = tmp_path / "out"
    advance = search_module.StudyRunner.advance

    def ctrl_c_in_the_second_trial(self, run):
        ended = advance(self, run)
        if run.trial.number == 1 and run.reported:  # its first round is in
            os.kill(run.process.pid, signal.SIGINT)  # Ctrl-C reaches the run...
            raise KeyboardInterrupt  # ... and the search
        return ended

    monkeypatch.setattr(search_module.StudyRunner, "advance", ctrl_c_in_the_second_trial)
    with pytest.raises(SystemExit) as stop:
        run_search(path, out)
    assert stop.value.code == 130
    assert [t.state.name for t in trials(out)] == ["COMPLETE", "RUNNING", "WAITING"]
    assert calls(tmp_path) == [0.3, 0.2]

    monkeypatch.setattr(search_module.StudyRunner, "advance", advance)
    (tmp_path / "hold.txt").unlink()
    (tmp_path / "calls.txt").unlink()
    run_search(path, out)
    assert calls(tmp_path) == [0.1, 0.2]  # the cut-off trial again, never the finished one
    states = [(t.number, t.state.name, t.params[LR], t.user_attrs.get("retry_of"))
              for t in trials(out)]
    assert states == [(0, "COMPLETE", 0.3, None), (1, "FAIL", 0.2, None),
                      (2, "COMPLETE", 0.1, None), (3, "COMPLETE", 0.2, 1)]
    run_search(path, out)  # finished: nothing runs
    assert calls(tmp_path) == [0.1, 0.2] and len(trials(out)) == 4
    table = list(csv.DictReader((out / "trials.csv").open()))
    assert [r["state"] for r in table] == ["COMPLETE", "FAIL", "COMPLETE", "COMPLETE"]


def test_trials_run_side_by_side_with_jobs(tmp_path, stand_in):
    path = search(tmp_path, n_trials=3, enqueue=[{LR: 0.3}, {LR: 0.2}, {LR: 0.1}])
    out = tmp_path / "out"
    run_search(path, out, "--jobs", "2")
    assert sorted(calls(tmp_path)) == [0.1, 0.2, 0.3]
    assert {(t.params[LR], t.value) for t in trials(out)} == {
        (lr, VALUES[lr]) for lr in (0.1, 0.2, 0.3)}
    assert "best trial" in (out / "report.md").read_text()
    assert len(list(csv.DictReader((out / "runs.csv").open()))) == 3


def test_a_metric_the_runs_do_not_write_stops_the_search_in_one_line(tmp_path, stand_in,
                                                                    capsys):
    path = search(tmp_path, metric="val_personalised_accuracy", enqueue=[{LR: 0.3}])
    with pytest.raises(SystemExit) as stop:
        run_search(path, tmp_path / "out")
    assert stop.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith(
        "error: search: metric 'val_personalised_accuracy' is not a column of ")
    assert f"its columns: round, {METRIC}, personalized_accuracy" in error[0]
    (trial,) = trials(tmp_path / "out")
    assert trial.state.name == "FAIL" and "is not a column" in trial.user_attrs["error"]


FLOAT = {"type": "float", "low": 1e-4, "high": 0.5}


@pytest.mark.parametrize("given, message", [
    ({"trials": 3}, "search: unknown key 'trials'; valid: metric, direction, n_trials"),
    ({"space": {LR: {**FLOAT, "type": "flot"}}},
     f"search: space: {LR}: unknown type 'flot'; valid: float, int, categorical"),
    ({"space": {LR: {**FLOAT, "low": 0.5, "high": 0.1}}},
     f"search: space: {LR}: low 0.5 is above high 0.1"),
    ({"space": {LR: {**FLOAT, "low": 0, "log": True}}}, f"search: space: {LR}: `low > 0`"),
    ({"space": {LR: {**FLOAT, "lo": 0.1}}},
     f"search: space: {LR}: unknown key 'lo' for type float; valid: low, high, log, step"),
    ({"space": {"trainer.local_epochs": {"type": "int", "low": 1.5, "high": 3}}},
     "search: space: trainer.local_epochs: low must be a whole number, got 1.5"),
    ({"space": {"model.init_args.lrr": FLOAT}},
     "FedAvg / lrr=0.0001 / seed 0: model: Option 'lrr' is not accepted; did you mean 'lr'?"),
    ({"space": {}}, "search: space is empty"),
    ({"pruner": "Median"}, "search: pruner: unknown pruner 'Median'; valid: MedianPruner, "
                           "PercentilePruner, SuccessiveHalvingPruner, HyperbandPruner"),
    ({"pruner": {"name": "MedianPruner", "warmup": 2}},
     "search: pruner MedianPruner: got an unexpected keyword argument 'warmup'; its arguments: "
     "n_startup_trials, n_warmup_steps, interval_steps, n_min_trials"),
    ({"pruner": {"name": "SuccessiveHalvingPruner", "reduction_factor": 1}},
     "search: pruner SuccessiveHalvingPruner: The value of `reduction_factor` is 1"),
    ({"metric": "val_acc"}, "search: metric 'val_acc' is not a column of metrics.csv; valid: "
                            "<output>_<score> or val_<output>_<score>"),
    ({"direction": "up"}, "search: direction: got 'up'; valid: maximize, minimize"),
    ({"n_trials": 0}, "search: n_trials must be a whole number of at least 1, got 0"),
    ({"enqueue": [{LR: 0.9}]}, f"search: enqueue: {LR}: 0.9 is outside its space "
                               "(0.0001 to 0.5)"),
    ({"enqueue": [{"model.init_args.mu": 0.1}]},
     f"search: enqueue: 'model.init_args.mu' is not a searched key; valid: {LR}"),
])
def test_bad_search_specs_fail_in_one_line_before_anything_is_written(tmp_path, capsys, given,
                                                                       message):
    path = search(tmp_path, **({"space": {LR: FLOAT}} | given))
    with pytest.raises(SystemExit) as stop:
        run_search(path, tmp_path / "out")
    assert stop.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("error: ") and message in error[0], error
    assert error[0].count("did you mean") <= 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("spec, message", [
    ({"grid": {LR: [0.1]}}, f"search: give the searched keys in search: space, not in grid "
                            f"(got grid: {LR})"),
    ({"seeds": 2}, "search: a trial is one run of one seed; got seeds [0, 1]"),
    ({"select": "validation"}, "search: the study chooses the point: leave select out"),
])
def test_a_search_refuses_what_it_cannot_combine_with(tmp_path, capsys, spec, message):
    path = write(tmp_path, {"search": {"metric": METRIC, "n_trials": 1, "space": {LR: FLOAT}},
                            **spec}, base=VALIDATED)
    with pytest.raises(SystemExit):
        run_search(path, tmp_path / "out")
    assert capsys.readouterr().err.strip() == f"error: {message}"


def test_a_validation_metric_needs_a_validation_split(tmp_path, capsys):
    path = search(tmp_path, base=BASE)
    with pytest.raises(SystemExit):
        run_search(path, tmp_path / "out")
    assert ("search: metric val_personalized_accuracy needs data.val_fraction > 0"
            in capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_one_search_runs_in_a_folder_and_a_study_keeps_its_metric(tmp_path, stand_in, capsys):
    path = search(tmp_path, n_trials=1, enqueue=[{LR: 0.3}])
    out = tmp_path / "out"
    run_search(path, out)
    assert ("search sweep/FedAvg: 1 of 1 trials done, 0 running, 0 left, ETA 0s"
            in capsys.readouterr().out)
    assert not (out / "search.lock").exists()  # a finished search leaves no lock
    with exclusive(out), pytest.raises(SystemExit):  # a search already runs there
        run_search(path, out, "--trials", "2")
    assert (f"error: another fedlight sweep is running the search in '{out}'"
            in capsys.readouterr().err)
    other = search(tmp_path, n_trials=1, metric="personalized_accuracy")
    with pytest.raises(SystemExit):
        run_search(other, out)
    assert (f"search: the study 'sweep/FedAvg' in '{out / STORAGE_FILE}' maximizes {METRIC}; "
            "this sweep says maximize personalized_accuracy: give another --name or --out"
            in capsys.readouterr().err)
    assert len(trials(out)) == 1 and calls(tmp_path) == [0.3]


def test_trials_on_the_command_line_needs_a_search(tmp_path, capsys):
    path = write(tmp_path, {"methods": ["FedAvg"]})
    with pytest.raises(SystemExit):
        run_search(path, tmp_path / "out", "--trials", "3")
    assert "error: --trials: the sweep has no search: section" in capsys.readouterr().err


def test_a_dry_run_checks_the_search_and_lists_its_studies(tmp_path, capsys):
    path = write(tmp_path, {"methods": ["FedAvg", "Local"],
                            "search": {"metric": METRIC, "n_trials": 4, "space": {LR: FLOAT}}},
                 base=VALIDATED)
    run_search(path, tmp_path / "out", "--dry-run")
    assert capsys.readouterr().out.splitlines() == [
        f"study sweep/{method}: 4 trials over {LR}" for method in ("FedAvg", "Local")]
    assert not (tmp_path / "out").exists()
