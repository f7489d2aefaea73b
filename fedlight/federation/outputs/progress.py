"""Progress over a run's rounds (with its ETA, and within a long round its clients done) and
the final summary table."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from fedlight.federation.outputs.summary import window_label

#: A round running longer than this shows its clients done / total on a terminal.
WITHIN_ROUND_SECONDS = 3.0

Clock = Callable[[], float]


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def duration(seconds: float) -> str:
    """``42s``, ``3:05`` (minutes) or ``1:02:03`` (hours)."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def eta(elapsed: float, done: int, left: int) -> str:
    """``ETA <duration>`` of ``left`` more items at the pace of the ``done`` ones that took
    ``elapsed`` seconds (``ETA -`` before the first is done)."""
    if left <= 0:
        return "ETA 0s"
    return f"ETA {duration(elapsed / done * left)}" if done > 0 else "ETA -"


class RoundProgress:
    """Progress over rounds showing the latest personalized and global accuracy and the ETA
    of the run (at the pace of the rounds run so far in this process): a rich bar on a
    terminal, where a round running longer than WITHIN_ROUND_SECONDS also shows its clients
    done / total; one plain line per evaluated round when stdout is not a terminal (a job's
    log file).

    Args:
        rounds: the run's rounds.
        enabled: show anything at all (rank 0 with trainer.progress_bar).
        plain: one line per evaluated round; None: when stdout is not a terminal.
        clock: seconds, for elapsed times and the ETA.
    """

    def __init__(self, rounds: int, enabled: bool = True, plain: bool | None = None,
                 clock: Clock = time.perf_counter) -> None:
        self.enabled, self.rounds, self.clock = enabled, rounds, clock
        self.plain = enabled and (not sys.stdout.isatty() if plain is None else plain)
        self.started = self.round_started = clock()
        self.first = 0  # the round this process started from (a resumed run's rounds done)
        self.completed = 0
        self.metrics = self.clients = ""
        self.progress = Progress(
            TextColumn("[bold]round"), MofNCompleteColumn(), BarColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"), disable=not enabled or self.plain,
            transient=False,
        )
        self.task = self.progress.add_task("rounds", total=rounds, status="")

    def __enter__(self) -> RoundProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    @property
    def status(self) -> str:
        """What the bar shows beside the round count: the latest metrics, the ETA and, in a
        long round, its clients done / total."""
        return "  ".join(part for part in (self.metrics, self.eta(), self.clients) if part)

    def eta(self) -> str:
        """The run's ETA at the pace of the rounds done in this process ('' before one)."""
        done = self.completed - self.first
        return eta(self.clock() - self.started, done, self.rounds - self.completed) if (
            done > 0) else ""

    def advance_to(self, completed: int) -> None:
        """Start from ``completed`` rounds done (a resumed run); the ETA counts from here."""
        self.first = self.completed = completed
        self.started = self.round_started = self.clock()
        self.progress.update(self.task, completed=completed)

    def start_round(self) -> None:
        self.round_started = self.clock()
        self.clients = ""

    def client_done(self, done: int, total: int) -> None:
        """``done`` of the round's ``total`` clients (on this process) have trained: shown on
        a terminal once the round has run longer than WITHIN_ROUND_SECONDS."""
        if self.plain or not self.enabled:
            return
        if self.clock() - self.round_started >= WITHIN_ROUND_SECONDS:
            self.clients = f"round {self.completed + 1}: clients {done}/{total}"
            self.progress.update(self.task, status=self.status)

    def update(self, completed: int, row: Mapping[str, Any]) -> None:
        self.completed, self.clients = completed, ""
        self.metrics = (f"pers {_fmt(row.get('personalized_accuracy'))}  "
                        f"glob {_fmt(row.get('global_accuracy'))}  "
                        f"loss {_fmt(row.get('train_loss'))}")
        if self.plain and row.get("round") == completed:  # this round was evaluated
            elapsed = self.clock() - self.started
            print(f"round {completed}/{self.rounds}  {self.metrics}  {elapsed:.1f}s  "
                  f"{self.eta()}", flush=True)
        self.progress.update(self.task, completed=completed, status=self.status)


def final_table(summary: Mapping[str, Any]) -> Table | str:
    """The summary as a two-column rich table, rendered to text (``mean_last_<metric>`` shown
    as ``<metric>, mean of the last <n> evaluations``, n the evaluated rounds it averaged)."""
    table = Table(title="fedlight summary", show_header=True)
    table.add_column("metric", no_wrap=True)
    table.add_column("value", justify="right", overflow="fold")
    window = summary.get("report_window", summary.get("report_last"))
    for key, value in summary.items():
        if key in ("report_last", "report_window"):
            continue
        if key.startswith("mean_last_") and window:
            key = f"{key[len('mean_last_'):]}, {window_label(int(window))}"
        if isinstance(value, (int, float, str)) or value is None:
            table.add_row(key, _fmt(value))
    console = Console(width=100, record=True)
    with console.capture() as capture:
        console.print(table)
    return capture.get()
