"""Per-client tables of a sweep: each client's (domain's) best or last score over rounds.

    fedlight sweep benchmarks/sweeps/fedpick_table2.yaml --out sweeps/fedpick_table2
    python -m fedlight.analysis.per_client sweeps/fedpick_table2

FedPick's Tables II and IV report, per domain (one client each), the best test accuracy of that
domain over the evaluated rounds, as the mean and standard deviation over seeds, and "Avg", the
mean over domains of those bests. This reads the sweep's ``runs.csv`` and every run's
``per_client_rounds.csv`` (which ``fedlight sweep`` has each run write: one row per client and
evaluated round) and writes ``per_client_table.csv`` (one row per method, setting, client and
``Avg``: the mean, the sample standard deviation over seeds, n - 1 in the denominator, and the
number of seeds) and ``per_client_table.md``: per setting, one row per method and one column
per client, named by its domain or group where the data has one, in %.

``--metric`` picks the per-client column (``personalized_accuracy`` by default; e.g.
``global_head_accuracy`` for FedPick's "w/o Ensemble" row, a head its runs score apart);
``--over last`` takes the last evaluated round instead of the best.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedlight.analysis.outputs import write_and_print, write_csv, write_text
from fedlight.core.errors import ConfigError, MissingFileError
from fedlight.core.files import csv_number
from fedlight.federation.outputs.folder import CLIENT_ROUNDS

#: How a client's rounds reduce to one number.
REDUCTIONS = ("best", "last")
AVERAGE = "Avg"


def read_client_rounds(path: str | Path) -> list[dict[str, str]]:
    """The rows of one run's ``per_client_rounds.csv``.

    Raises:
        MissingFileError: the run did not write one (it ran without
            ``trainer.per_client_scores``).
    """
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(
            f"{str(path)!r} does not exist: the run did not write per-client scores "
            "(trainer.per_client_scores: true; a sweep cell cached before fedlight sweep wrote "
            f"them runs again once its record {path.parent.name}.json is removed)")
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def client_scores(rows: Sequence[Mapping[str, str]], metric: str, over: str = "best",
                  ) -> dict[int, tuple[str, float]]:
    """Per client of one run: its name (its ``client_name``, else ``client <id>``) and its
    ``metric`` reduced over the evaluated rounds (``best``: the highest finite value,
    ``last``: the value of its last round with one).

    Raises:
        ConfigError: ``over`` is unknown, or no row has ``metric``.
    """
    if over not in REDUCTIONS:
        raise ConfigError(f"--over {over!r} is invalid; valid: {', '.join(REDUCTIONS)}")
    if rows and metric not in rows[0]:
        columns = [c for c in rows[0] if c not in ("round", "client", "client_name")]
        raise ConfigError(f"--metric {metric!r} is not a per-client column; valid: "
                          f"{', '.join(columns)}")
    series: dict[int, list[tuple[float, float]]] = defaultdict(list)
    names: dict[int, str] = {}
    for row in rows:
        client = int(row["client"])
        names[client] = row.get("client_name") or f"client {client}"
        value = csv_number(row.get(metric))
        if math.isfinite(value):
            series[client].append((csv_number(row["round"]), value))
    reduce = (lambda points: max(v for _, v in points)) if over == "best" else (
        lambda points: max(points)[1])
    return {client: (names[client], reduce(points))
            for client, points in sorted(series.items())}


def table_rows(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``runs``: one entry per run, ``method``, ``setting`` and ``scores`` (what
    :func:`client_scores` returns). One row per method, setting and client, then ``Avg`` (each
    run's mean over its clients): mean and sample std over the runs (seeds), their count."""
    clients: dict[tuple[str, str], dict[tuple[int, str], list[float]]] = defaultdict(
        lambda: defaultdict(list))
    averages: dict[tuple[str, str], list[float]] = defaultdict(list)
    for run in runs:
        group, scores = (run["method"], run["setting"]), run["scores"]
        for client, (name, value) in scores.items():
            clients[group][(client, name)].append(value)
        if scores:
            averages[group].append(statistics.mean(v for _, v in scores.values()))
    rows = []
    for (method, setting), by_client in clients.items():
        cells = [(client, name, values) for (client, name), values in sorted(by_client.items())]
        cells.append(("", AVERAGE, averages[(method, setting)]))
        rows += [{"method": method, "setting": setting, "client": client, "name": name,
                  "mean": statistics.mean(values),
                  "std": statistics.stdev(values) if len(values) > 1 else None,
                  "seeds": len(values)} for client, name, values in cells]
    return rows


