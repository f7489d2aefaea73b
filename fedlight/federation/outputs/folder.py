"""The run folder: metrics CSV, JSON and text files, checkpoints folder and loggers. Every
whole-file write goes through fedlight.core.files.atomic_write. Only rank 0 writes; the other
ranks hold a SilentRunFolder with the same path."""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedlight.core.files import atomic_write
from fedlight.federation.outputs.loggers import Loggers

HEADLINE_COLUMNS = (
    "round", "global_accuracy", "personalized_accuracy", "personalized_accuracy_std",
    "train_loss", "seconds",
)


def finite_or_none(value: Any) -> Any:
    """``value``, or None for a float that is not finite (an empty CSV cell, a JSON null)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class RunFolder:
    """Everything a run writes, under ``<root>/<name>/``."""

    def __init__(self, path: Path, loggers: Sequence[str], group: str, wandb_project: str) -> None:
        self.path = path
        self.loggers = Loggers(loggers, path, group, wandb_project)
        self.columns: list[str] = []

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.csv"

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
        self.columns = []
        if self.metrics_path.exists():
            self.metrics_path.unlink()
        for row in history:
            self.append_row(row, to_loggers=False)

    def append_row(self, row: Mapping[str, Any], to_loggers: bool = True) -> None:
        new_columns = [k for k in row if k not in self.columns]
        if new_columns and self.columns:
            # A metric appeared for the first time: rewrite the file with the wider header.
            previous = self.read_rows()
            self.columns = [*self.columns, *new_columns]
            self._write_rows(previous)
        elif new_columns:
            self.columns = [*HEADLINE_COLUMNS, *[k for k in row if k not in HEADLINE_COLUMNS]]
            self._write_rows([])
        with self.metrics_path.open("a", newline="") as handle:
            csv.DictWriter(handle, self.columns).writerow(
                {k: finite_or_none(row.get(k)) for k in self.columns})
        if to_loggers:
            self.loggers.log_row(row)

    def read_rows(self) -> list[dict[str, Any]]:
        if not self.metrics_path.exists():
            return []
        with self.metrics_path.open() as handle:
            return list(csv.DictReader(handle))

    def _write_rows(self, rows: Sequence[Mapping[str, Any]]) -> None:
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, self.columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row.get(k) for k in self.columns})
        self.write_text("metrics.csv", text.getvalue())

    def write_json(self, name: str, obj: Any) -> None:
        self.write_text(name, json.dumps(obj, indent=1, default=finite_or_none))

    def write_text(self, name: str, text: str) -> None:
        atomic_write(self.path / name, lambda stream: stream.write(text.encode()))


class SilentRunFolder(RunFolder):
    """The run folder as seen by ranks other than 0: it knows its path and writes nothing."""

    def create(self) -> None: ...

    def remove(self) -> None: ...

    def open_loggers(self, hyperparameters: Mapping[str, Any]) -> None: ...

    def write_history(self, history: Sequence[Mapping[str, Any]]) -> None: ...

    def append_row(self, row: Mapping[str, Any], to_loggers: bool = True) -> None: ...

    def read_rows(self) -> list[dict[str, Any]]:
        return []

    def write_text(self, name: str, text: str) -> None: ...


__all__ = ["HEADLINE_COLUMNS", "RunFolder", "SilentRunFolder", "finite_or_none"]
