"""A sweep's ``search:``: an Optuna study per method and setting, each trial a cell run by the
sweep's runner in a process of its own; the metric's value of every evaluated round is
reported to the trial as the run writes it, and a trial the pruner stops is stopped at the
end of its round. The studies live in ``<out>/optuna.db`` (SQLite): a search stopped or
killed part-way resumes, trials cut off mid-run are tried again (their runs resume from
their checkpoints) and finished trials never run again."""

from __future__ import annotations

import collections
import contextlib
import csv
import fcntl
import itertools
import math
from collections.abc import Iterator
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import BaseTrial, TrialState

from fedlight.core.files import csv_number
from fedlight.sweep.execute import SweepProgress, finish
from fedlight.sweep.plan import Planned, check_validation_split, plan_cell
from fedlight.sweep.search_spec import SearchSpec
from fedlight.sweep.spec import Cell, Sweep
from fedlight.sweep.sweep_file_error import SweepError
from fedlight.sweep.trial import TrialRun

STORAGE_FILE = "optuna.db"
LOCK_FILE = "search.lock"
#: How often running trials' metrics.csv files are read (a trial that ends is seen at once).
POLL_SECONDS = 0.5


def studies(sweep: Sweep) -> list[tuple[str, str]]:
    """(method, setting) of each study: one per method and setting of the sweep."""
    return list(itertools.product(sweep.method_arguments, sweep.setting_arguments))


def study_name(sweep: Sweep, method: str, setting: str) -> str:
    return "/".join(part for part in (sweep.name, method, setting) if part)


def check_search(sweep: Sweep, out: Path) -> None:
    """Before any study is made: each method and setting resolves with every searched key
    at its low end (a key ``fedlight fit`` does not know fails here), and a ``val_`` metric
    has its validation split."""
    spec: SearchSpec = sweep.search
    for method, setting in studies(sweep):
        cell = sweep.cell(method, setting, spec.first_point(), sweep.cells[0].seed)
        item = plan_cell(cell, out, sweep.name)
        if spec.metric.startswith("val_"):
            check_validation_split(item, f"search: metric {spec.metric}")


@contextlib.contextmanager
def exclusive(out: Path) -> Iterator[None]:
    """Hold the search's lock: its running trials are this process's, so that a trial the
    storage holds as running is one a stopped or killed search left behind. The lock file
    goes when the search ends (finished or stopped; a killed search leaves it, unlocked)."""
    path = out / LOCK_FILE
    with path.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SweepError(f"another fedlight sweep is running the search in {str(out)!r}; "
                             "wait for it to end") from None
        try:
            yield
        finally:
            path.unlink(missing_ok=True)  # while still locked: no other search holds it yet


def open_study(sweep: Sweep, out: Path, name: str) -> optuna.Study:
    """The study ``name`` in ``<out>/optuna.db``, made or loaded; its sampler (Optuna's
    TPE) seeded with sampler_seed plus the trials it holds, so that a resumed study draws
    new points rather than its first ones again."""
    spec: SearchSpec = sweep.search
    storage = f"sqlite:///{(out / STORAGE_FILE).resolve()}"
    study = optuna.create_study(storage=storage, study_name=name, direction=spec.direction,
                                load_if_exists=True)
    stored = study.user_attrs.get("metric", spec.metric)
    direction = study.direction.name.lower()
    if (stored, direction) != (spec.metric, spec.direction):
        raise SweepError(f"search: the study {name!r} in {str(out / STORAGE_FILE)!r} "
                         f"{direction}s {stored}; this sweep says {spec.direction} "
                         f"{spec.metric}: give another --name or --out")
    study.set_user_attr("metric", spec.metric)
    seed = None if spec.sampler_seed is None else spec.sampler_seed + len(study.trials)
    return optuna.load_study(study_name=name, storage=storage, pruner=spec.make_pruner(),
                             sampler=optuna.samplers.TPESampler(seed=seed))


def retry_interrupted(study: optuna.Study) -> None:
    """Trials held as running were cut off (the search holds the lock): each is failed and
    its point queued again, so its run resumes from its checkpoint."""
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study.tell(trial.number, state=TrialState.FAIL)
        study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})
        print(f"  trial {trial.number}: cut off, queued again", flush=True)


def finished_trials(study: optuna.Study) -> int:
    """Trials that count towards n_trials: complete, pruned, or failed with their run's
    error (a trial cut off and queued again does not count)."""
    return sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED)
               or (t.state == TrialState.FAIL and "error" in t.user_attrs)
               for t in study.get_trials(deepcopy=False))


