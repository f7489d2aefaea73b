"""A search trial's run: its cell in a process of its own, whose ``metrics.csv`` rows the
search reads as they are written, and which the search stops when the trial is pruned
(SIGTERM: the run finishes its round, saves a checkpoint and stops, as ``fedlight fit``
does on a first Ctrl-C)."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from optuna.trial import Trial

from fedlight.core.files import atomic_write
from fedlight.sweep import runner
from fedlight.sweep.execute import exit_with_parent, prepare, process_context
from fedlight.sweep.plan import Planned

#: Written into the run folder of a pruned trial (its trial, round and metric).
PRUNED_FILE = "pruned.json"


def complete_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a ``metrics.csv`` that a run may still be appending to, less a last line
    not yet written in full."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines.pop()
    return list(csv.DictReader(lines))


def _run_in_process(config_file: str, resume: bool, log_file: str, parent: int,
                    results: Connection, resume_command: str | None = None) -> None:
    """The trial's process: its run's output to ``log_file``, its result (runner.run_cell's,
    or ``stopped`` when a signal stopped the run) sent to the search."""
    exit_with_parent(parent)
    log = open(log_file, "a", buffering=1)  # noqa: SIM115 (this process's output to its end)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    try:
        result = runner.run_cell(config_file, resume, resume_command)
    except KeyboardInterrupt:  # the search stopped it (pruned), or Ctrl-C
        result = {"stopped": True, "error": None}
    results.send(result)


@dataclass
class TrialRun:
    """A trial's cell: its process (None when the cell was finished before: a record), the
    metric's value of each round read so far and whether it was pruned (at which round)."""

    item: Planned
    trial: Trial
    process: BaseProcess | None = None
    results: Connection | None = None
    reported: dict[int, float] = field(default_factory=dict)
    pruned_at: int | None = None

    @classmethod
    def start(cls, item: Planned, trial: Trial, resume_command: str | None = None) -> TrialRun:
        """Start the cell's run (resumed from its checkpoint where it has one), unless the
        cell has a record (``resume_command``: what the run says resumes it if stopped)."""
        run = cls(item, trial)
        resume = prepare(item)
        if resume is None:
            return run
        (item.folder / PRUNED_FILE).unlink(missing_ok=True)
        context = process_context()
        run.results, sender = context.Pipe(duplex=False)
        for stream in (sys.stdout, sys.stderr):  # nothing buffered here is written twice
            stream.flush()
        log = item.runs / f"{item.name}.log"
        run.process = context.Process(target=_run_in_process, args=(
            str(item.config_file), resume, str(log), os.getpid(), sender, resume_command))
        run.process.start()
        sender.close()  # the child's end: a child gone without a result reads as EOF here
        return run

    @property
    def finished(self) -> bool:
        return self.process is None or not self.process.is_alive()

    def new_rows(self) -> Iterator[dict[str, str]]:
        """Rows of rounds not reported yet, in order."""
        for row in complete_rows(self.item.folder / "metrics.csv"):
            if int(float(row["round"])) not in self.reported:
                yield row

    def stop(self) -> None:
        """Ask the run to stop after its round in progress."""
        if self.process is not None and self.process.is_alive():
            os.kill(self.process.pid, signal.SIGTERM)  # type: ignore[arg-type]

    def prune(self, round_idx: int) -> None:
        self.pruned_at = round_idx
        self.stop()

    def mark_pruned(self, metric: str) -> None:
        """Write PRUNED_FILE into the run folder: the trial, the round and its value."""
        assert self.pruned_at is not None
        folder = self.item.folder
        folder.mkdir(parents=True, exist_ok=True)
        marker = json.dumps({"trial": self.trial.number, "round": self.pruned_at,
                             "metric": metric, "value": self.reported[self.pruned_at]}, indent=1)
        atomic_write(folder / PRUNED_FILE, lambda stream: stream.write(marker.encode()))

    def join(self) -> None:
        if self.process is not None:
            self.process.join()

    def result(self) -> dict[str, Any] | None:
        """What the finished process sent (None: it ended without a result: crashed or
        killed); a cell with a record: its record."""
        if self.process is None:
            return dict(json.loads(self.item.record.read_text()))
        self.join()
        assert self.results is not None
        with contextlib.suppress(EOFError):
            if self.results.poll():
                return dict(self.results.recv())
        return None
