"""GPFL's Table 5 from a DLG sweep: the PSNR of each method's attack surfaces.

    fedlight sweep benchmarks/sweeps/privacy_table.yaml --out sweeps/privacy_table
    python -m fedlight.analysis.dlg_table sweeps/privacy_table

The sweep's runs carry one :class:`~fedlight.privacy.DLGProbe` per attacked surface (column
``dlg_psnr_<surface>``, tabulated by the sweep's ``columns``) and, with ``guesses: true``, the
PSNR of two data-free guesses of the same images. This reads the sweep's ``runs.csv`` and
writes ``dlg_table.csv`` (one row per cell: cell, method, surface, mean, std, runs) and
``dlg_table.md``: Table 5's layout, one column per cell, named as the paper names them ("Fed"
dropped from method names; suffix ``-fe`` for the feature extractor, none for the whole model,
``-sfe`` / ``-sm`` for GPFL's pseudo feature extractor and pseudo model), the mean (± the
standard deviation over seeds) in dB, then the guesses (averaged over seeds).
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedlight.analysis.outputs import write_and_print, write_csv, write_text
from fedlight.core.errors import ConfigError, MissingFileError

PREFIX = "last dlg_psnr_"
GUESS = "guess_"
#: GPFL's Table 5 suffixes of the attack surfaces.
SUFFIXES = {"encoder": "-fe", "model": "", "sfe": "-sfe", "sm": "-sm"}


def cell_name(method: str, surface: str) -> str:
    """``FedPer``, ``encoder`` -> ``Per-fe``; ``GPFL``, ``sm`` -> ``GPFL-sm``."""
    short = method[3:] if method.startswith("Fed") and len(method) > 3 else method
    return short + SUFFIXES.get(surface, f"-{surface}")


def _value(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def cells(runs: Sequence[Mapping[str, str]]) -> list[dict[str, Any]]:
    """Per method and surface (in the order they appear), the mean and std over its runs;
    then the guesses, each seed counted once."""
    values: dict[tuple[str, str], list[float]] = {}
    guesses: dict[str, dict[str, float]] = {}
    for run in runs:
        for column, text in run.items():
            value = _value(text)
            if not column.startswith(PREFIX) or value is None:
                continue
            surface = column[len(PREFIX):]
            if surface.startswith(GUESS):
                guesses.setdefault(surface[len(GUESS):], {})[run.get("seed", "")] = value
            else:
                values.setdefault((run["method"], surface), []).append(value)
    rows = [{"cell": cell_name(method, surface), "method": method, "surface": surface,
             **_spread(found)} for (method, surface), found in values.items()]
    rows += [{"cell": f"guess: {name}", "method": "", "surface": name,
              **_spread(list(by_seed.values()))} for name, by_seed in guesses.items()]
    return rows


def _spread(values: list[float]) -> dict[str, Any]:
    return {"mean": statistics.mean(values),
            "std": statistics.stdev(values) if len(values) > 1 else None, "runs": len(values)}


def markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """The cells as Table 5's one-row Markdown table."""
    def shown(row: Mapping[str, Any]) -> str:
        std = f" ± {row['std']:.2f}" if row["std"] is not None else ""
        return f"{row['mean']:.2f}{std}"

    return "\n".join(["| " + " | ".join(r["cell"] for r in rows) + " |",
                      "|" + "---|" * len(rows),
                      "| " + " | ".join(shown(r) for r in rows) + " |"])


def write_table(sweep_dir: str | Path, out: str | Path | None = None) -> list[Path]:
    """Read ``<sweep_dir>/runs.csv``; write ``dlg_table.csv`` and ``dlg_table.md`` into
    ``out`` (default: the sweep folder).

    Raises:
        MissingFileError: no runs.csv (the sweep has not run).
        ConfigError: no run has a ``dlg_psnr_<surface>`` column.
    """
    path = Path(sweep_dir) / "runs.csv"
    if not path.is_file():
        raise MissingFileError(f"{str(path)!r} does not exist; run the sweep first "
                               "(fedlight sweep benchmarks/sweeps/privacy_table.yaml)")
    with path.open() as handle:
        rows = cells(list(csv.DictReader(handle)))
    if not rows:
        raise ConfigError(f"{str(path)!r} has no '{PREFIX}<surface>' column with a value; "
                          "list the DLGProbe columns under the sweep's columns:")
    folder = Path(out) if out else Path(sweep_dir)
    folder.mkdir(parents=True, exist_ok=True)
    csv_path = write_csv(folder / "dlg_table.csv", rows)
    table = write_text(folder / "dlg_table.md", "PSNR (dB, lower = more private) of DLG "
                       "reconstructions:\n\n" + markdown(rows) + "\n")
    return [csv_path, table]


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m fedlight.analysis.dlg_table SWEEP_DIR [--out DIR]``."""
    parser = argparse.ArgumentParser(prog="python -m fedlight.analysis.dlg_table",
                                     description=(__doc__ or "").splitlines()[0],
                                     allow_abbrev=False)
    parser.add_argument("sweep_dir", help="the folder a DLG sweep wrote (holds runs.csv)")
    parser.add_argument("--out", default=None, help="output folder (default: the sweep's)")
    args = parser.parse_args(argv)
    write_and_print(lambda: write_table(args.sweep_dir, args.out))


__all__ = ["SUFFIXES", "cell_name", "cells", "main", "markdown", "write_table"]

if __name__ == "__main__":
    main()
