"""Where to privatize on MNIST-5k: the seven coarse ways and AutoCS / AutoSA / AutoHS.

The paper's Figs. 5 / 6 as one table: aggregation accuracy (the global model on the global test
set, where a complete shared model exists) and personalization accuracy (each client's model on
its local test split, pooled) per privatization way, mean +- std over seeds; plus the
interpolation heatmap (Fig. 9) of the first seed's "AaBb" run.

Workload of ``configs/privatize/mnist5k_*.yaml``: 20 clients with 5 of the 10 classes each
(class-wise shards), 4-layer CNN, SGD lr 0.01 momentum 0.9, batch 10, 1 local epoch, all
clients every round, uniform mean of the shared copies.

    python benchmarks/privatize_table.py --rounds 5 --seeds 3
    python benchmarks/privatize_table.py --rounds 50 --seeds 3 --out benchmarks/results

Writes ``privatize.md`` (command, settings, wall time, table), ``privatize_interpolation.png``
and ``privatize_interpolation.csv`` into ``--out``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

os.environ.setdefault("WANDB_MODE", "offline")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fedlight.clients import CLIENTS  # noqa: E402
from fedlight.data import FederatedDataModule  # noqa: E402
from fedlight.federation import FederatedTrainer  # noqa: E402
from fedlight.privatize_interpolation import interpolation_grid, plot_heatmap, write_csv  # noqa: E402

WAYS = ["AB", "aB", "ab", "Ab", "AaB", "AaBb", "ABb"]  # the paper's Fig. 1 order
AUTOS = ["AutoCS", "AutoSA", "AutoHS"]
DESCRIPTIONS = {
    "AB": "all shared (FedAvg)", "aB": "private encoder", "ab": "all private (Local)",
    "Ab": "private classifier (FedPer)", "AaB": "+ private encoder copy",
    "AaBb": "+ private model copy", "ABb": "+ private classifier copy",
    "AutoCS": "cross-stitch on AaBb", "AutoSA": "soft attention on AaBb",
    "AutoHS": "Gumbel selection on AaBb",
}


def make_data(num_clients: int) -> FederatedDataModule:
    return FederatedDataModule(source="mnist5k", num_clients=num_clients, partition="pathological",
                               classes_per_client=5, train_fraction=0.75)


def make_client(method: str, lr: float) -> Any:
    options = dict(backbone="cnn", num_classes=10, input_shape=(1, 28, 28), lr=lr, momentum=0.9)
    if method in AUTOS:
        return CLIENTS[method](**options)
    return CLIENTS["Privatize"](way=method, **options)


def run_one(method: str, seed: int, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    torch.manual_seed(seed)  # the CLI seeds model initialization with trainer.seed too
    client = make_client(method, args.lr)
    trainer = FederatedTrainer(
        rounds=args.rounds, batch_size=10, seed=seed, weighting="uniform", accelerator="cpu",
        default_root_dir=str(root), run_name=f"{method}-s{seed}", progress_bar=False,
        eval_every=args.rounds, checkpoint_every=args.rounds, threads=args.threads)
    summary = trainer.fit(client, make_data(args.clients))
    last = trainer.history[-1]
    return {"global": last.get("global_accuracy"), "personal": last["personalized_accuracy"],
            "run_dir": Path(summary["run_dir"]), "client": client,
            "coefs": {k[len("train/coef/"):]: v for k, v in last.items()
                      if k.startswith("train/coef/")}}


def mean_std(values: list[float | None]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    std = statistics.pstdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.fmean(values):.2f} +- {100 * std:.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--methods", nargs="+", default=WAYS + AUTOS,
                        help="ways (AB, AaB, ...) and Auto* class names")
    parser.add_argument("--step", type=float, default=0.1, help="interpolation grid step")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started, cpu_started = time.perf_counter(), time.process_time()
    results: dict[str, list[dict[str, Any]]] = {}
    interpolation: list[dict[str, float]] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        for method in args.methods:
            for seed in range(args.seeds):
                result = run_one(method, seed, args, Path(tmp))
                results.setdefault(method, []).append(result)
                print(f"{method:7s} seed {seed}: global {result['global']}, "
                      f"personalized {result['personal']:.4f}", flush=True)
                if method == "AaBb" and seed == 0:
                    interpolation = interpolation_grid(
                        make_client("AaBb", args.lr), make_data(args.clients),
                        result["run_dir"] / "checkpoints" / "last.ckpt", step=args.step)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started

    lines = ["| way | meaning | aggregation acc. (%) | personalization acc. (%) |",
             "| --- | --- | --- | --- |"]
    for method, runs in results.items():
        lines.append(f"| {method} | {DESCRIPTIONS.get(method, '')} | "
                     f"{mean_std([r['global'] for r in runs])} | "
                     f"{mean_std([r['personal'] for r in runs])} |")
    coef_lines = []
    for method in AUTOS:
        if method in results:
            coefs = results[method][0]["coefs"]
            coef_lines.append(f"- {method} (seed 0, last round): " + ", ".join(
                f"{k} = {v:.3f}" for k, v in sorted(coefs.items())))
    table = "\n".join(lines)
    print(table)
    command = "python benchmarks/privatize_table.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    text = [
        "## Where to privatize (\"Aggregate or Not?\", arXiv:2107.11954) on MNIST-5k",
        "",
        f"`{command}`",
        "",
        f"MNIST-5k, {args.clients} clients with 5 of the 10 classes each (class-wise shards), "
        f"4-layer CNN cut into encoder A + classifier B, SGD lr {args.lr} momentum 0.9, batch "
        f"10, 1 local epoch, all clients every round, uniform mean; **{args.rounds} rounds, "
        f"{args.seeds} seed(s)** ({', '.join(map(str, range(args.seeds)))}), accuracy after "
        f"the last round, mean +- std over seeds. CPU time {cpu / 60:.1f} min, wall time "
        f"{wall / 60:.1f} min on the shared 2-core machine. A short CPU run, not the paper's "
        "scale (VGG11 on CIFAR, 1000 rounds); "
        "aggregation accuracy only where a complete shared model exists (\"-\" otherwise).",
        "",
        table,
        "",
    ]
    if coef_lines:
        text += ["Learned coefficients (softmaxed, temperature 2):", "", *coef_lines, ""]
    if interpolation is not None:
        write_csv(interpolation, out / "privatize_interpolation.csv")
        plot_heatmap(interpolation, out / "privatize_interpolation.png",
                     title=f"AaBb, MNIST-5k, {args.rounds} rounds, seed 0")
        corner = {(r["alpha"], r["beta"]): r["accuracy"] for r in interpolation}
        best = max(interpolation, key=lambda r: r["accuracy"])
        text += [
            "Interpolation trick (Fig. 9) on the seed-0 \"AaBb\" run, personalized accuracy "
            "pooled over all local test splits: "
            f"alpha = beta = 1 (shared model) {100 * corner[(1.0, 1.0)]:.2f} %, "
            f"alpha = beta = 0 (private model) {100 * corner[(0.0, 0.0)]:.2f} %, "
            f"best {100 * best['accuracy']:.2f} % at alpha = {best['alpha']:g}, "
            f"beta = {best['beta']:g}.",
            "",
            "![interpolation heatmap](privatize_interpolation.png)",
            "",
        ]
    (out / "privatize.md").write_text("\n".join(text))
    print(f"wrote {out / 'privatize.md'} (wall {wall:.0f} s, CPU {cpu:.0f} s)")


if __name__ == "__main__":
    main()
