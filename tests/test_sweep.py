"""fedlight sweep: grid expansion, the resolved-configuration cache, resuming a stopped sweep,
selection on validation and one-line errors for bad sweep files (tiny synthetic runs)."""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from fedlight.cli import main
from fedlight.sweep import (
    SweepError,
    cache_key,
    execute,
    load_sweep,
    plan_sweep,
    read_sweep,
    runner,
)
from fedlight.sweep.plan import CELL_TRAINER_OPTIONS

BASE = {
    "model": {"class_path": "GPFL", "init_args": {"backbone": "mlp", "lr": 0.1, "lamda": 0.01}},
    "data": {"source": {"class_path": "Synthetic",
                        "init_args": {"samples": 120, "shape": [1, 8, 8], "classes": 4}},
             "num_clients": 3, "partition": {"class_path": "IID"}},
    "trainer": {"rounds": 1, "batch_size": 16, "accelerator": "cpu", "eval_every": 1},
}


def write(tmp_path, spec, base=BASE):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"base": "base.yaml", **spec}))
    return path


def options(**given):
    defaults = dict(config=None, methods=None, settings=None, seeds=None, set=None, grid=None,
                    name=None, select=None, trials=None)
    return argparse.Namespace(**{**defaults, **given})


def test_grid_expands_methods_settings_points_and_seeds(tmp_path):
    spec = {"methods": {"FedAvg": "FedAvg", "FedRep-1": {"class_path": "FedRep",
                                                         "init_args": {"head_epochs": 1}}},
            "settings": {"iid": {"data.partition": {"class_path": "IID"}},
                         "dir": {"data": {"partition": {"class_path": "Dirichlet",
                                                        "init_args": {"beta": 0.5}}}}},
            "grid": {"model.init_args.lr": [0.1, 0.05]}, "seeds": 2,
            "seed_keys": ["trainer.seed", "data.seed"]}
    sweep = read_sweep(spec, tmp_path, "name")
    assert len(sweep.cells) == 2 * 2 * 2 * 2
    cell = next(c for c in sweep.cells if c.method == "FedRep-1" and c.setting == "dir"
                and c.point == (("model.init_args.lr", 0.05),) and c.seed == 1)
    assert cell.row == "dir lr=0.05"
    args = list(cell.args)
    # the setting, then the method's class and arguments, the grid point and the seed
    order = ['--data.partition={"class_path": "Dirichlet", "init_args": {"beta": 0.5}}',
             "--model=FedRep",
             "--model.init_args.head_epochs=1", "--model.init_args.lr=0.05", "--trainer.seed=1",
             "--data.seed=1"]
    assert [a for a in args if a in order] == order


def test_cells_resolve_like_fit_and_key_by_what_they_compute(tmp_path):
    path = write(tmp_path, {"methods": ["FedAvg", "GPFL"], "seeds": [0, 1]})
    planned = plan_sweep(load_sweep(path, options()), tmp_path / "out")
    fedavg = planned[0].config
    # --model FedAvg keeps the base's model arguments FedAvg accepts and drops GPFL's lamda
    assert fedavg["model"]["class_path"].endswith("FedAvg")
    assert fedavg["model"]["init_args"]["lr"] == 0.1 and "lamda" not in fedavg["model"]["init_args"]
    assert fedavg["trainer"]["threads"] == 1 and fedavg["trainer"]["wandb_group"] == "sweep"
    assert fedavg["trainer"]["devices"] == 1  # --jobs runs side by side, one process each
    assert len({p.name for p in planned}) == 4
    again = plan_sweep(load_sweep(path, options(set=["trainer.verbose=true"])), tmp_path / "out")
    assert [p.name for p in again] == [p.name for p in planned]  # output options: same key
    longer = plan_sweep(load_sweep(path, options(set=["trainer.rounds=2"])), tmp_path / "out")
    assert not {p.name for p in longer} & {p.name for p in planned}