def trial_cell(sweep: Sweep, method: str, setting: str, trial: BaseTrial) -> Cell:
    """The cell of a trial: its parameters as config entries (in the space's order), with
    the sweep's seed."""
    point = tuple((key, trial.params[key]) for key in sweep.search.space if key in trial.params)
    return sweep.cell(method, setting, point, sweep.cells[0].seed)


def trial_label(trial: BaseTrial) -> str:
    """``trial <number>: <key>=<value> ...``, the trial as a table's method column names it."""
    values = " ".join(f"{key.rsplit('.', 1)[-1]}={_short(value)}"
                      for key, value in trial.params.items())
    return f"trial {trial.number}: {values}"


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


class StudyRunner:
    """One study's trials run ``jobs`` at a time until n_trials have finished."""

    def __init__(self, sweep: Sweep, out: Path, method: str, setting: str,
                 resume_command: str | None = None) -> None:
        self.sweep, self.out, self.method, self.setting = sweep, out, method, setting
        self.resume_command = resume_command
        self.spec: SearchSpec = sweep.search
        self.name = study_name(sweep, method, setting)
        self.study = open_study(sweep, out, self.name)

    def run(self, jobs: int) -> None:
        retry_interrupted(self.study)
        for point in self.spec.enqueue:
            self.study.enqueue_trial(point, skip_if_exists=True)
        done = finished_trials(self.study)
        print(f"search {self.name}: {done} of {self.spec.n_trials} trials finished "
              f"({jobs} at a time)", flush=True)
        first = done
        progress = SweepProgress(max(self.spec.n_trials - first, 0), f"search {self.name}",
                                 "trials")
        running: list[TrialRun] = []
        try:
            while True:
                while len(running) < jobs and done + len(running) < self.spec.n_trials:
                    running.append(self.start())
                if not running:
                    return
                wait([r.process.sentinel for r in running if r.process is not None],
                     timeout=POLL_SECONDS)
                for run in list(running):
                    if self.advance(run):
                        running.remove(run)
                        done = finished_trials(self.study)
                        progress.report(done - first, len(running))
        except BaseException as error:
            # On Ctrl-C every run got the signal too and is saving its round; on a fault,
            # the runs are asked to stop. Either way no run is left behind.
            for run in running:
                if not isinstance(error, KeyboardInterrupt):
                    run.stop()
                run.join()
            raise

    def start(self) -> TrialRun:
        trial = self.study.ask(self.spec.space)
        cell = trial_cell(self.sweep, self.method, self.setting, trial)
        item = plan_cell(cell, self.out, self.sweep.name)
        trial.set_user_attr("run", item.name)
        return TrialRun.start(item, trial, self.resume_command)

    def advance(self, run: TrialRun) -> bool:
        """Report the trial's new rounds (pruning it where the pruner says so); True when its
        run has ended and the trial is told its outcome."""
        ended = run.finished  # before reading: the rows of an ended run are all there
        if run.pruned_at is None:
            self.report(run)
        if not ended:
            return False
        result = run.result()
        trial, item = run.trial, run.item
        if run.pruned_at is not None:
            run.mark_pruned(self.spec.metric)
            self.study.tell(trial, state=TrialState.PRUNED)
            print(f"  {item.cell.label}: trial {trial.number} pruned at round {run.pruned_at}",
                  flush=True)
        elif result is None:
            self.study.tell(trial, state=TrialState.FAIL)
            raise RuntimeError(f"{item.cell.label}: the run's process ended without a result "
                               f"(its output: {item.runs / (item.name + '.log')})")
        elif result.get("stopped"):  # a signal stopped this run alone: tried again
            self.study.tell(trial, state=TrialState.FAIL)
            self.study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})
        else:
            self.tell_result(run, result)
        return True

    def report(self, run: TrialRun) -> None:
        """Report each new round's metric to the trial; prune where the pruner says so."""
        metric = self.spec.metric
        for row in run.new_rows():
            if metric not in row:
                error = (f"search: metric {metric!r} is not a column of "
                         f"{str(run.item.folder / 'metrics.csv')!r}; its columns: "
                         f"{', '.join(row)}")
                run.trial.set_user_attr("error", error)
                self.study.tell(run.trial, state=TrialState.FAIL)
                run.stop()
                raise SweepError(error)
            step, value = int(float(row["round"])), csv_number(row[metric])
            run.reported[step] = value
            if math.isfinite(value):
                run.trial.report(value, step)
                if run.trial.should_prune():
                    run.prune(step)
                    return

    def tell_result(self, run: TrialRun, result: dict[str, Any]) -> None:
        """A run that ended: its record is written, then its trial is told its value (the
        metric's best round: COMPLETE) or the run's error (FAIL). In this order, a search
        stopped between the two finds the trial running and its cell finished: the trial is
        queued again and told from the cell's files, without running it."""
        values = [v for v in run.reported.values() if math.isfinite(v)]
        error = result.get("error") or (None if values else
                                        f"no value of {self.spec.metric} in its metrics.csv")
        best = (max(values) if self.spec.direction == "maximize" else min(values)) if (
            values) else math.nan
        note = f"trial {run.trial.number}"
        if not error:
            note += f", {self.spec.metric} {best:.4f}"
        elif not result.get("error"):  # the run's own error is printed with its record
            note += f": {error}"
        if run.process is not None:
            finish(run.item, result, note)
        else:
            print(f"  {run.item.cell.label}: {note}; {error or 'cached'}", flush=True)
        if error:
            run.trial.set_user_attr("error", error)
            self.study.tell(run.trial, state=TrialState.FAIL)
        else:
            self.study.tell(run.trial, best)


