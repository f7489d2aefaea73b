"""Writing an analysis's numbers (CSV), tables (Markdown) and figures (PNG, and PDF on
request, in :mod:`fedlight.plotting`'s style), each whole or not at all
(:func:`fedlight.core.files.atomic_write`)."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fedlight.core.errors import FedlightError
from fedlight.core.files import atomic_write
from fedlight.parsing.messages import exit_with_error
from fedlight.plotting import Draw, save_figure

Rows = Sequence[Mapping[str, Any]]


def write_csv(path: Path, rows: Rows, columns: Sequence[str] | None = None) -> Path:
    """``rows`` as a CSV table (columns: ``columns``, else the first row's keys), written to
    a temporary file renamed over ``path``, so the file is whole or absent."""
    fields = list(columns or (rows[0] if rows else []))
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fields)
    writer.writeheader()
    writer.writerows(rows)
    return write_text(path, text.getvalue())


def write_text(path: Path, text: str) -> Path:
    """``text`` (e.g. a Markdown table) written to a temporary file renamed over ``path``, so
    the file is whole or absent."""
    atomic_write(path, lambda stream: stream.write(text.encode()))
    return path


Figure = tuple[Draw, tuple[float, float], tuple[int, int]]


def write_outputs(out: Path, tables: Mapping[str, Rows], figures: Mapping[str, Figure],
                  formats: Iterable[str] | None = None) -> list[Path]:
    """Write every table (``name.csv`` -> rows) and figure (``name.png`` -> ``(draw, size,
    shape)``, in each of ``formats``: see :func:`fedlight.plotting.save_figure`) into ``out``
    once all are computed; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = [write_csv(out / name, rows) for name, rows in tables.items()]
    for name, (draw, size, shape) in figures.items():
        written += save_figure(out / name, draw, size, shape, formats)
    return written


def write_and_print(write: Callable[[], list[Path]]) -> None:
    """The end of a table command (``python -m fedlight.analysis.<table> SWEEP_DIR``): run
    ``write``; a user error is one line on stderr (exit code 2); otherwise name each file
    written and print the last one (the Markdown table)."""
    try:
        written = write()
    except FedlightError as error:
        exit_with_error(error)
    for path in written:
        print(f"wrote {path}")
    print(written[-1].read_text())


__all__ = ["Figure", "write_and_print", "write_csv", "write_outputs", "write_text"]