def test_rerun_hits_the_cache_and_tables_rounds_and_times(tmp_path, monkeypatch, capsys):
    path = write(tmp_path, {"methods": ["FedAvg"], "seeds": 2,
                            "columns": ["personalized_accuracy_mean"]})
    out = tmp_path / "out"
    main(["sweep", str(path), "--out", str(out)])
    assert "2 runs, 0 cached, 2 to run" in capsys.readouterr().out
    records = sorted((out / "runs").glob("*.json"))
    stamps = [r.stat().st_mtime_ns for r in records]

    def must_not_run(*args):
        raise AssertionError("a finished cell ran again")

    monkeypatch.setattr(runner, "run_cell", must_not_run)
    main(["sweep", str(path), "--out", str(out)])
    assert "2 runs, 2 cached, 0 to run" in capsys.readouterr().out
    assert [r.stat().st_mtime_ns for r in records] == stamps
    report = (out / "report.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| FedAvg"))
    assert "| 1 | 2 |" in row  # rounds, seeds
    assert "wall s / run" in report and (out / "curves.png").stat().st_size > 1000
    assert "last personalized_accuracy_mean" in report
    results = list(csv.DictReader((out / "results.csv").open()))
    assert results[0]["seeds"] == "2" and float(results[0]["wall s / run mean"]) > 0
    assert len(list(csv.DictReader((out / "runs.csv").open()))) == 2


def test_report_only_tables_the_finished_runs_and_runs_nothing(tmp_path, monkeypatch):
    path = write(tmp_path, {"methods": ["FedAvg"], "seeds": 1})
    out = tmp_path / "out"
    main(["sweep", str(path), "--out", str(out)])

    def must_not_run(*args):
        raise AssertionError("--report-only ran a cell")

    monkeypatch.setattr(runner, "run_cell", must_not_run)
    wider = write(tmp_path, {"methods": ["FedAvg", "Local"], "seeds": 1})
    main(["sweep", str(wider), "--out", str(out), "--report-only"])
    rows = list(csv.DictReader((out / "runs.csv").open()))
    assert [r["method"] for r in rows] == ["FedAvg"]
    assert ("1 of the sweep's 2 runs have ended (finished or failed); the rest have not started "
            "or are still running.") in (out / "report.md").read_text()
    assert not list((out / "runs").glob("Local-*"))
    narrow = write(tmp_path, {"methods": ["FedAvg"], "seeds": 1})  # every run has ended
    main(["sweep", str(narrow), "--out", str(out), "--report-only"])
    assert "runs have ended" not in (out / "report.md").read_text()


def test_an_abbreviated_sweep_option_is_refused_in_one_line(tmp_path, capsys):
    path = write(tmp_path, {"methods": ["FedAvg"], "seeds": 1})
    with pytest.raises(SystemExit) as stopped:
        main(["sweep", str(path), "--out", str(tmp_path / "out"), "--job", "2"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--job" in err
    assert not (tmp_path / "out").exists()


def test_report_only_with_no_finished_run_is_a_one_line_error(tmp_path, capsys):
    path = write(tmp_path, {"methods": ["FedAvg"], "seeds": 2})
    with pytest.raises(SystemExit):
        main(["sweep", str(path), "--out", str(tmp_path / "out"), "--report-only"])
    assert "--report-only: none of the sweep's 2 runs has finished" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_stopped_sweep_resumes_without_rerunning_finished_cells(tmp_path, monkeypatch):
    path = write(tmp_path, {"methods": ["FedAvg", "Local"]})
    out = tmp_path / "out"
    real_run = runner.run_cell
    calls = []

    def stop_at_second(config_file, resume, *rest):
        calls.append(config_file)
        if len(calls) == 2:  # the sweep is killed while its second run starts
            raise KeyboardInterrupt
        return real_run(config_file, resume, *rest)

    monkeypatch.setattr(runner, "run_cell", stop_at_second)
    with pytest.raises(SystemExit) as stop:
        main(["sweep", str(path), "--out", str(out)])
    assert stop.value.code == 130
    first, second = sorted(p for p in (out / "runs").glob("*.yaml"))
    assert first.with_suffix(".json").is_file() and not second.with_suffix(".json").exists()
    partial = out / "runs" / second.stem
    (partial / "checkpoints").mkdir(parents=True)  # what a run stopped in round 1 leaves
    (partial / "metrics.csv").write_text("round\n")
    calls.clear()
    main(["sweep", str(path), "--out", str(out)])
    assert calls == [str(second)]
    assert json.loads(second.with_suffix(".json").read_text())["error"] is None
    assert (partial / "summary.json").is_file()


JOBS = 2


def wait_for(path: Path) -> None:
    """Block until ``path`` exists (what the test controls); the deadline only turns a
    broken test into a failure instead of a hang."""
    deadline = time.monotonic() + 120
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.01)


def start_then_interrupt_the_sweep(config_file: str, resume: bool, *_: object) -> dict:
    """A cell (run in a pool worker) that marks that it started. Once JOBS cells have started
    (every worker busy), one of them interrupts the sweep's process as Ctrl-C would; each
    then waits until that process has taken the interrupt (its handler writes ``released``)
    and ends as a stopped run does. No cell can end before the interrupt, whatever the load."""
    runs = Path(config_file).parent
    Path(config_file).with_suffix(".started").touch()
    if len(list(runs.glob("*.started"))) == JOBS:  # the last of the first JOBS to start
        with contextlib.suppress(FileExistsError):
            (runs / "interrupted").touch(exist_ok=False)
            os.kill(os.getppid(), signal.SIGINT)
    wait_for(runs / "released")
    return {"wall": 1.0, "cpu": 1.0, "error": None}


def test_ctrl_c_on_a_parallel_sweep_starts_no_further_cell(tmp_path, monkeypatch):
    path = write(tmp_path, {"methods": ["FedAvg"], "seeds": 5})
    out = tmp_path / "out"
    monkeypatch.setattr(runner, "run_cell", start_then_interrupt_the_sweep)

    def take_the_interrupt(signum, frame):
        (out / "runs" / "released").touch()  # the running cells may end now
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, take_the_interrupt)
    try:
        with pytest.raises(SystemExit) as stop:
            main(["sweep", str(path), "--out", str(out), "--jobs", str(JOBS)])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert stop.value.code == 130
    # the pool has been shut down (its workers joined): a cell handed to it has run by now
    assert len(list((out / "runs").glob("*.started"))) == JOBS  # only the running cells
    assert not list((out / "runs").glob("*.json"))  # nothing recorded as done