def run_search(sweep: Sweep, out: Path, jobs: int, resume_command: str | None = None) -> None:
    """Run (or resume) the sweep's studies one after another, ``jobs`` trials at a time
    (``resume_command``: what a stopped trial's run says resumes it)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one line per trial is ours
    check_search(sweep, out)
    out.mkdir(parents=True, exist_ok=True)
    with exclusive(out):
        for method, setting in studies(sweep):
            StudyRunner(sweep, out, method, setting, resume_command).run(jobs)


def stored_studies(sweep: Sweep, out: Path) -> Iterator[tuple[str, str, optuna.Study]]:
    """(method, setting, study) of each of the sweep's studies in ``<out>/optuna.db``."""
    storage = f"sqlite:///{(out / STORAGE_FILE).resolve()}"
    for method, setting in studies(sweep):
        name = study_name(sweep, method, setting)
        yield method, setting, optuna.load_study(study_name=name, storage=storage)


def write_trials_csv(sweep: Sweep, out: Path) -> list[str]:
    """``trials.csv`` (one row per trial: its study, state, value, parameters, run folder
    and error) and the Markdown lines of each study's best trial."""
    spec: SearchSpec = sweep.search
    keys = list(spec.space)
    lines = ["## Search", "",
             f"Each trial is one run; its value is the best round's {spec.metric} "
             f"({spec.direction}), reported round by round to Optuna's {spec.pruner}. "
             "Every trial: trials.csv; the studies: optuna.db.", "",
             "| study | trials | best trial | best value | best parameters |",
             "| --- | --- | --- | --- | --- |"]
    with (out / "trials.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["study", "trial", "state", "value", "rounds reported", *keys, "run",
                         "error"])
        for _, _, study in stored_studies(sweep, out):
            trials = study.get_trials(deepcopy=False)
            for trial in trials:
                writer.writerow([study.study_name, trial.number, trial.state.name, trial.value,
                                 len(trial.intermediate_values),
                                 *[trial.params.get(k) for k in keys],
                                 trial.user_attrs.get("run"), trial.user_attrs.get("error")])
            states = collections.Counter(t.state.name.lower() for t in trials)
            tally = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
            complete = [t for t in trials if t.state == TrialState.COMPLETE]
            best = ("-", "-", "-")
            if complete:
                trial = study.best_trial
                best = (str(trial.number), f"{trial.value:.4f}", ", ".join(
                    f"{k}={_short(v)}" for k, v in trial.params.items()))
            lines.append(f"| {study.study_name} | {tally} | " + " | ".join(best) + " |")
    return [*lines, ""]


def finished_runs(sweep: Sweep, out: Path) -> tuple[list[Planned], dict[str, str]]:
    """The runs of complete trials (and of trials failed with their run's error), once
    each, and the trial (its number and parameters) of each run folder."""
    runs = (out / "runs").resolve()
    planned: dict[str, Planned] = {}
    trials: dict[str, str] = {}
    for method, setting, study in stored_studies(sweep, out):
        for trial in study.get_trials(deepcopy=False):
            name = trial.user_attrs.get("run")
            failed = trial.state == TrialState.FAIL and "error" in trial.user_attrs
            if name in planned or not (trial.state == TrialState.COMPLETE or failed):
                continue
            # the trial's row is its method and setting: the parameters go with the method
            planned[name] = Planned(sweep.cell(method, setting, (), sweep.cells[0].seed), {},
                                    name, runs)
            trials[name] = trial_label(trial)
    return [p for p in planned.values() if p.record.is_file()], trials