def markdown(rows: Sequence[Mapping[str, Any]], title: str) -> str:
    """Per setting, one row per method and one column per client (then Avg), each cell the
    mean ± sample std over seeds in %."""
    lines = [title, ""]
    settings = list(dict.fromkeys(r["setting"] for r in rows))
    for setting in settings:
        members = [r for r in rows if r["setting"] == setting]
        names = list(dict.fromkeys(r["name"] for r in members))
        if setting:
            lines += [f"## {setting}", ""]
        lines += ["| method | " + " | ".join(names) + " | seeds |",
                  "| --- |" + " --- |" * (len(names) + 1)]
        for method in dict.fromkeys(r["method"] for r in members):
            cells = {r["name"]: r for r in members if r["method"] == method}
            shown = [_cell(cells.get(name)) for name in names]
            seeds = max(r["seeds"] for r in cells.values())
            lines.append(f"| {method} | " + " | ".join(shown) + f" | {seeds} |")
        lines.append("")
    return "\n".join(lines)


def _cell(row: Mapping[str, Any] | None) -> str:
    if row is None:
        return "-"
    std = "" if row["std"] is None else f" ± {100 * row['std']:.2f}"
    return f"{100 * row['mean']:.2f}{std}"


def write_table(sweep_dir: str | Path, out: str | Path | None = None,
                metric: str = "personalized_accuracy", over: str = "best") -> list[Path]:
    """Read ``<sweep_dir>/runs.csv`` and each listed run's ``per_client_rounds.csv`` (under
    ``<sweep_dir>/runs/``); write ``per_client_table.csv`` and ``per_client_table.md`` into
    ``out`` (default: the sweep folder). Returns the paths written.

    Raises:
        MissingFileError: no runs.csv (the sweep has not run), or a run without
            per_client_rounds.csv.
        ConfigError: an unknown ``metric`` or ``over``, or no run has a value.
    """
    sweep_dir = Path(sweep_dir)
    listing = sweep_dir / "runs.csv"
    if not listing.is_file():
        raise MissingFileError(f"{str(listing)!r} does not exist; run the sweep first "
                               "(fedlight sweep SWEEP_FILE --out SWEEP_DIR)")
    with listing.open(newline="") as handle:
        listed = list(csv.DictReader(handle))
    runs = [{"method": run["method"], "setting": run["setting"],
             "scores": client_scores(read_client_rounds(
                 sweep_dir / "runs" / run["run"] / CLIENT_ROUNDS), metric, over)}
            for run in listed]
    rows = table_rows(runs)
    if not rows:
        raise ConfigError(f"no run listed in {str(listing)!r} has a value of {metric!r}")
    folder = Path(out) if out else sweep_dir
    folder.mkdir(parents=True, exist_ok=True)
    csv_path = write_csv(folder / "per_client_table.csv", rows)
    table = write_text(folder / "per_client_table.md", markdown(rows, (
        f"# {sweep_dir.name}: each client's {over} {metric} over the evaluated rounds\n\n"
        f"In %, the mean ± the sample standard deviation (n - 1 in the denominator) over "
        f"seeds; {AVERAGE}: the mean over the clients of each run, then over seeds.")))
    return [csv_path, table]


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m fedlight.analysis.per_client SWEEP_DIR [--out DIR] [--metric M]
    [--over best|last]``."""
    parser = argparse.ArgumentParser(prog="python -m fedlight.analysis.per_client",
                                     description=(__doc__ or "").splitlines()[0],
                                     allow_abbrev=False)
    parser.add_argument("sweep_dir", help="the folder a sweep wrote (runs.csv, runs/)")
    parser.add_argument("--out", default=None, help="output folder (default: the sweep's)")
    parser.add_argument("--metric", default="personalized_accuracy",
                        help="a column of per_client_rounds.csv (default: "
                             "personalized_accuracy)")
    parser.add_argument("--over", default="best", choices=REDUCTIONS,
                        help="each client's best (default) or last value over rounds")
    args = parser.parse_args(argv)
    write_and_print(lambda: write_table(args.sweep_dir, args.out, args.metric, args.over))


__all__ = ["AVERAGE", "CLIENT_ROUNDS", "REDUCTIONS", "client_scores", "main", "markdown",
           "read_client_rounds", "table_rows", "write_table"]

if __name__ == "__main__":
    main()
