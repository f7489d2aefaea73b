"""The pFL baselines side by side on MNIST-5k, pathological label skew (2 classes per client).

Trains FedAvg, Local, FedProx, FedPer, FedRep, FedBN, LG-FedAvg, Ditto, FedRoD, FedProto and
GPFL (those present in ``fedlight.clients.CLIENTS``; missing ones are skipped and named) with
GPFL's workload: 20 clients, 75/25 split per client, 4-layer CNN (``cnn_bn`` for FedBN), SGD lr
0.005, batch 10, 1 local epoch, join ratio 1, sample-weighted aggregation. Every method uses its
class defaults otherwise (FedRep: 10 head epochs; Ditto: lamda 1; FedProx: mu 1; FedProto:
lamda 1, head prediction). The partition is fixed (data seed 0); the seed changes model
initialization, batch order and the methods' own randomness.

Printed per method, mean ± std over seeds, in %: best and last personalized accuracy (pooled
over clients), best and last global accuracy (global model on the union of the clients' test
splits; "-" without a global model), the fairness std (``personalized_accuracy_std``, the std
of the clients' accuracies) at the round of best personalized accuracy and at the last round,
and training seconds per round.

    python benchmarks/compare_baselines.py --rounds 15 --seeds 1 \
        --out benchmarks/results/baselines.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "offline")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from fedlight.clients import CLIENTS  # noqa: E402
from fedlight.data import FederatedDataModule  # noqa: E402
from fedlight.federation import FederatedTrainer  # noqa: E402

METHODS = ("FedAvg", "Local", "FedProx", "FedPer", "FedRep", "FedBN", "LGFedAvg", "Ditto",
           "FedRoD", "FedProto", "GPFL")
BACKBONE = {"FedBN": "cnn_bn"}
COLUMNS = ("best pers.", "last pers.", "best global", "last global", "std @ best",
           "std last", "s / round")


def run_once(method: str, seed: int, rounds: int, root: str, threads: int | None
             ) -> dict[str, float | None]:
    """One federated run; returns the figures of one table row (fractions, seconds)."""
    data = FederatedDataModule(source="mnist5k", num_clients=20, partition="pathological",
                               classes_per_client=2, train_fraction=0.75, seed=0)
    torch.manual_seed(seed)
    model = CLIENTS[method](backbone=BACKBONE.get(method, "cnn"), num_classes=10,
                            input_shape=(1, 28, 28), lr=0.005)
    trainer = FederatedTrainer(rounds=rounds, join_ratio=1.0, local_epochs=1, batch_size=10,
                               seed=seed, weighting="samples", accelerator="cpu",
                               default_root_dir=root, logger="csv", progress_bar=False,
                               checkpoint_every=rounds, threads=threads, verbose=False)
    summary = trainer.fit(model, data)
    history = trainer.history
    best_round = summary["best_personalized_accuracy_round"]
    at_best = next(r for r in history if r["round"] == best_round)
    return {
        "best pers.": summary["best_personalized_accuracy"],
        "last pers.": summary["last_personalized_accuracy"],
        "best global": summary["best_global_accuracy"],
        "last global": summary["last_global_accuracy"],
        "std @ best": at_best["personalized_accuracy_std"],
        "std last": history[-1]["personalized_accuracy_std"],
        "s / round": summary["seconds"] / max(len(history), 1),
    }


def cell(values: list[float | None], percent: bool = True) -> str:
    """``mean ± std`` over seeds (std 0 for one seed); ``-`` when the method has no value."""
    if any(v is None for v in values):
        return "-"
    scale = 100.0 if percent else 1.0
    mean = scale * statistics.fmean(values)
    std = scale * statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.2f} ± {std:.2f}" if percent else f"{mean:.1f}"


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30, help="rounds per run")
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1 per method")
    parser.add_argument("--methods", nargs="+", default=list(METHODS),
                        help="client class names (default: the baselines and GPFL)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--out", type=Path, default=None, help="also write the Markdown here")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.seeds < 1:
        parser.error(f"--rounds and --seeds must be >= 1, got {args.rounds} and {args.seeds}")
    unknown = [m for m in args.methods if m not in METHODS and m not in CLIENTS]
    if unknown:
        parser.error(f"unknown method(s) {unknown}; valid: {sorted(CLIENTS)}")

    started, cpu_started = time.perf_counter(), time.process_time()
    seeds = list(range(args.seeds))
    methods = [m for m in args.methods if m in CLIENTS]
    missing = [m for m in args.methods if m not in CLIENTS]
    rows: dict[str, dict[str, list[float | None]]] = {}
    for method in methods:
        with tempfile.TemporaryDirectory() as root:
            runs = [run_once(method, s, args.rounds, root, args.threads) for s in seeds]
        rows[method] = {c: [r[c] for r in runs] for c in COLUMNS}
        print(f"  {method:<10} best pers. {cell(rows[method]['best pers.'])}", file=sys.stderr,
              flush=True)
    wall, cpu = (time.perf_counter() - started) / 60, (time.process_time() - cpu_started) / 60

    lines = [
        "### Baselines on MNIST-5k, pathological (2 classes per client), 20 clients",
        "",
        f"4-layer CNN (`cnn_bn` for FedBN), SGD lr 0.005, batch 10, 1 local epoch, join ratio 1; "
        f"**{args.rounds} rounds**, seeds {seeds} (mean ± std over seeds), accuracies in %. "
        "\"std\" is the std of the clients' personalized accuracies (fairness; lower is "
        "fairer); \"-\": no global model.",
        "",
        "| Method | " + " | ".join(COLUMNS) + " |",
        "| --- | " + " | ".join("---" for _ in COLUMNS) + " |",
    ]
    for method in methods:
        cells = [cell(rows[method][c], percent=c != "s / round") for c in COLUMNS]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    if missing:
        lines += ["", f"Not in fedlight.clients when this ran (skipped): {', '.join(missing)}."]
    lines += ["", f"{len(methods) * len(seeds)} runs, wall time {wall:.1f} min, CPU time of "
              f"this process {cpu:.1f} min (threads: {args.threads or torch.get_num_threads()})."]
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return text


if __name__ == "__main__":
    main()