def test_select_chooses_the_grid_point_on_validation(tmp_path):
    path = write(tmp_path, {"methods": ["FedAvg"], "overrides": {"data.val_fraction": 0.2},
                            "grid": {"model.init_args.lr": [0.1, 1e-5]}, "select": "validation"})
    main(["sweep", str(path), "--out", str(tmp_path / "out")])
    selection = (tmp_path / "out" / "selection.md").read_text()
    runs = list(csv.DictReader((tmp_path / "out" / "runs.csv").open()))
    best = max(runs, key=lambda r: float(r["best val personalized"]))
    chosen = next(line for line in selection.splitlines() if line.startswith("| FedAvg"))
    assert f"lr={best['setting'].split('lr=')[1]}" in chosen


@pytest.mark.parametrize("spec, message", [
    ({"method": ["FedAvg"]}, "unknown sweep key 'method'; valid: name, base, overrides"),
    ({"methods": {"A": {"class": "FedAvg"}}},
     "methods: A: unknown key 'class'; valid: class_path, init_args, config, overrides"),
    ({"methods": ["GPLF"]}, "GPLF / base / seed 0: unknown model 'GPLF'; valid: "),
    ({"methods": []}, "methods is empty"),
    ({"grid": {"model.init_args.lr": []}}, "grid: model.init_args.lr must be a non-empty list"),
    ({"seeds": 0}, "seeds must be at least 1, got 0"),
    ({"base": "missing.yaml"}, "base config '"),
    ({"overrides": {"data.sed": 1}}, "did you mean 'data.seed'"),
    ({"grid": {"model.init_args.lr": [0.1]}, "select": "validation"},
     "select: validation needs data.val_fraction > 0"),
    ({"select": "test"}, "select: unknown mode 'test'; valid: validation"),
])
def test_bad_sweep_files_fail_in_one_line_before_any_run(tmp_path, capsys, spec, message):
    path = write(tmp_path, spec)
    with pytest.raises(SystemExit) as stop:
        main(["sweep", str(path), "--out", str(tmp_path / "out")])
    assert stop.value.code == 2
    error = capsys.readouterr().err.splitlines()[0]
    assert error.startswith("error: ") and message in error, error
    assert error.count("did you mean") <= 1, error  # a hint is given once
    assert not (tmp_path / "out").exists()


