"""MAP's Fig. 9 from a sweep: aggregation against personalization accuracy, one point per method.

Reads ``runs.csv`` of ``fedlight sweep benchmarks/sweeps/map_table.yaml`` (x = the global model
on the global test set after the last round, ``last global``; y = each participant of the last
round right after its local training, averaged, ``last personalized_accuracy_mean``) and draws
the mean over seeds with the seeds' population std as error bars.

    python benchmarks/map_scatter.py sweeps/map_table --out benchmarks/results/map_scatter.png
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections import defaultdict
from pathlib import Path

X, Y = "last global", "last personalized_accuracy_mean"


def points(runs_csv: Path) -> dict[str, tuple[list[float], list[float]]]:
    """Method -> (aggregation accuracies, personalization accuracies) in %, one per run."""
    with runs_csv.open() as handle:
        rows = list(csv.DictReader(handle))
    if rows and (X not in rows[0] or Y not in rows[0]):
        raise SystemExit(f"{runs_csv} has no {X!r} / {Y!r} columns: run map_table.yaml "
                         "(its columns: entry adds them)")
    found: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for row in rows:
        if row[X] and row[Y]:
            found[row["method"]][0].append(100 * float(row[X]))
            found[row["method"]][1].append(100 * float(row[Y]))
    return found


def scatter(found: dict[str, tuple[list[float], list[float]]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    for method, (xs, ys) in found.items():
        x, y = statistics.fmean(xs), statistics.fmean(ys)
        ax.errorbar(x, y, xerr=statistics.pstdev(xs), yerr=statistics.pstdev(ys), fmt="o",
                    capsize=3, alpha=0.85, label=f"{method} ({x:.1f}, {y:.1f})")
    ax.set_xlabel("aggregation accuracy (%)")
    ax.set_ylabel("personalization accuracy (%)")
    ax.set_title(title, fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep_out", type=Path, help="the sweep's output folder (runs.csv)")
    parser.add_argument("--out", type=Path, default=None,
                        help="PNG to write (default: <sweep_out>/map_scatter.png)")
    parser.add_argument("--title", default="MAP's incomplete-classes scene on MNIST-5k")
    args = parser.parse_args(argv)
    out = args.out or args.sweep_out / "map_scatter.png"
    scatter(points(args.sweep_out / "runs.csv"), out, args.title)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
