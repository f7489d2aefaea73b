"""Several runs of ``benchmarks/vs_pfllib.py`` summarized over seeds: per method, each
library's best accuracy as mean ± sample std over the runs, the paired difference per run
(fedlight minus PFLlib on the same split) and its mean, and the median whole-process wall time
and CPU time of each library; and, where the runs kept their evaluations, the same on the
states both libraries evaluated.

Give the ``--raw`` files of the runs, one per seed, in seed order: each run exported its own
split (``--set trainer.seed=N`` changes the split and fedlight's seed; PFLlib has no seed
option, so its runs differ by its own initialization too). Within a file, a method's
accuracy is the median over its repeats (``--repeats``), as vs_pfllib.py reports it.

Where the runs kept their evaluations (vs_pfllib.py's ``FILE.rounds.csv``), a second table
compares the two libraries on the same states: the two evaluate at different times (PFLlib
the states after 0..R-1 trained rounds, fedlight after 1..R), so "best" ranges over
different states; this table takes, in both, only the trained-round counts both evaluated,
and gives the best over them and the mean of the last ``--last`` of them (less noisy than a
maximum).

A third table tests an explanation of a difference: ``--changed NAME LOG...`` gives the printed
output of PFLlib runs with one change to PFLlib's code (NAME says which), on the same exported
splits; each log is matched to its raw file by the dataset it names, its method by the
algorithm it names. For each method and change, the mean of the last ``--last`` shared states
of fedlight, of PFLlib and of the changed PFLlib, and fedlight's difference to each: the
change explains a gap where it closes it.

    python benchmarks/vs_pfllib_seeds.py seed0.csv seed1.csv seed2.csv --out table.md \
        --changed "loader keeps the last batch" fedper_seed0.txt fedper_seed1.txt ...
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections.abc import Sequence
from pathlib import Path

from vs_pfllib import pfllib_curve

Key = tuple[str, str]  # (method, fedlight variant)


def read_raw(path: Path) -> list[dict[str, str]]:
    """One ``--raw`` file of vs_pfllib.py as rows; a one-line error when it is not one."""
    if not path.is_file():
        raise SystemExit(f"error: {path}: no such file (give the --raw files of vs_pfllib.py)")
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    needed = {"method", "library", "variant", "wall_s", "cpu_s", "best_accuracy"}
    if not rows or not needed <= rows[0].keys():
        raise SystemExit(f"error: {path}: not a vs_pfllib.py --raw file (needs the columns "
                         f"{', '.join(sorted(needed))})")
    return rows


def medians(rows: Sequence[dict[str, str]], column: str,
            scale: float = 1.0) -> tuple[dict[Key, float], dict[str, float]]:
    """``column`` (times ``scale``), its median over repeats: fedlight's by (method,
    variant), PFLlib's by method."""
    ours: dict[Key, list[float]] = {}
    theirs: dict[str, list[float]] = {}
    for row in rows:
        value = scale * float(row[column])
        if row["library"] == "fedlight":
            ours.setdefault((row["method"], row["variant"]), []).append(value)
        else:
            theirs.setdefault(row["method"], []).append(value)
    return ({key: statistics.median(v) for key, v in ours.items()},
            {method: statistics.median(v) for method, v in theirs.items()})