def test_a_file_that_is_not_a_sweep_is_refused(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text("- FedAvg\n")
    with pytest.raises(SweepError, match="must hold a mapping"):
        load_sweep(path, options())


SWEEPS = sorted((Path(__file__).resolve().parents[1] / "benchmarks" / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_shipped_sweep_files_expand_and_resolve(tmp_path, path):
    """Every benchmark sweep file expands, and its first and last run resolve as fit configs
    (resolving reads no data: an image folder that is not there is fine)."""
    spec = yaml.safe_load(path.read_text())
    sweep = load_sweep(path, options())
    # a table has several cells; a search file one study (its trials are drawn as it runs)
    assert sweep.name == path.stem and len(sweep.cells) >= (1 if "search" in spec else 3)
    sweep.cells = list(dict.fromkeys([sweep.cells[0], sweep.cells[-1]]))
    assert len(plan_sweep(sweep, tmp_path)) == len(sweep.cells)


def test_command_line_lists_replace_and_extend_the_file(tmp_path):
    path = write(tmp_path, {"methods": {"A": "FedAvg", "B": "Local"},
                            "settings": {"iid": {},
                                         "dir": {"data.partition": {"class_path": "Dirichlet"}}}})
    sweep = load_sweep(path, options(methods=["B", "FedPer"], settings=["dir"], seeds=[3],
                                     set=["trainer.rounds=2"],
                                     grid=["model.init_args.lr=0.1,0.01"]))
    assert [(c.method, c.setting, c.point, c.seed) for c in sweep.cells] == [
        (m, "dir", (("model.init_args.lr", lr),), 3) for m in ("B", "FedPer")
        for lr in (0.1, 0.01)]
    assert "--model=Local" in sweep.cells[0].args and "--trainer.rounds=2" in sweep.cells[0].args
    with pytest.raises(SweepError, match="--settings: unknown setting 'nope'; valid: dir, iid"):
        load_sweep(path, options(settings=["nope"]))


@pytest.mark.parametrize("option, neutral_value, other", [
    ("batched_clients", "auto", 4), ("cuda_graphs", True, False), ("max_local_steps", None, 250),
    ("random_join_ratio", False, True), ("report_last", 10, 5)])
def test_an_option_at_its_neutral_default_leaves_the_cache_key_unchanged(option, neutral_value,
                                                                        other):
    before = {"model": {"class_path": "FedAvg"}, "trainer": {"rounds": 3, "seed": 0}}
    neutral = {**before, "trainer": {**before["trainer"], option: neutral_value}}
    changed = {**before, "trainer": {**before["trainer"], option: other}}
    assert cache_key(neutral) == cache_key(before) != cache_key(changed)
    assert neutral["trainer"][option] == neutral_value  # the config itself is not changed


def test_per_client_scores_are_on_in_every_cell_and_out_of_the_cache_key():
    before = {"model": {"class_path": "FedAvg"}, "trainer": {"rounds": 3, "seed": 0}}
    on = {**before, "trainer": {**before["trainer"], "per_client_scores": True}}
    assert cache_key(on) == cache_key(before)
    assert CELL_TRAINER_OPTIONS["per_client_scores"] is True


def crash_one_cell_while_another_runs(config_file: str, resume: bool, *_: object) -> dict:
    """Two cells (pool workers): the first to start crashes with a bug (not a user error) once
    both have started; the other ends only once the sweep's process has learnt of that crash
    (``crash-known``), so it is still running then."""
    runs = Path(config_file).parent
    Path(config_file).with_suffix(".started").touch()
    try:
        (runs / "crasher").touch(exist_ok=False)
    except FileExistsError:  # the other cell
        wait_for(runs / "crash-known")
        return {"wall": 1.0, "cpu": 1.0, "error": None}
    while len(list(runs.glob("*.started"))) < JOBS:
        time.sleep(0.01)
    raise RuntimeError("a bug in a run")


def test_a_crashing_cell_stops_the_sweep_after_recording_the_cells_still_running(
        tmp_path, monkeypatch, capsys):
    path = write(tmp_path, {"methods": ["FedAvg"], "seeds": 3})
    out = tmp_path / "out"
    monkeypatch.setattr(runner, "run_cell", crash_one_cell_while_another_runs)
    announce = execute.announce_crash

    def announce_and_release(running: int) -> None:
        announce(running)
        (out / "runs" / "crash-known").touch()

    monkeypatch.setattr(execute, "announce_crash", announce_and_release)
    with pytest.raises(SystemExit) as stop:
        main(["sweep", str(path), "--out", str(out), "--jobs", str(JOBS)])
    assert stop.value.code == 1
    err = capsys.readouterr().err
    assert "RuntimeError: a bug in a run" in err  # with its traceback
    assert "a run crashed; stopping after the 1 still running" in err
    records = list((out / "runs").glob("*.json"))
    assert len(records) == 1  # the cell running beside the crash, and no cell started after
    assert len(list((out / "runs").glob("*.started"))) == JOBS
    assert json.loads(records[0].read_text())["error"] is None


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_sweeps_progress_counts_runs_done_running_and_left_with_an_eta():
    clock = Clock()
    progress = execute.SweepProgress(10, clock=clock)
    assert progress.line(0, 2) == "sweep: 0 of 10 runs done, 2 running, 8 left, ETA -"
    clock.now = 60.0  # two runs a minute with two at a time: 8 to go take 4 minutes
    assert progress.line(2, 2) == "sweep: 2 of 10 runs done, 2 running, 6 left, ETA 4:00"
    assert progress.line(10, 0) == "sweep: 10 of 10 runs done, 0 running, 0 left, ETA 0s"


def test_a_sweep_prints_its_progress_as_each_run_ends(tmp_path, monkeypatch, capsys):
    path = write(tmp_path, {"methods": ["FedAvg", "Local"]})
    monkeypatch.setattr(runner, "run_cell", lambda *args: {"wall": 1.0, "cpu": 1.0,
                                                           "error": None})
    with pytest.raises(SystemExit):  # the stand-in writes no run files to table
        main(["sweep", str(path), "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert "sweep: 1 of 2 runs done, 0 running, 1 left, ETA " in out
    assert "sweep: 2 of 2 runs done, 0 running, 0 left, ETA 0s" in out


def test_an_interrupted_sweep_says_to_rerun_the_same_command(tmp_path, monkeypatch, capsys):
    path = write(tmp_path, {"methods": ["FedAvg", "Local"]})
    out = tmp_path / "out"
    given = []

    def stopped_run(config_file, resume, resume_command=None):
        given.append(resume_command)
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run_cell", stopped_run)
    with pytest.raises(SystemExit) as stop:
        main(["sweep", str(path), "--out", str(out)])
    assert stop.value.code == 130
    command = f"fedlight sweep {path} --out {out}"
    assert (f"sweep: stopped; finished runs are kept and stopped runs resume from their last "
            f"checkpoint; resume with the same command: {command}") in capsys.readouterr().err
    assert given == [f"{command} (the same sweep command; it resumes this run from its "
                     "checkpoint)"]  # what the stopped run prints after its resume with:


def test_a_stopped_run_of_a_sweep_names_the_sweeps_command(tmp_path, capsys):
    from fedlight.clients import FedAvg
    from fedlight.federation.callbacks import RoundCallback
    from tests.conftest import make_client, tiny_data, tiny_trainer

    class CtrlC(RoundCallback):
        def on_round_end(self, trainer, client, round_idx, metrics):
            os.kill(os.getpid(), signal.SIGINT)  # the first Ctrl-C: stop after this round

    trainer = tiny_trainer(tmp_path, rounds=3, callbacks=[CtrlC()])
    trainer.resume_command = "fedlight sweep s.yaml"
    with pytest.raises(KeyboardInterrupt):
        trainer.fit(make_client(FedAvg), tiny_data())
    assert "resume with: fedlight sweep s.yaml" in capsys.readouterr().err


def test_callbacks_and_wandb_labels_leave_the_cache_key_unchanged():
    before = {"model": {"class_path": "FedAvg"}, "trainer": {"rounds": 3, "seed": 0}}
    unset = {**before, "trainer": {**before["trainer"], "callbacks": None,
                                   "wandb_labels": {"method": "FedAvg"}}}
    stopping = {**before, "trainer": {**before["trainer"], "callbacks": [
        {"class_path": "EarlyStopping", "init_args": {"monitor": "train_loss"}}]}}
    assert cache_key(unset) == cache_key(before) != cache_key(stopping)
