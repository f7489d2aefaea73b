"""``fedlight report RUN_DIR... --out DIR``: paper-style tables and plots from run folders.

Runs are grouped by method and setting (source, partition and its parameter); seeds of the
same method and setting are pooled as mean +- std. Written to ``DIR``:

* ``report.md``: methods x settings of best and last personalized accuracy, global accuracy
  and fairness (std and coefficient of variation of client accuracies at the last round, as
  GPFL's Table 3), with the number of seeds;
* ``curves.png``: personalized accuracy against the round, one line per method and setting
  (mean over seeds);
* ``client_gain_<A>_vs_<B>.png``: histogram of per-client accuracy changes between the first
  two methods of a setting (MAP's Fig. 10), when ``--compare A B`` is given or exactly two
  methods share a setting;
* ``partition_<setting>.png``: the partition heatmap of each setting.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shutil
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PARTITION_PARAMETER = {"dirichlet": "beta", "pathological": "classes_per_client",
                       "shards": "shards_per_client"}


@dataclass
class Run:
    """One run folder, read back."""

    path: Path
    method: str
    setting: str
    seed: int
    summary: dict[str, Any]
    history: list[dict[str, float]]
    per_client: dict[int, float] = field(default_factory=dict)


def _setting(config: dict[str, Any]) -> str:
    data = config.get("data") or {}
    partition = data.get("partition", "?")
    parameter = PARTITION_PARAMETER.get(partition)
    suffix = f"({data[parameter]})" if parameter and parameter in data else ""
    return f"{data.get('source', '?')}/{partition}{suffix}"


def _number(text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def read_run(path: str | Path) -> Run:
    """Read a run folder written by ``FederatedTrainer`` (clear error when it is not one)."""
    path = Path(path)
    summary_path = path / "summary.json"
    if not summary_path.is_file():
        raise FileNotFoundError(f"{str(path)!r} is not a finished fedlight run (no summary.json)")
    summary = json.loads(summary_path.read_text())
    config_path = path / "config.yaml"
    config = yaml.safe_load(config_path.read_text()) if config_path.is_file() else {}
    with (path / "metrics.csv").open() as handle:
        history = [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(handle)]
    per_client_path = path / "per_client.json"
    per_client = {}
    if per_client_path.is_file():
        per_client = {r["client"]: r["personalized_accuracy"]
                      for r in json.loads(per_client_path.read_text())}
    seed = int((config.get("trainer") or {}).get("seed", 0))
    return Run(path, summary.get("method", path.name), _setting(config), seed, summary, history,
               per_client)


def _mean_std(values: Sequence[float | None]) -> str:
    numbers = [100 * v for v in values if v is not None and math.isfinite(v)]
    if not numbers:
        return "-"
    if len(numbers) == 1:
        return f"{numbers[0]:.2f}"
    return f"{statistics.mean(numbers):.2f} ± {statistics.stdev(numbers):.2f}"


def _last(run: Run, key: str) -> float | None:
    values = [r.get(key) for r in run.history if math.isfinite(r.get(key, math.nan))]
    return values[-1] if values else None


def results_table(runs: Sequence[Run]) -> str:
    """Markdown table: one row per method, one column group per setting (values in %)."""
    groups: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for run in runs:
        groups[(run.method, run.setting)].append(run)
    lines = ["| method | setting | seeds | best personalized | last personalized | "
             "mean last-10 personalized | best global | last global | std (fairness) | CV |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (method, setting), members in sorted(groups.items()):
        s = [m.summary for m in members]
        lines.append("| " + " | ".join([
            method, setting, str(len(members)),
            _mean_std([x.get("best_personalized_accuracy") for x in s]),
            _mean_std([x.get("last_personalized_accuracy") for x in s]),
            _mean_std([x.get("mean_last_personalized_accuracy") for x in s]),
            _mean_std([x.get("best_global_accuracy") for x in s]),
            _mean_std([x.get("last_global_accuracy") for x in s]),
            _mean_std([_last(m, "personalized_accuracy_std") for m in members]),
            _cv([_last(m, "personalized_accuracy_cv") for m in members]),
        ]) + " |")
    return "\n".join(lines)


def _cv(values: Sequence[float | None]) -> str:
    numbers = [v for v in values if v is not None and math.isfinite(v)]
    return f"{statistics.mean(numbers):.3f}" if numbers else "-"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(runs: Sequence[Run], path: Path) -> None:
    """Personalized accuracy against the round, mean over seeds, per method and setting."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    groups: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        for row in run.history:
            if math.isfinite(row.get("personalized_accuracy", math.nan)):
                groups[f"{run.method} {run.setting}"][row["round"]].append(
                    row["personalized_accuracy"])
    for label, by_round in sorted(groups.items()):
        rounds = sorted(by_round)
        ax.plot(rounds, [statistics.mean(by_round[r]) for r in rounds], label=label)
    ax.set_xlabel("round")
    ax.set_ylabel("personalized accuracy")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def client_gains(first: Sequence[Run], second: Sequence[Run]) -> list[float]:
    """Per-client accuracy of ``second`` minus ``first``, pairing runs by seed."""
    by_seed = {r.seed: r for r in first}
    gains = []
    for run in second:
        other = by_seed.get(run.seed)
        if other is not None:
            gains += [run.per_client[c] - other.per_client[c]
                      for c in run.per_client if c in other.per_client]
    return gains