def spread(values: Sequence[float]) -> str:
    """``mean ± sample std`` (the mean alone for one value)."""
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def summary(files: Sequence[Path]) -> list[str]:
    """The Markdown table over ``files`` (one row per method and fedlight variant present in
    every file with its PFLlib run)."""
    runs = [read_raw(path) for path in files]
    accuracy = [medians(rows, "best_accuracy", scale=100) for rows in runs]  # fractions -> %
    wall = [medians(rows, "wall_s") for rows in runs]
    cpu = [medians(rows, "cpu_s") for rows in runs]
    keys = [key for key in accuracy[0][0]
            if all(key in ours and key[0] in theirs for ours, theirs in accuracy)]
    lines = ["| method | runs | fedlight best (%) | PFLlib best (%) | fedlight - PFLlib per run "
             "| mean difference | fedlight wall (s, median) | PFLlib wall (s, median) "
             "| fedlight CPU (s, median) | PFLlib CPU (s, median) |",
             "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for key in keys:
        method, variant = key
        ours = [run[0][key] for run in accuracy]
        theirs = [run[1][method] for run in accuracy]
        gaps = [a - b for a, b in zip(ours, theirs, strict=True)]
        label = f"{method}, {variant}" if variant else method
        lines.append(
            f"| {label} | {len(files)} | {spread(ours)} | {spread(theirs)} | "
            f"{' / '.join(f'{gap:+.2f}' for gap in gaps)} | {statistics.mean(gaps):+.2f} | "
            f"{statistics.median(run[0][key] for run in wall):.1f} | "
            f"{statistics.median(run[1][method] for run in wall):.1f} | "
            f"{statistics.median(run[0][key] for run in cpu):.1f} | "
            f"{statistics.median(run[1][method] for run in cpu):.1f} |")
    return lines


def read_curves(raw: Path) -> dict[tuple[str, str, str], dict[int, float]] | None:
    """The rounds file beside ``raw`` as (library, method, variant) -> trained rounds ->
    accuracy in % (the median over repeats); None without the file."""
    path = raw.with_suffix(".rounds.csv")
    if not path.is_file():
        return None
    values: dict[tuple[str, str, str], dict[int, list[float]]] = {}
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            key = (row["library"], row["method"], row["variant"])
            values.setdefault(key, {}).setdefault(int(row["trained_rounds"]), []).append(
                100 * float(row["accuracy"]))
    return {key: {r: statistics.median(v) for r, v in curve.items()}
            for key, curve in values.items()}


def tail_means(curves: Sequence[dict[int, float]], last: int) -> tuple[float, ...]:
    """Each curve's mean over the last ``last`` trained-round counts every curve evaluated."""
    shared = sorted(set.intersection(*(set(curve) for curve in curves)))[-last:]
    return tuple(statistics.mean(curve[r] for r in shared) for curve in curves)


def same_states(files: Sequence[Path], last: int) -> list[str]:
    """The table over the trained-round counts both libraries evaluated (module docstring);
    only the runs with a rounds file; empty when none has one."""
    curves = [c for c in (read_curves(path) for path in files) if c is not None]
    if not curves:
        return []
    keys = [(method, variant) for library, method, variant in curves[0]
            if library == "fedlight"
            and all(("fedlight", method, variant) in c and ("PFLlib", method, "") in c
                    for c in curves)]
    lines = [f"| method | runs | fedlight best (%) | PFLlib best (%) | mean difference | "
             f"fedlight mean of last {last} (%) | PFLlib mean of last {last} (%) | "
             f"fedlight - PFLlib per run (last {last}) | mean difference (last {last}) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for method, variant in keys:
        best: list[tuple[float, float]] = []
        tail: list[tuple[float, ...]] = []
        for run in curves:
            ours, theirs = run[("fedlight", method, variant)], run[("PFLlib", method, "")]
            shared = sorted(ours.keys() & theirs.keys())
            best.append((max(ours[r] for r in shared), max(theirs[r] for r in shared)))
            tail.append(tail_means((ours, theirs), last))
        label = f"{method}, {variant}" if variant else method
        gaps = [a - b for a, b in tail]
        lines.append(
            f"| {label} | {len(curves)} | {spread([a for a, _ in best])} | "
            f"{spread([b for _, b in best])} | {statistics.mean(a - b for a, b in best):+.2f} | "
            f"{spread([a for a, _ in tail])} | {spread([b for _, b in tail])} | "
            f"{' / '.join(f'{gap:+.2f}' for gap in gaps)} | {statistics.mean(gaps):+.2f} |")
    return lines


def read_changed_log(path: Path, datasets: Sequence[str]) -> tuple[int, str, dict[int, float]]:
    """One log of a changed PFLlib run as (index of the raw file of its dataset, its method,
    trained rounds -> accuracy in %); a one-line error when it is not one or names a dataset
    of none of the raw files."""
    if not path.is_file():
        raise SystemExit(f"error: {path}: no such file (give PFLlib's printed output)")
    text = path.read_text()
    header = dict(map(str.strip, line.split(" = ", 1))
                  for line in text.splitlines() if " = " in line)
    curve = {rounds: 100 * accuracy for rounds, accuracy in pfllib_curve(text)}
    if "dataset" not in header or "algorithm" not in header or not curve:
        raise SystemExit(f"error: {path}: not PFLlib's printed output (needs its 'dataset = ' "
                         "and 'algorithm = ' lines and its evaluations)")
    if header["dataset"] not in datasets:
        raise SystemExit(f"error: {path}: dataset {header['dataset']!r} is none of the raw "
                         f"files' PFLlib datasets ({', '.join(datasets)})")
    return datasets.index(header["dataset"]), header["algorithm"], curve


def pfllib_dataset(rows: Sequence[dict[str, str]], path: Path) -> str:
    """The ``-data`` folder of the PFLlib runs of one raw file."""
    names = {row["command"].split(" -data ")[1].split()[0]
             for row in rows if row["library"] == "PFLlib" and " -data " in row.get("command", "")}
    if len(names) != 1:
        raise SystemExit(f"error: {path}: its PFLlib commands name {len(names)} datasets "
                         "(expected one -data folder)")
    return names.pop()


def changed(files: Sequence[Path], change: str, logs: Sequence[Path], last: int) -> list[str]:
    """The rows of the changed-PFLlib table for one change (module docstring): one per method
    with a log for every raw file, against the first fedlight variant of that method."""
    datasets = [pfllib_dataset(read_raw(path), path) for path in files]
    curves = [read_curves(path) for path in files]
    if any(c is None for c in curves):
        raise SystemExit("error: --changed needs the rounds file of every raw file")
    changed_curves: dict[str, dict[int, dict[int, float]]] = {}
    for log in logs:
        index, method, curve = read_changed_log(log, datasets)
        changed_curves.setdefault(method, {})[index] = curve
    lines = []
    for method, by_run in changed_curves.items():
        if len(by_run) != len(files):
            raise SystemExit(f"error: --changed {change!r}: {method} has logs for "
                             f"{len(by_run)} of the {len(files)} raw files")
        variants = [v for lib, m, v in curves[0] if lib == "fedlight" and m == method]
        if not variants:
            raise SystemExit(f"error: --changed {change!r}: the raw files have no fedlight "
                             f"run of {method}")
        tails: list[tuple[float, ...]] = []
        for index, run in enumerate(curves):
            ours, theirs = run[("fedlight", method, variants[0])], run[("PFLlib", method, "")]
            tails.append(tail_means((ours, theirs, by_run[index]), last))
        before = [a - b for a, b, _ in tails]
        after = [a - c for a, _, c in tails]
        lines.append(
            f"| {method} | {change} | {len(files)} | {spread([a for a, _, _ in tails])} | "
            f"{spread([b for _, b, _ in tails])} | {spread([c for _, _, c in tails])} | "
            f"{' / '.join(f'{gap:+.2f}' for gap in before)} | {statistics.mean(before):+.2f} | "
            f"{' / '.join(f'{gap:+.2f}' for gap in after)} | {statistics.mean(after):+.2f} |")
    return lines


def changed_table(files: Sequence[Path], changes: Sequence[Sequence[str]],
                  last: int) -> list[str]:
    """The changed-PFLlib table over every ``--changed`` entry; empty without one."""
    rows = [line for name, *logs in changes
            for line in changed(files, name, [Path(log) for log in logs], last)]
    if not rows:
        return []
    return [f"| method | change in PFLlib | runs | fedlight mean of last {last} (%) | "
            f"PFLlib mean of last {last} (%) | changed PFLlib mean of last {last} (%) | "
            f"fedlight - PFLlib per run | mean | fedlight - changed PFLlib per run | mean |",
            "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | --- | ---: |", *rows]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("raw", nargs="+", type=Path, help="vs_pfllib.py --raw files, in seed order")
    parser.add_argument("--out", type=Path, default=None, help="also write the tables here")
    parser.add_argument("--last", type=int, default=10,
                        help="evaluations averaged in the same-states table")
    parser.add_argument("--changed", nargs="+", action="append", default=[],
                        metavar="NAME LOG", help="a change to PFLlib's code and the printed "
                        "output of its runs on the raw files' splits (repeatable)")
    args = parser.parse_args(argv)
    if any(len(entry) < 2 for entry in args.changed):
        raise SystemExit("error: --changed needs a name and at least one log")
    tables = [summary(args.raw), same_states(args.raw, args.last),
              changed_table(args.raw, args.changed, args.last)]
    text = "\n\n".join("\n".join(table) for table in tables if table) + "\n"
    print(text, end="")
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
