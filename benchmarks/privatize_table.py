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
import torch.nn.functional as F
from torch import Tensor, nn

os.environ.setdefault("WANDB_MODE", "offline")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fedlight.clients import CLIENTS  # noqa: E402
from fedlight.data import FederatedDataModule  # noqa: E402
from fedlight.federation import FederatedTrainer  # noqa: E402
from fedlight.privatize_interpolation import interpolation_grid, plot_heatmap, write_csv  # noqa: E402

WAYS = ["AB", "aB", "ab", "Ab", "AaB", "AaBb", "ABb"]  # the paper's Fig. 1 order
# Auto* rows: label -> (class, switches), all with the authors' shared-path step as
# configs/privatize/mnist5k_auto*.yaml run them; "AutoSA+paths" adds the opt-in switches of
# configs/privatize/mnist5k_autosa_path_losses.yaml.
AUTO_ARGS: dict[str, Any] = {"shared_path_loss": True}
AUTO_ROWS: dict[str, tuple[str, dict[str, Any]]] = {
    "AutoCS": ("AutoCS", {}), "AutoSA": ("AutoSA", {}), "AutoHS": ("AutoHS", {}),
    "AutoSA+paths": ("AutoSA", {"private_path_loss": True, "coef_lr_scale": 10.0}),
}
DESCRIPTIONS = {
    "AB": "all shared (FedAvg)", "aB": "private encoder", "ab": "all private (Local)",
    "Ab": "private classifier (FedPer)", "AaB": "+ private encoder copy",
    "AaBb": "+ private model copy", "ABb": "+ private classifier copy",
    "AutoCS": "cross-stitch on AaBb", "AutoSA": "soft attention on AaBb",
    "AutoHS": "hard Gumbel selection on AaBb",
    "AutoSA+paths": "AutoSA + private-path loss, psi at 10x lr",
}


def make_data(num_clients: int) -> FederatedDataModule:
    return FederatedDataModule(source="mnist5k", num_clients=num_clients, partition="pathological",
                               classes_per_client=5, train_fraction=0.75)


def make_client(method: str, lr: float) -> Any:
    options = dict(backbone="cnn", num_classes=10, input_shape=(1, 28, 28), lr=lr, momentum=0.9)
    if method in AUTO_ROWS:
        name, switches = AUTO_ROWS[method]
        return CLIENTS[name](**AUTO_ARGS, **switches, **options)
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
            "run_dir": Path(summary["run_dir"]),
            "coefs": {k[len("train/coef/"):]: v for k, v in last.items()
                      if k.startswith("train/coef/")}}


#: ways whose shared model the diagnosis below examines (the paper's "AaB" vs "AB" claim)
DIAGNOSED = ("AB", "AaB", "ABb", "AaBb")


def linear_probe(features: Tensor, labels: Tensor, num_classes: int, steps: int = 300) -> nn.Linear:
    """A fresh linear classifier fitted to frozen features (full-batch Adam, fixed seed)."""
    torch.manual_seed(0)
    probe = nn.Linear(features.shape[1], num_classes)
    optimizer = torch.optim.Adam(probe.parameters(), lr=0.01)
    for _ in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(probe(features), labels).backward()
        optimizer.step()
    return probe


