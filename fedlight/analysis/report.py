"""``fedlight report RUN_DIR... --out DIR``: paper-style tables and plots from run folders.

Runs are grouped by method, setting (source, partition and its parameter) and round count;
seeds of the same group are pooled as mean +- sample standard deviation (a group of one run
shows its value alone), and runs of different lengths never are.
Written to ``DIR``:

* ``report.md``: methods x settings x rounds of best, last and mean-of-the-last-n (the runs'
  ``trainer.report_last``, "mean last-n") personalized accuracy, global accuracy and fairness
  (std and coefficient of variation of client accuracies at the last round, as GPFL's
  Table 3), with the number of seeds;
* ``curves.png``: personalized accuracy against the round, one line per method, setting and
  round count (the mean over seeds, with a band of one standard deviation);
* ``curves.csv``: what the curves are drawn from, one row per run and evaluated round (method,
  setting, seed, rounds, round, personalized and global accuracy and the extra columns);
* ``client_gain_<A>_vs_<B>.png``: histogram of per-client accuracy changes between the first
  two methods of a setting (MAP's Fig. 10), when ``--compare A B`` is given or exactly two
  methods share a setting;
* ``partition_<setting>.png``: the partition heatmap of each setting.

With ``--pdf`` every figure is also written as PDF (vector) beside its PNG.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fedlight.core.errors import ConfigError, MissingFileError
from fedlight.data.plugin import recorded_name
from fedlight.data.stats import save_heatmap
from fedlight.federation.outputs.folder import read_metrics
from fedlight.parsing.parser import CommandParser
from fedlight.plotting import (
    figure_formats,
    integer_axis,
    legend_outside,
    mean_band,
    save_figure,
    with_pdf,
)

PARTITION_PARAMETER = {"dirichlet": "beta", "pathological": "classes_per_client",
                       "shards": "shards_per_client"}


@dataclass
class RunRecord:
    """One run folder's record read back for the report: its method, setting and seed, its
    summary, its metrics rows and its clients' last accuracies."""

    path: Path
    method: str
    setting: str
    seed: int
    summary: dict[str, Any]
    history: list[dict[str, float]]
    per_client: dict[int, float] = field(default_factory=dict)
    #: whole-process wall and CPU seconds of the run, where its launcher recorded them
    process_seconds: dict[str, float] | None = None

    @property
    def rounds(self) -> int:
        """Rounds the run trained (its summary's ``rounds``; evaluated rows otherwise)."""
        if self.summary.get("rounds") is not None:
            return int(self.summary["rounds"])
        return int(max((r.get("round", 0) for r in self.history), default=0))

    @property
    def group(self) -> tuple[str, str, int]:
        """What pools across seeds: method, setting and round count."""
        return self.method, self.setting, self.rounds


def _setting(config: dict[str, Any]) -> str:
    data = config.get("data") or {}
    source, _ = recorded_name(data.get("source", "?"), data)
    partition, options = recorded_name(data.get("partition", "?"), data)
    parameter = PARTITION_PARAMETER.get(partition)
    suffix = f"({options[parameter]})" if parameter and parameter in options else ""
    return f"{source}/{partition}{suffix}"


def read_run(path: str | Path) -> RunRecord:
    """Read a run folder written by ``FederatedTrainer`` (clear error when it is not one)."""
    path = Path(path)
    summary_path = path / "summary.json"
    if "*" in str(path) and not path.exists():  # a shell pattern that matched nothing
        raise MissingFileError(f"{str(path)!r} matches no run folder")
    if not summary_path.is_file():
        raise MissingFileError(f"{str(path)!r} is not a finished fedlight run (no summary.json)")
    summary = json.loads(summary_path.read_text())
    config_path = path / "config.yaml"
    config = yaml.safe_load(config_path.read_text()) if config_path.is_file() else {}
    history = read_metrics(path)
    per_client_path = path / "per_client.json"
    per_client = {}
    if per_client_path.is_file():
        per_client = {r["client"]: r["personalized_accuracy"]
                      for r in json.loads(per_client_path.read_text())}
    seed = int((config.get("trainer") or {}).get("seed", 0))
    return RunRecord(path, summary.get("method", path.name), _setting(config), seed, summary,
                     history, per_client)


