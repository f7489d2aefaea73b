"""MAP's Tables I / II and Fig. 9 in small: aggregation vs personalization accuracy under
incomplete classes.

Workload (MAP's scene on the embedded data): mnist5k, 100 clients, each a random 2..10 classes
and a LogNormal(0, 0.3) size factor, 20 % local test (the global test set is the union of the
local test splits); the 4-layer CNN, SGD lr 0.03, momentum 0.9, weight decay 1e-5, batch 64,
join ratio 0.2, uniform mean of the uploads, ``--local-epochs`` local epochs. Every method is
evaluated with MAP's protocol:

* aggregation accuracy = the global model on the global test set after the last round;
* personalization accuracy = each participant of the last round scored on its local test split
  right after its local training (``evaluate_after_local_training`` is switched on for every
  method, FedAvg included: its personalized model is the locally trained one), averaged over
  the participants (``personalized_accuracy_mean``);
* HPM accuracy (MAP, FedPHP) = the updated inherited private models, same clients.

Each seed draws its own partition (``data.seed``) and its own training randomness
(``trainer.seed``); the table gives mean and standard deviation over seeds. FedRoD and Ditto
join the table when ``fedlight.clients`` has them.

    python benchmarks/map_table.py                          # 3 seeds x 12 rounds
    python benchmarks/map_table.py --rounds 150 --seeds 3   # the paper's round count
    python benchmarks/map_table.py --rounds 40 --seeds 3 --jobs 2 --threads 1   # 2 processes
"""

from __future__ import annotations

import argparse
import contextlib
import io
import resource
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fedlight.clients import CLIENTS  # noqa: E402
from fedlight.data import FederatedDataModule  # noqa: E402
from fedlight.federation import FederatedTrainer  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CORE_METHODS = ["MAP", "FedRS", "FedPHP", "FedAvg"]
OPTIONAL_METHODS = ["FedRoD", "Ditto"]
COLUMNS = {"aggregation": "global_accuracy", "personalization": "personalized_accuracy_mean",
           "hpm": "hpm_accuracy_mean"}


def make_data(seed: int) -> FederatedDataModule:
    data = FederatedDataModule(source="mnist5k", num_clients=100, partition="incomplete",
                               size_sigma=0.3, min_client_size=5, train_fraction=0.8, seed=seed)
    data.setup()
    return data


