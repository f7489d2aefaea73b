"""The run folder, written and read back: metrics CSV (and, when asked, the per-client
CSV), JSON and text files, checkpoints folder and loggers. Every whole-file write goes through
fedlight.core.files.atomic_write. Only rank 0 writes; the other ranks hold a SilentRunFolder
with the same path. :func:`read_metrics` is the one reader of ``metrics.csv``."""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedlight.core.errors import MissingFileError
from fedlight.core.files import atomic_write, csv_number
from fedlight.federation.outputs.loggers import Loggers

HEADLINE_COLUMNS = (
    "round", "global_accuracy", "personalized_accuracy", "personalized_accuracy_std",
    "train_loss", "seconds",
)
#: The file of one row per evaluated round.
METRICS = "metrics.csv"
#: The per-client, per-round scores (trainer.per_client_scores) and their first columns.
CLIENT_ROUNDS = "per_client_rounds.csv"
CLIENT_HEADLINE = ("round", "client")


def finite_or_none(value: Any) -> Any:
    """``value``, or None for a float that is not finite (an empty CSV cell, a JSON null)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class CsvLog:
    """A CSV file that grows by rows: appended in place, and rewritten whole (atomically,
    :func:`fedlight.core.files.atomic_write`) when a row brings a new column or rows are
    taken back. Its columns are the ``headline`` ones present, then the others in the order
    they first appear."""

    def __init__(self, path: Path, headline: Sequence[str]) -> None:
        self.path, self.headline = path, tuple(headline)
        self.columns: list[str] = []

    def append(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Append ``rows`` (non-finite floats as empty cells)."""
        if not rows:
            return
        keys = list(dict.fromkeys(k for row in rows for k in row))
        new_columns = [k for k in keys if k not in self.columns]
        if new_columns and self.columns:
            # A column appeared for the first time: rewrite the file with the wider header.
            self.rewrite(self.read(), [*self.columns, *new_columns])
        elif new_columns:
            self.rewrite([], [*self.headline, *[k for k in keys if k not in self.headline]])
        with self.path.open("a", newline="") as handle:
            writer = csv.DictWriter(handle, self.columns)
            for row in rows:
                writer.writerow({k: finite_or_none(row.get(k)) for k in self.columns})

    def read(self) -> list[dict[str, Any]]:
        """The rows as written (strings; a short last line, as a crash mid-write leaves, has
        None in the columns it lacks)."""
        if not self.path.exists():
            return []
        with self.path.open(newline="") as handle:
            return list(csv.DictReader(handle))

    def rewrite(self, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> None:
        """Replace the file by ``rows`` under ``columns``."""
        self.columns = list(columns)
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, self.columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row.get(k) for k in self.columns})
        atomic_write(self.path, lambda stream: stream.write(text.getvalue().encode()))

    def clear(self) -> None:
        """Remove the file (the next append starts it anew)."""
        self.columns = []
        self.path.unlink(missing_ok=True)


def read_metrics(folder: str | Path) -> list[dict[str, float]]:
    """The rows of a run folder's ``metrics.csv`` as numbers (an empty cell is NaN), as the
    report, the sweeps' tables and the analyses read them.

    Raises:
        fedlight.core.errors.MissingFileError: the folder has no ``metrics.csv``.
    """
    path = Path(folder) / METRICS
    if not path.is_file():
        raise MissingFileError(f"{str(path)!r} does not exist; a finished run folder has "
                               f"{METRICS}")
    return [{k: csv_number(v) for k, v in row.items()}
            for row in CsvLog(path, HEADLINE_COLUMNS).read()]


class RunFolder:
    """Everything a run writes, under ``<root>/<name>/``; :func:`read_metrics` reads its
    metrics back."""

    def __init__(self, path: Path, loggers: Sequence[str], group: str, wandb_project: str,
                 labels: Mapping[str, Any] | None = None) -> None:
        self.path = path
        self.loggers = Loggers(loggers, path, group, wandb_project, labels)
        self.metrics = CsvLog(path / METRICS, HEADLINE_COLUMNS)
        self.client_rounds = CsvLog(path / CLIENT_ROUNDS, CLIENT_HEADLINE)

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def metrics_path(self) -> Path:
        return self.metrics.path

    def create(self) -> None:
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)

    def remove(self) -> None:
        self.loggers.close()
        shutil.rmtree(self.path, ignore_errors=True)

    def open_loggers(self, hyperparameters: Mapping[str, Any]) -> None:
        self.loggers.open(hyperparameters)

    def close(self) -> None:
        self.loggers.close()

    # ----------------------------------------------------------------- metrics
    def write_history(self, history: Sequence[Mapping[str, Any]]) -> None:
        """Rewrite ``metrics.csv`` from the full history (used on resume)."""
        self.metrics.clear()
        for row in history:
            self.append_row(row, to_loggers=False)

    def append_row(self, row: Mapping[str, Any], to_loggers: bool = True) -> None:
        self.metrics.append([row])
        if to_loggers:
            self.loggers.log_row(row)

    def read_rows(self) -> list[dict[str, Any]]:
        return self.metrics.read()

    # ----------------------------------------------------------------- per-client scores
    def append_client_rows(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Append one evaluated round's per-client rows to ``per_client_rounds.csv``."""
        self.client_rounds.append(rows)

    def cut_client_rows(self, rounds_done: int) -> None:
        """Keep the rows of ``per_client_rounds.csv`` up to round ``rounds_done`` (a resume
        from that round's checkpoint writes the later ones again); a line left short by a
        crash mid-write goes too."""
        log = self.client_rounds
        rows = log.read()
        if not rows:
            return
        kept = [row for row in rows if None not in row.values() and _round(row) <= rounds_done]
        log.rewrite(kept, list(rows[0]))

    def write_json(self, name: str, obj: Any) -> None:
        self.write_text(name, json.dumps(obj, indent=1, default=finite_or_none))

    def write_text(self, name: str, text: str) -> None:
        atomic_write(self.path / name, lambda stream: stream.write(text.encode()))


def _round(row: Mapping[str, Any]) -> float:
    try:
        return float(row["round"])
    except (TypeError, ValueError):
        return math.inf


class SilentRunFolder(RunFolder):
    """The run folder as seen by ranks other than 0: it knows its path and writes nothing."""

    def create(self) -> None: ...

    def remove(self) -> None: ...

    def open_loggers(self, hyperparameters: Mapping[str, Any]) -> None: ...

    def write_history(self, history: Sequence[Mapping[str, Any]]) -> None: ...

    def append_row(self, row: Mapping[str, Any], to_loggers: bool = True) -> None: ...

    def append_client_rows(self, rows: Sequence[Mapping[str, Any]]) -> None: ...

    def cut_client_rows(self, rounds_done: int) -> None: ...

    def read_rows(self) -> list[dict[str, Any]]:
        return []

    def write_text(self, name: str, text: str) -> None: ...


__all__ = ["CLIENT_HEADLINE", "CLIENT_ROUNDS", "METRICS", "CsvLog", "HEADLINE_COLUMNS",
           "RunFolder", "SilentRunFolder", "finite_or_none", "read_metrics"]