@torch.no_grad()
def diagnose_shared_model(way: str, checkpoint: Path, data: FederatedDataModule,
                          lr: float) -> dict[str, float]:
    """Why a shared model scores what it does on the global test set.

    ``global``: the shared model B(A(x)) (the table's aggregation accuracy). ``probe``: a
    linear classifier refitted on the shared encoder's features A(x) of every client's training
    data (how much of the task A's features carry, whatever B learned). For "AaB", B is trained
    on (A(x) + a_k(x)) / 2 but scored on A(x) alone: ``avg_private`` scores B on
    (A(x) + mean_k a_k(x)) / 2 (the global test set through every client's private encoder);
    ``norm_ratio`` is mean ||a_k(x)|| / ||A(x)|| and ``cosine`` their mean cosine, over clients.
    """
    client = make_client(way, lr).eval()
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    client.load_state_dict({**state["server"]["global_state"], **state["initial_private"]})
    x_test, y_test = data.global_test()
    train = [data.client_train(i) for i in range(data.num_clients)]
    x_train, y_train = torch.cat([t[0] for t in train]), torch.cat([t[1] for t in train])
    encoder, head = client.primary_blocks
    shared_test = encoder(x_test)
    result = {"global": _accuracy(head(shared_test), y_test)}
    train_features = encoder(x_train)  # frozen: computed without a graph
    with torch.enable_grad():
        probe = linear_probe(train_features, y_train, client.num_classes)
    result["probe"] = _accuracy(probe(shared_test), y_test)
    if "a" not in client.private:
        return result
    privates, ratios, cosines = [], [], []
    for client_id in range(data.num_clients):
        private_state = state["client_states"].get(client_id, state["initial_private"])
        client.load_state_dict({**state["server"]["global_state"], **private_state})
        private_test = client.private["a"](x_test)
        privates.append(private_test)
        ratios.append((private_test.norm(dim=1) / shared_test.norm(dim=1)).mean().item())
        cosines.append(F.cosine_similarity(private_test, shared_test, dim=1).mean().item())
    result["avg_private"] = _accuracy(head((shared_test + torch.stack(privates).mean(0)) / 2),
                                      y_test)
    result["norm_ratio"] = statistics.fmean(ratios)
    result["cosine"] = statistics.fmean(cosines)
    return result


def _accuracy(logits: Tensor, labels: Tensor) -> float:
    return (logits.argmax(-1) == labels).float().mean().item()


def mean_std(values: list[float | None], scale: float = 100) -> str:
    """``mean +- std`` (population std over seeds) of the values times ``scale``; "-" if none."""
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    std = statistics.pstdev(values) if len(values) > 1 else 0.0
    return f"{scale * statistics.fmean(values):.2f} +- {scale * std:.2f}"


def diagnosis_lines(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The shared-model diagnosis as a Markdown table (mean +- std over seeds)."""
    rows = {m: [r["diagnosis"] for r in runs] for m, runs in results.items() if m in DIAGNOSED}
    if not rows:
        return []
    columns = {"global": "shared model B(A(x)) %", "probe": "linear probe on A(x) %",
               "avg_private": "B((A(x) + mean_k a_k(x)) / 2) %",
               "norm_ratio": "norm a_k(x) / A(x)", "cosine": "cos(A(x), a_k(x))"}

    lines = ["Shared-model diagnosis on the global test set (see `diagnose_shared_model`; the "
             "probe refits a linear classifier on the frozen shared encoder's features of all "
             "clients' training data):", "",
             "| way | " + " | ".join(columns.values()) + " |",
             "| --- |" + " --- |" * len(columns)]
    for method, diagnoses in rows.items():
        lines.append(f"| {method} | " + " | ".join(
            mean_std([d.get(key) for d in diagnoses], 100 if title.endswith("%") else 1)
            for key, title in columns.items()) + " |")
    return [*lines, ""]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--methods", nargs="+", default=WAYS + list(AUTO_ROWS),
                        choices=WAYS + list(AUTO_ROWS),
                        help="ways (AB, AaB, ...), Auto* class names and variant rows")
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
                if method in DIAGNOSED:
                    result["diagnosis"] = diagnose_shared_model(
                        method, result["run_dir"] / "checkpoints" / "last.ckpt",
                        make_data(args.clients), args.lr)
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
    for method in AUTO_ROWS:
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
    text += diagnosis_lines(results)
    if coef_lines:
        text += ["Learned coefficients (AutoCS / AutoSA: softmax at temperature 2; AutoHS: "
                 "selection probabilities, softmax at temperature 1), index 0 = shared side:",
                 "", *coef_lines, ""]
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