def plot_gain_histogram(gains: Sequence[float], names: tuple[str, str], path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.hist([100 * g for g in gains], bins=20, color="tab:blue", edgecolor="white")
    ax.axvline(0, color="black", lw=1)
    ax.set_xlabel(f"per-client accuracy change, {names[1]} - {names[0]} (points)")
    ax.set_ylabel("clients")
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # whole clients on the y axis
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def one_run_per_seed(runs: Sequence[Run]) -> tuple[list[Run], list[Run]]:
    """The newest run (by its summary.json) of each method, setting and seed, and the older
    repeats left out, so that "seeds" counts distinct seeds."""
    newest: dict[tuple[str, str, int], Run] = {}
    for run in sorted(runs, key=lambda r: (r.path / "summary.json").stat().st_mtime):
        newest[(run.method, run.setting, run.seed)] = run
    kept = [r for r in runs if newest[(r.method, r.setting, r.seed)] is r]
    return kept, [r for r in runs if r not in kept]


def write_report(run_dirs: Sequence[str | Path], out: str | Path,
                 compare: tuple[str, str] | None = None) -> Path:
    """Write ``report.md`` and its PNGs for the given run folders into ``out``."""
    runs, repeated = one_run_per_seed([read_run(p) for p in run_dirs])
    if not runs:
        raise ValueError("give at least one run folder")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sections = ["# fedlight report", "", "Accuracies in %, mean ± std over seeds.", ""]
    if repeated:
        sections += [f"Not counted (an older run of the same method, setting and seed): "
                     f"{', '.join(str(r.path) for r in repeated)}.", ""]
    sections += [results_table(runs), "", "![curves](curves.png)", ""]
    plot_curves(runs, out / "curves.png")
    by_setting: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_setting[run.setting].append(run)
    for setting, members in sorted(by_setting.items()):
        heatmap = members[0].path / "partition.png"
        if heatmap.is_file():
            name = f"partition_{_safe(setting)}.png"
            shutil.copyfile(heatmap, out / name)
            sections += [f"## Partition {setting}", "", f"![partition]({name})", ""]
        methods = sorted({m.method for m in members})
        pair = compare if compare else (tuple(methods) if len(methods) == 2 else None)
        if pair and all(p in methods for p in pair):
            gains = client_gains([m for m in members if m.method == pair[0]],
                                 [m for m in members if m.method == pair[1]])
            if gains:
                name = f"client_gain_{_safe(pair[0])}_vs_{_safe(pair[1])}_{_safe(setting)}.png"
                plot_gain_histogram(gains, pair, out / name)
                better = sum(g > 0 for g in gains) / len(gains)
                sections += [f"## {pair[1]} vs {pair[0]} on {setting}", "",
                             f"{100 * better:.0f} % of clients gain accuracy.", "",
                             f"![gains]({name})", ""]
    (out / "report.md").write_text("\n".join(sections))
    return out / "report.md"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="fedlight report", description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders (written by fedlight fit)")
    parser.add_argument("--out", default="report", help="output folder (default: report)")
    parser.add_argument("--compare", nargs=2, metavar=("BASE", "OTHER"),
                        help="two method names for the per-client gain histogram")
    options = parser.parse_args(argv)
    path = write_report(options.runs, options.out,
                        tuple(options.compare) if options.compare else None)
    print(path.read_text())
