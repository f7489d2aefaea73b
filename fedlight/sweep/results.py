"""A sweep's tables: ``report.md`` (with its plots and ``curves.csv``), ``results.csv``,
``runs.csv`` and, with ``select``, ``selection.md``."""

from __future__ import annotations

import csv
import json
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedlight.sweep.plan import Planned
from fedlight.sweep.spec import Sweep


def collect(planned: Sequence[Planned], trials: Mapping[str, str] | None = None,
            ) -> tuple[list[Any], list[tuple[Planned, str]]]:
    """The finished runs (report.Run, relabelled with the sweep's method label and the
    cell's row, the method followed by ``(<trials[run folder name]>)`` where given, with
    their wall and CPU seconds) and the failed cells with their errors."""
    from fedlight.analysis.report import read_run

    runs, failed = [], []
    for item in planned:
        record = json.loads(item.record.read_text())
        if record.get("error"):
            failed.append((item, record["error"]))
            continue
        run = read_run(item.folder)
        run.method = item.cell.method or run.method
        if item.name in (trials or {}):
            run.method += f" ({(trials or {})[item.name]})"
        run.setting = item.cell.row or run.setting
        run.process_seconds = {"wall": record["wall"], "cpu": record["cpu"]}
        runs.append(run)
    return runs, failed


def write_runs_csv(runs: Sequence[Any], path: Path, extra: Sequence[str]) -> None:
    """One row per run: its labels, seed, rounds, every table column and its folder."""
    from fedlight.analysis.report import table_columns

    columns = table_columns(extra, runs)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["method", "setting", "seed", "rounds", *[t for t, _, _ in columns],
                         "best val personalized", "run"])
        for run in runs:
            writer.writerow([run.method, run.setting, run.seed, run.rounds,
                             *[value(run) for _, value, _ in columns],
                             run.summary.get("best_val_personalized_accuracy"), run.path.name])


def write_results_csv(runs: Sequence[Any], path: Path, extra: Sequence[str]) -> None:
    """The report's table as CSV: per group, the mean, the sample std over seeds and the
    number of runs with a value of each column."""
    from fedlight.analysis.report import group_statistics

    rows = group_statistics(runs, extra)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["method"])
        writer.writeheader()
        writer.writerows(rows)


def selection_table(planned: Sequence[Planned], runs: Sequence[Any]) -> str:
    """Per method, setting and round count: the grid point whose runs have the best mean
    (over seeds) validation accuracy, with its test figures (each run's best round is chosen
    on validation too)."""
    by_folder = {run.path.name: run for run in runs}
    groups: dict[tuple[str, str, int], dict[tuple, list[Any]]] = defaultdict(
        lambda: defaultdict(list))
    for item in planned:
        run = by_folder.get(item.name)
        if run is not None:
            groups[(item.cell.method, item.cell.setting, run.rounds)][item.cell.point].append(run)
    lines = ["| method | setting | rounds | chosen | seeds | validation personalized | "
             "test personalized (best round on validation) | last personalized |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]

    def mean(members: list[Any], key: str) -> float:
        values = [m.summary.get(key) for m in members if m.summary.get(key) is not None]
        return statistics.mean(values) if values else float("-inf")

    for (method, setting, rounds), points in sorted(groups.items()):
        point, members = max(points.items(),
                             key=lambda p: mean(p[1], "best_val_personalized_accuracy"))
        chosen = ", ".join(f"{k}={v}" for k, v in point) or "-"
        cells = [f"{100 * mean(members, key):.2f}" for key in (
            "best_val_personalized_accuracy", "best_personalized_accuracy",
            "last_personalized_accuracy")]
        lines.append(f"| {method} | {setting or '-'} | {rounds} | {chosen} | {len(members)} | "
                     + " | ".join(cells) + " |")
    lines += ["", "Accuracies in %, the mean over the chosen point's seeds."]
    return "\n".join(lines)


def write_results(sweep: Sweep, planned: Sequence[Planned], out: Path, command: str,
                  wall: float, cpu: float, trials: Mapping[str, str] | None = None,
                  sections: Sequence[str] = ()) -> Path:
    """report.md with its plots, results.csv, runs.csv (and selection.md with select); the
    runs' trials as in :func:`collect`, ``sections`` (Markdown lines) before the table."""
    from fedlight.analysis.report import write_report_of_runs

    runs, failed = collect(planned, trials)
    notes = [f"`{command}`", "",
             f"{len(planned)} runs ({len(runs)} finished, {len(failed)} failed); this "
             f"invocation: wall {wall / 60:.1f} min, CPU {cpu / 60:.1f} min. Wall and CPU "
             "seconds per run are each run's whole `fit` (its last attempt when resumed).", ""]
    notes += [f"Failed: {item.cell.label}: {error}" for item, error in failed]
    notes += [""] if failed else []
    notes += list(sections)
    if sweep.select:
        table = selection_table(planned, runs)
        (out / "selection.md").write_text(f"# {sweep.name}: chosen on validation\n\n{table}\n")
        notes += ["## Chosen on validation", "", table, "", "## Every grid point", ""]
    if not runs:
        (out / "report.md").write_text("\n".join([f"# sweep {sweep.name}", "", *notes]))
        return out / "report.md"
    write_runs_csv(runs, out / "runs.csv", sweep.columns)
    write_results_csv(runs, out / "results.csv", sweep.columns)
    return write_report_of_runs(runs, out, title=f"# sweep {sweep.name}", notes=notes,
                                extra=sweep.columns)