def _finite(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def _last(run: RunRecord, key: str) -> float | None:
    values = [r.get(key) for r in run.history if math.isfinite(r.get(key, math.nan))]
    return values[-1] if values else None


def _summary(key: str) -> Callable[[RunRecord], float | None]:
    return lambda run: run.summary.get(key)


def _last_row(key: str) -> Callable[[RunRecord], float | None]:
    return lambda run: _last(run, key)


def _process(kind: str) -> Callable[[RunRecord], float | None]:
    return lambda run: (run.process_seconds or {}).get(kind)


#: The window of ``mean_last_*`` in a summary written before trainer.report_last existed.
FORMER_REPORT_LAST = 10

Column = tuple[str, Callable[[RunRecord], float | None], str]
#: Columns of the results table: (title, value of one run, how a group is shown): "%" mean ±
#: std in percent, "mean3" the mean to three places, "seconds" the mean in whole seconds;
#: "{last}" in a title is the runs' report_last.
COLUMNS: list[Column] = [
    ("best personalized", _summary("best_personalized_accuracy"), "%"),
    ("last personalized", _summary("last_personalized_accuracy"), "%"),
    ("mean last-{last} personalized", _summary("mean_last_personalized_accuracy"), "%"),
    ("best global", _summary("best_global_accuracy"), "%"),
    ("last global", _summary("last_global_accuracy"), "%"),
    ("std (fairness)", _last_row("personalized_accuracy_std"), "%"),
    ("CV", _last_row("personalized_accuracy_cv"), "mean3"),
    ("wall s / run", _process("wall"), "seconds"),
    ("CPU s / run", _process("cpu"), "seconds"),
]


def report_window(runs: Sequence[RunRecord]) -> str:
    """The runs' ``report_last`` (the evaluated rounds their ``mean_last_*`` averages), as a
    column title shows it: ``5``, or ``5/10`` for runs of different windows."""
    windows = sorted({int(run.summary.get("report_last") or FORMER_REPORT_LAST) for run in runs})
    return "/".join(str(w) for w in windows) or str(FORMER_REPORT_LAST)


def table_columns(extra: Sequence[str] = (), runs: Sequence[RunRecord] = ()) -> list[Column]:
    """COLUMNS (titled with the ``runs``' report window), then ``last <name>`` for each extra
    metrics.csv column (e.g. ``hpm_accuracy_mean``): its last evaluated value, in % where the
    name says accuracy."""
    window = report_window(runs)
    return [(title.format(last=window), value, style) for title, value, style in COLUMNS] + [
        (f"last {name}", _last_row(name), "%" if "accuracy" in name else "mean3")
        for name in extra]


def group_statistics(runs: Sequence[RunRecord], extra: Sequence[str] = ()) -> list[dict[str, Any]]:
    """One row per method, setting and round count: ``seeds`` and, per column (with the
    ``extra`` metrics.csv columns), the mean, the sample standard deviation (n - 1 in the
    denominator) over the runs that have the value, and their count ``n`` (mean ``None``
    where no run has the value; std ``None`` where one run has it)."""
    groups: dict[tuple[str, str, int], list[RunRecord]] = defaultdict(list)
    for run in runs:
        groups[run.group].append(run)
    columns = table_columns(extra, runs)
    rows = []
    for (method, setting, rounds), members in sorted(groups.items()):
        row: dict[str, Any] = {"method": method, "setting": setting, "rounds": rounds,
                               "seeds": len(members)}
        for title, value, _ in columns:
            numbers = _finite([value(m) for m in members])
            row[f"{title} mean"] = statistics.mean(numbers) if numbers else None
            row[f"{title} std"] = statistics.stdev(numbers) if len(numbers) > 1 else None
            row[f"{title} n"] = len(numbers)
        rows.append(row)
    return rows


#: What the results table's cells are, under its title.
TABLE_NOTE = ("Accuracies in %: the mean ± the sample standard deviation (n - 1 in the "
              "denominator) over seeds; a cell of one run shows its value alone, and (n=k) "
              "marks a cell that only k of the row's runs have a value for. std (fairness) is "
              "the spread of the clients' accuracies within a run at its last round (the "
              "population standard deviation over clients, as GPFL's Table 3).")


def _cell(row: dict[str, Any], title: str, style: str) -> str:
    mean, std, count = row[f"{title} mean"], row[f"{title} std"], row[f"{title} n"]
    if mean is None:
        return "-"
    if style == "mean3":
        text = f"{mean:.3f}"
    elif style == "seconds":
        text = f"{mean:.0f}"
    else:
        text = f"{100 * mean:.2f}" + ("" if std is None else f" ± {100 * std:.2f}")
    return text + (f" (n={count})" if count < row["seeds"] else "")


def results_table(runs: Sequence[RunRecord], extra: Sequence[str] = ()) -> str:
    """Markdown table: one row per method, setting and round count (accuracies in %, mean ±
    sample std over seeds, as TABLE_NOTE says), with the runs' mean wall and CPU seconds
    where they were recorded and the ``extra`` metrics.csv columns' last values."""
    rows = group_statistics(runs, extra)
    timed = any(run.process_seconds for run in runs)
    columns = [c for c in table_columns(extra, runs) if timed or c[2] != "seconds"]
    header = ["method", "setting", "rounds", "seeds", *(title for title, _, _ in columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for row in rows:
        cells = [row["method"], row["setting"], str(row["rounds"]), str(row["seeds"])]
        cells += [_cell(row, title, style) for title, _, style in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_curves(runs: Sequence[RunRecord], path: Path, formats: Iterable[str] | None = None
                ) -> list[Path]:
    """Personalized accuracy against the round per method, setting and round count: the mean
    over seeds, with a band of one sample standard deviation where two or more seeds have
    the round; what all curves share (the setting, the round count) is the title, not
    repeated in each label. Written in each of ``formats`` (default PNG); returns the files."""
    groups: dict[tuple[str, str, str], dict[float, list[float]]] = defaultdict(
        lambda: defaultdict(list))
    for run in runs:
        for row in run.history:
            if math.isfinite(row.get("personalized_accuracy", math.nan)):
                key = (run.method, run.setting, f"{run.rounds} rounds")
                groups[key][row["round"]].append(100 * row["personalized_accuracy"])
    labels, shared = curve_labels(list(groups))

    def draw(axes: Any) -> None:
        ax = axes[0][0]
        for key, by_round in sorted(groups.items()):
            mean_band(ax, by_round, labels[key])
        integer_axis(ax.xaxis)
        ax.set_xlabel("round")
        ax.set_ylabel("personalized accuracy (%)")
        ax.set_title(", ".join(shared))
        seeds = max((len(v) for by_round in groups.values() for v in by_round.values()),
                    default=1)
        legend_outside(ax, title="mean ± std over seeds" if seeds > 1 else None)

    return save_figure(path, draw, (7.5, 4.0), formats=formats)


def curve_labels(keys: Sequence[tuple[str, ...]]
                 ) -> tuple[dict[tuple[str, ...], str], list[str]]:
    """Each key's label from the parts that differ between keys, and the parts all share."""
    varying = [i for i in range(len(keys[0]) if keys else 0)
               if len({key[i] for key in keys}) > 1]
    shared = [part for i, part in enumerate(keys[0] if keys else ()) if i not in varying]
    return {key: " ".join(key[i] for i in (varying or [0])) for key in keys}, shared


def write_curves_csv(runs: Sequence[RunRecord], path: Path, extra: Sequence[str] = ()) -> None:
    """Every evaluated round of every run: its labels, the round, personalized and global
    accuracy and the ``extra`` metrics.csv columns (empty where a run has no such value)."""
    metrics = ["personalized_accuracy", "global_accuracy", *extra]
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["method", "setting", "seed", "rounds", "round", *metrics])
        for run in runs:
            for row in run.history:
                values = [row.get(key, math.nan) for key in metrics]
                if any(math.isfinite(v) for v in values):
                    writer.writerow([run.method, run.setting, run.seed, run.rounds,
                                     int(row["round"]),
                                     *["" if not math.isfinite(v) else v for v in values]])


def client_gains(first: Sequence[RunRecord], second: Sequence[RunRecord]) -> list[float]:
    """Per-client accuracy of ``second`` minus ``first``, pairing runs by seed."""
    by_seed = {r.seed: r for r in first}
    gains = []
    for run in second:
        other = by_seed.get(run.seed)
        if other is not None:
            gains += [run.per_client[c] - other.per_client[c]
                      for c in run.per_client if c in other.per_client]
    return gains


def plot_gain_histogram(gains: Sequence[float], names: tuple[str, str], path: Path,
                        formats: Iterable[str] | None = None) -> list[Path]:
    """Histogram of per-client accuracy changes, second method minus first, in points."""
    def draw(axes: Any) -> None:
        ax = axes[0][0]
        ax.hist([100 * g for g in gains], bins=20, color="tab:blue", edgecolor="white")
        ax.axvline(0, color="black", lw=1)
        ax.set_xlabel(f"per-client accuracy change, {names[1]} - {names[0]} (points)")
        ax.set_ylabel("clients")
        integer_axis(ax.yaxis)  # whole clients

    return save_figure(path, draw, (6.0, 4.0), formats=formats)


def plot_partition(run: RunRecord, path: Path, formats: Iterable[str] | None = None) -> list[Path]:
    """A run's partition heatmap, drawn again from its ``partition_stats.json`` (in each of
    ``formats``), or its ``partition.png`` copied where it has no statistics; no file where
    it has neither."""
    stats = run.path / "partition_stats.json"
    if stats.is_file():
        return save_heatmap(json.loads(stats.read_text()), path, formats)
    heatmap = run.path / "partition.png"
    if not heatmap.is_file():
        return []
    shutil.copyfile(heatmap, path)
    return [path]


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def one_run_per_seed(runs: Sequence[RunRecord]) -> tuple[list[RunRecord], list[RunRecord]]:
    """The newest run (by its summary.json) of each method, setting, round count and seed,
    and the older repeats left out, so that "seeds" counts distinct seeds (a run of another
    length is another row, never a repeat)."""
    newest: dict[tuple[tuple[str, str, int], int], RunRecord] = {}
    for run in sorted(runs, key=lambda r: (r.path / "summary.json").stat().st_mtime):
        newest[(run.group, run.seed)] = run
    kept = [r for r in runs if newest[(r.group, r.seed)] is r]
    return kept, [r for r in runs if r not in kept]


def check_compare(runs: Sequence[RunRecord], compare: tuple[str, str]) -> None:
    """Raise ConfigError (one line) unless both methods of ``--compare`` have runs of one
    setting and round count."""
    groups: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for run in runs:
        groups[run.method].add((run.setting, run.rounds))
    absent = [name for name in compare if name not in groups]
    if absent:
        raise ConfigError(f"--compare {' '.join(compare)}: no run of {', '.join(absent)}; "
                         f"methods in these runs: {', '.join(sorted(groups))}")
    if not groups[compare[0]] & groups[compare[1]]:
        where = "; ".join(f"{name} in " + ", ".join(f"{s} ({r} rounds)" for s, r in
                                                     sorted(groups[name])) for name in compare)
        raise ConfigError(f"--compare {' '.join(compare)}: the two methods share no setting "
                         f"and round count ({where})")


def write_report(run_dirs: Sequence[str | Path], out: str | Path,
                 compare: tuple[str, str] | None = None,
                 formats: Iterable[str] | None = None) -> Path:
    """Write ``report.md`` and its figures (PNG, and PDF where ``formats`` asks) for the given
    run folders into ``out``."""
    return write_report_of_runs([read_run(p) for p in run_dirs], out, compare,
                                formats=formats)


def write_report_of_runs(runs: Sequence[RunRecord], out: str | Path,
                         compare: tuple[str, str] | None = None,
                         title: str = "# fedlight report", notes: Sequence[str] = (),
                         extra: Sequence[str] = (), formats: Iterable[str] | None = None
                         ) -> Path:
    """``write_report`` of runs already read (their method and setting may be relabelled,
    as ``fedlight sweep`` does), with ``notes`` (Markdown lines) after the title and the
    ``extra`` metrics.csv columns in the table; figures in each of ``formats`` (default PNG,
    or FEDLIGHT_FIGURE_FORMATS: see :mod:`fedlight.plotting`)."""
    formats = figure_formats(formats)
    runs, repeated = one_run_per_seed(runs)
    if not runs:
        raise ConfigError("give at least one run folder")
    if compare:
        check_compare(runs, compare)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sections = [title, "", *notes, TABLE_NOTE, ""]
    if repeated:
        sections += [f"Not counted (an older run of the same method, setting, rounds and seed): "
                     f"{', '.join(str(r.path) for r in repeated)}.", ""]
    sections += [results_table(runs, extra), "", "![curves](curves.png)", ""]
    plot_curves(runs, out / "curves.png", formats)
    write_curves_csv(runs, out / "curves.csv", extra)
    by_setting: dict[str, list[RunRecord]] = defaultdict(list)
    for run in runs:
        by_setting[run.setting].append(run)
    for setting, members in sorted(by_setting.items()):
        name = f"partition_{_safe(setting)}.png"
        if plot_partition(members[0], out / name, formats):
            sections += [f"## Partition {setting}", "", f"![partition]({name})", ""]
        sections += _gain_sections(members, setting, compare, out, formats)
    (out / "report.md").write_text("\n".join(sections))
    return out / "report.md"


def _gain_sections(members: Sequence[RunRecord], setting: str, compare: tuple[str, str] | None,
                   out: Path, formats: Iterable[str] | None = None) -> list[str]:
    """The per-client gain histogram of the compared pair on one setting (each round count
    apart), as Markdown lines."""
    sections: list[str] = []
    for rounds in sorted({m.rounds for m in members}):
        same_length = [m for m in members if m.rounds == rounds]
        methods = sorted({m.method for m in same_length})
        suffix = f"_{rounds}r" if len({m.rounds for m in members}) > 1 else ""
        pair = compare if compare else (tuple(methods) if len(methods) == 2 else None)
        if pair and all(p in methods for p in pair):
            gains = client_gains([m for m in same_length if m.method == pair[0]],
                                 [m for m in same_length if m.method == pair[1]])
            if gains:
                name = (f"client_gain_{_safe(pair[0])}_vs_{_safe(pair[1])}_{_safe(setting)}"
                        f"{suffix}.png")
                plot_gain_histogram(gains, pair, out / name, formats)
                better = sum(g > 0 for g in gains) / len(gains)
                sections += [f"## {pair[1]} vs {pair[0]} on {setting} ({rounds} rounds)", "",
                             f"{100 * better:.0f} % of clients gain accuracy.", "",
                             f"![gains]({name})", ""]
    return sections


def main(argv: list[str]) -> None:
    parser = CommandParser(prog="fedlight report", description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders (written by fedlight fit)")
    parser.add_argument("--out", default="report", help="output folder (default: report)")
    parser.add_argument("--compare", nargs=2, metavar=("BASE", "OTHER"),
                        help="two method names for the per-client gain histogram")
    parser.add_argument("--pdf", action="store_true",
                        help="write every figure as PDF (vector) beside its PNG")
    options = parser.parse_args(argv)
    path = write_report(options.runs, options.out,
                        tuple(options.compare) if options.compare else None,
                        with_pdf(options.pdf))
    print(path.read_text())
