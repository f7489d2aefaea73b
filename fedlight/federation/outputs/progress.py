"""A rich progress bar over rounds and the final summary table."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


class RoundProgress:
    """Progress over rounds showing the latest personalized and global accuracy: a rich bar
    on a terminal, one plain line per evaluated round when stdout is not a terminal (a job's
    log file)."""

    def __init__(self, rounds: int, enabled: bool = True, plain: bool | None = None) -> None:
        self.enabled, self.rounds = enabled, rounds
        self.plain = enabled and (not sys.stdout.isatty() if plain is None else plain)
        self.started = time.perf_counter()
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

    def advance_to(self, completed: int) -> None:
        self.progress.update(self.task, completed=completed)

    def update(self, completed: int, row: Mapping[str, Any]) -> None:
        status = (f"pers {_fmt(row.get('personalized_accuracy'))}  "
                  f"glob {_fmt(row.get('global_accuracy'))}  loss {_fmt(row.get('train_loss'))}")
        if self.plain and row.get("round") == completed:  # this round was evaluated
            elapsed = time.perf_counter() - self.started
            print(f"round {completed}/{self.rounds}  {status}  {elapsed:.1f}s", flush=True)
        self.progress.update(self.task, completed=completed, status=status)


def final_table(summary: Mapping[str, Any]) -> Table | str:
    """The summary as a two-column rich table, rendered to text (``mean_last_<metric>`` shown
    as ``mean last-<n> <metric>``, n its ``report_last``)."""
    table = Table(title="fedlight summary", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    window = summary.get("report_last")
    for key, value in summary.items():
        if key == "report_last":
            continue
        if key.startswith("mean_last_") and window is not None:
            key = f"mean last-{window} {key[len('mean_last_'):]}"
        if isinstance(value, (int, float, str)) or value is None:
            table.add_row(key, _fmt(value))
    console = Console(width=100, record=True)
    with console.capture() as capture:
        console.print(table)
    return capture.get()