def run_one(method: str, seed: int, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """One federated run; returns the last evaluated row of its metrics."""
    data = make_data(seed)
    torch.manual_seed(seed)
    client = CLIENTS[method](backbone="cnn", num_classes=data.num_classes,
                             input_shape=data.input_shape, optimizer="sgd", lr=args.lr,
                             momentum=0.9, weight_decay=1e-5)
    client.evaluate_after_local_training = True  # MAP's protocol for every method
    trainer = FederatedTrainer(
        rounds=args.rounds, join_ratio=0.2, local_epochs=args.local_epochs, batch_size=64,
        eval_every=args.eval_every or args.rounds, seed=seed, weighting="uniform",
        accelerator="cpu", default_root_dir=str(root), run_name=f"{method}-s{seed}",
        checkpoint_every=args.rounds, progress_bar=False, threads=args.threads,
    )
    with contextlib.redirect_stdout(io.StringIO()):
        trainer.fit(client, data)
    return trainer.history[-1]


def mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    spread = statistics.pstdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.fmean(values):.1f} ± {100 * spread:.1f}"


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    lines = ["| method | aggregation acc. (%) | personalization acc. (%) | HPM acc. (%) |",
             "| --- | --- | --- | --- |"]
    for method, rows in results.items():
        cells = []
        for column in COLUMNS.values():
            values = [r[column] for r in rows if isinstance(r.get(column), float)]
            cells.append(mean_std(values))
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_seed_table(results: dict[str, list[dict[str, Any]]]) -> str:
    lines = ["| method | seed | aggregation | personalization | HPM |",
             "| --- | --- | --- | --- | --- |"]
    for method, rows in results.items():
        for seed, row in enumerate(rows):
            cells = [f"{100 * row[c]:.1f}" if isinstance(row.get(c), float) else "-"
                     for c in COLUMNS.values()]
            lines.append(f"| {method} | {seed} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def scatter(results: dict[str, list[dict[str, Any]]], path: Path, title: str) -> None:
    """Fig. 9: x = aggregation accuracy, y = personalization accuracy, one point per method
    (mean over seeds, with the seeds' standard deviation as error bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    for method, rows in results.items():
        xs = [100 * r[COLUMNS["aggregation"]] for r in rows]
        ys = [100 * r[COLUMNS["personalization"]] for r in rows]
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
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--local-epochs", type=int, default=6)
    parser.add_argument("--lr", type=float, default=0.03)
    parser.add_argument("--eval-every", type=int, default=0,
                        help="evaluate every this many rounds (0: only the last round)")
    parser.add_argument("--methods", nargs="+", default=None,
                        help="default: MAP FedRS FedPHP FedAvg (+ FedRoD, Ditto if present)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (processes)")
    parser.add_argument("--out", type=Path, default=RESULTS / "map.md")
    parser.add_argument("--plot", type=Path, default=RESULTS / "map_scatter.png")
    args = parser.parse_args(argv)
    methods = args.methods or CORE_METHODS + [m for m in OPTIONAL_METHODS if m in CLIENTS]
    unknown = [m for m in methods if m not in CLIENTS]
    if unknown:
        parser.error(f"unknown method(s) {unknown}; valid: {sorted(CLIENTS)}")

    started_wall, started_cpu = time.perf_counter(), time.process_time()
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
    with tempfile.TemporaryDirectory() as root, ProcessPoolExecutor(args.jobs) as pool:
        runs = [(seed, method, pool.submit(run_one, method, seed, args, Path(root)))
                for seed in range(args.seeds) for method in methods]
        for seed, method, future in runs:
            row = future.result()
            results[method].append(row)
            print(f"{method:8s} seed {seed}: aggregation {row['global_accuracy']:.4f}  "
                  f"personalization {row['personalized_accuracy_mean']:.4f}", flush=True)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter() - started_wall
    cpu = time.process_time() - started_cpu + children.ru_utime + children.ru_stime

    setting = (f"mnist5k incomplete classes, 100 clients, join ratio 0.2, 4-layer CNN, "
               f"{args.rounds} rounds, {args.local_epochs} local epochs, batch 64, SGD lr "
               f"{args.lr} momentum 0.9, seeds 0..{args.seeds - 1}")
    text = table(results)
    print(text)
    args.plot.parent.mkdir(parents=True, exist_ok=True)
    title = setting.replace(", 4-layer", ",\n4-layer").replace(", SGD", ",\nSGD")
    scatter(results, args.plot, title)
    command = "python benchmarks/map_table.py " + " ".join(argv if argv is not None
                                                            else sys.argv[1:])
    names = ", ".join(methods)
    args.out.write_text(f"""## {names} under incomplete classes (MAP Tables I / II, Fig. 9)

`{command.strip()}`

{setting}. Last-round accuracies, mean ± std over seeds (each seed its own partition).
Aggregation = the global model on the global test set; personalization = each participant of
the last round on its local test split right after local training, averaged over participants
(the same protocol for every method); HPM = the participants' inherited private models.
Wall time {wall / 60:.1f} min, CPU time of all processes {cpu / 60:.1f} min ({args.jobs} process(es)
x {args.threads} torch thread(s)).
Small-scale numbers: not the paper's 150-round, FaMnist/CIFAR settings.

{text}

![aggregation vs personalization](map_scatter.png)

<details><summary>per seed (%)</summary>

{per_seed_table(results)}

</details>
""")
    print(f"wrote {args.out} and {args.plot} ({wall / 60:.1f} min wall, {cpu / 60:.1f} min CPU)")


if __name__ == "__main__":
    main()
