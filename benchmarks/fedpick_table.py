"""FedPick on digits5: the paper's Table II (methods), Table IV (ablations) and feature analyses.

    python benchmarks/fedpick_table.py --rounds 40 --seeds 3 --sections methods ablations knobs
    python benchmarks/fedpick_table.py --rounds 40 --sections methods --methods FedBN FedPick
    python benchmarks/fedpick_table.py --rounds 40 --sections knobs --knobs "mask lr x10"
    python benchmarks/fedpick_table.py --rounds 40 --sections ablations --ablations "Soft Mask"

Every method trains on ``digits5`` (fedlight.data.crossdomain: 5 clients, one domain each,
1020 training and 680 held-out test images per domain; the data seed is fixed at 0, so every
method and seed sees the same splits) with the paper's shared settings: ``cnn_bn`` backbone, SGD
lr 0.01 momentum 0.5, batch 64, 1 local epoch, all clients every round. Training seeds are
``0 .. seeds-1`` (model initialization, batch order, Gumbel noise).

Table II / IV cells are, as in the paper, the mean (std over seeds) of each domain's *best* test
accuracy over the evaluated rounds; "Avg" is the mean over domains of those per-domain bests.
Methods are taken from ``fedlight.clients.CLIENTS`` when they exist; a method whose client class
is missing is run as its FedAvg partition (marked ``*``): FedPer = FedAvg with a private head,
LG-FedAvg = FedAvg with a private encoder, FedBN = FedPick(pfsm=False).

Ablations: "w/o PFSM" is FedBN (the FedBN run is reused: the two train the same loss on the same
partition); "w/o Ensemble" is the global head ``h_g`` of the FedPick runs (its accuracy is scored
at every evaluation as ``global_head``); every other row is its own run.

Analyses, on each client's held-out test split with its final model (mean over seeds):

* sparsity ratio (paper Eq. 3-4): share of components ``<= 1e-5`` of the L2-normalized encoder
  feature ``z_g``, per method and domain; for FedPick also of the selected feature ``z_p``;
* keep ratio: share of features the PFSM selects at inference, per domain (paper Fig. 7);
* Fisher score (paper Eq. 5-7, Fig. 9) of each domain's important features (selected for at least
  half of its test samples) vs the others;
* overlap of important features between domains (paper Fig. 10): Jaccard index of each
  domain's top-50 % most often selected features (first seed).

The per-round per-client scores come from a probe (PerClientScores) that records the trainer's
last_client_scores after each evaluated round.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

os.environ.setdefault("WANDB_MODE", "offline")

from fedlight.clients import CLIENTS, FederatedClient
from fedlight.clients.fedpick import FedPick, feature_sparsity_ratio, fisher_scores
from fedlight.data import FederatedDataModule
from fedlight.data.crossdomain import DIGITS5_DOMAINS
from fedlight.federation.probes import Probe
from fedlight.federation.trainer import FederatedTrainer
from fedlight.sweep import cpu_seconds

SHORT = {"mnist": "MT", "mnist_m": "MM*", "usps_like": "UP*", "synth_like": "SY*",
         "svhn_like": "SV*"}
COMMON: dict[str, Any] = {"backbone": "cnn_bn", "lr": 0.01, "momentum": 0.5}  # + data shape


class PerClientScores(Probe):
    """Keeps every evaluation's per-client accuracies; adds no metric column."""

    def __init__(self) -> None:
        self.per_round: list[dict[int, dict[str, float]]] = []

    def on_round_end(self, trainer: FederatedTrainer, round_idx: int) -> dict[str, float]:
        self.per_round.append({client: {name: score.accuracy for name, score in scores.items()}
                               for client, scores in trainer.last_client_scores.items()})
        return {}


@dataclass
class Run:
    """One method x seed: per-round per-domain accuracies of each output, and the analyses."""

    per_round: list[dict[int, dict[str, float]]]
    analysis: dict[str, Any] = field(default_factory=dict)

    def best(self, output: str = "personalized") -> np.ndarray:
        """Best accuracy over rounds of each domain, shape ``(domains,)``."""
        table = np.array([[scores[c][output] for c in sorted(scores)] for scores in self.per_round])
        return table.max(axis=0)


def _client(name: str, fallback: Callable[[], FederatedClient]) -> tuple[Callable, bool]:
    if name in CLIENTS:
        return (lambda: CLIENTS[name](**COMMON)), False
    return fallback, True


def method_factories() -> dict[str, tuple[Callable[[], FederatedClient], bool]]:
    """Table II rows: label -> (constructor, emulated by a FedAvg partition)."""
    fedavg = CLIENTS["FedAvg"]
    return {
        "Local": _client("Local", lambda: CLIENTS["Local"](**COMMON)),
        "FedAvg": (lambda: fedavg(**COMMON), False),
        "FedPer": _client("FedPer", lambda: fedavg(extra_private=["model.head.*"], **COMMON)),
        "LG-FedAvg": _client("LGFedAvg",
                             lambda: fedavg(extra_private=["model.encoder.*"], **COMMON)),
        "FedBN": _client("FedBN", lambda: FedPick(pfsm=False, **COMMON)),
        "FedPick": ((lambda: FedPick(**COMMON)), False),
    }


ABLATIONS: dict[str, dict[str, Any]] = {
    "w/o L_lce": {"lambda_lce": 0.0},
    "w/o L_ent": {"lambda_ent": 0.0},
    "w/o L_dis": {"lambda_dis": 0.0},
    "Soft Mask": {"hard_mask": False},
    "Share BN": {"private_bn": False},
    "Share PFSM": {"private_pfsm": False},
}
# The opt-in selection knobs (none in the paper), one at a time and together as in
# configs/fedpick/digits5_selection_knobs.yaml: what each does to the keep ratio and accuracy.
KNOBS: dict[str, dict[str, Any]] = {
    "mask lr x10": {"mask_lr_scale": 10.0},
    "mask bias +1": {"mask_init_bias": 1.0},
    "keep budget 0.5": {"keep_budget": 0.5, "lambda_budget": 1.0},
    "all three knobs": {"mask_lr_scale": 10.0, "mask_init_bias": 1.0, "keep_budget": 0.5,
                        "lambda_budget": 1.0},
}
SECTIONS = ("methods", "ablations", "knobs")


# ===================================================================== analyses
@torch.no_grad()
def analyse(trainer: FederatedTrainer) -> dict[str, Any]:
    """Sparsity, keep ratio, Fisher scores and selection frequencies per client (final state)."""
    client = trainer.client
    result: dict[str, Any] = {"sparsity_g": [], "sparsity_p": [], "keep": [], "fisher_kept": [],
                              "fisher_dropped": [], "frequency": []}
    for i in range(trainer.num_clients):
        trainer.population.load(client, i, trainer.rounds, trainer.global_state)
        client.eval()
        x, y = trainer.population.test_data[i]
        z_g = client.model.encoder(x)
        result["sparsity_g"].append(feature_sparsity_ratio(z_g))
        if isinstance(client, FedPick) and client.pfsm is not None:
            out = client.outputs(x)
            keep = (out.mask_logits >= 0).float()
            frequency = keep.mean(0)
            scores = fisher_scores(z_g, y)
            important = frequency >= 0.5
            result["sparsity_p"].append(feature_sparsity_ratio(out.z_p))
            result["keep"].append(float(keep.mean()))
            result["fisher_kept"].append(_finite_mean(scores[important]))
            result["fisher_dropped"].append(_finite_mean(scores[~important]))
            result["frequency"].append(frequency.cpu())
    return result


def _finite_mean(values: torch.Tensor) -> float:
    values = values[torch.isfinite(values)]
    return float(values.mean()) if len(values) else float("nan")


def overlap_matrix(frequencies: list[torch.Tensor]) -> np.ndarray:
    """Jaccard index of the top-50 % most often selected features between domains."""
    tops = [set(torch.argsort(f, descending=True)[: len(f) // 2].tolist()) for f in frequencies]
    return np.array([[len(a & b) / len(a | b) for b in tops] for a in tops])


# ===================================================================== running
def run_one(make: Callable[[], FederatedClient], seed: int, rounds: int, threads: int,
            root: Path, data: FederatedDataModule) -> Run:
    torch.manual_seed(seed)
    client = make()
    scores = PerClientScores()
    trainer = FederatedTrainer(rounds=rounds, batch_size=64, seed=seed, accelerator="cpu",
                               devices=1, default_root_dir=str(root), progress_bar=False,
                               logger="csv", checkpoint_every=rounds, threads=threads,
                               probes=[scores])
    _quiet(trainer.fit, client, data)
    return Run(scores.per_round, analyse(trainer))


def _quiet(fn: Callable, *args: Any) -> Any:
    """Run ``fn`` with stdout silenced (the trainer prints its partition and summary tables)."""
    with open(os.devnull, "w") as sink:
        saved = sys.stdout
        sys.stdout = sink
        try:
            return fn(*args)
        finally:
            sys.stdout = saved


def fmt(values: list[float] | np.ndarray) -> str:
    values = np.asarray(values, dtype=float) * 100
    return f"{values.mean():.2f} ({values.std():.2f})"


def accuracy_table(rows: dict[str, list[np.ndarray]], names: list[str]) -> list[str]:
    header = "| Method | " + " | ".join(SHORT.get(n, n) for n in names) + " | Avg |"
    lines = [header, "|" + " --- |" * (len(names) + 2)]
    for label, bests in rows.items():
        per_seed = np.stack(bests)  # (seeds, domains)
        cells = [fmt(per_seed[:, d]) for d in range(per_seed.shape[1])]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {fmt(per_seed.mean(1))} |")
    return lines


def analysis_tables(runs: dict[str, list[Run]], names: list[str]) -> list[str]:
    cols = " | ".join(SHORT.get(n, n) for n in names)
    lines = ["Sparsity ratio of the encoder feature z_g (share of L2-normalized components "
             "<= 1e-5, %), final models, mean over seeds:", "",
             f"| Method | {cols} | Avg |", "|" + " --- |" * (len(names) + 2)]
    for label, method_runs in runs.items():
        values = np.mean([r.analysis["sparsity_g"] for r in method_runs], axis=0) * 100
        lines.append(f"| {label} | " + " | ".join(f"{v:.1f}" for v in values)
                     + f" | {values.mean():.1f} |")
    pick_rows = {k: v for k, v in runs.items() if v[0].analysis["keep"]}
    lines += ["", "FedPick variants: keep ratio (share of features selected at inference), "
              "sparsity of the selected feature z_p, and mean Fisher score of each domain's "
              "important features (selected for >= 50 % of its test samples) vs the others "
              "(mean over seeds):", "",
              f"| Variant | measure | {cols} | Avg |", "|" + " --- |" * (len(names) + 3)]
    for label, method_runs in pick_rows.items():
        for key, title, scale in (("keep", "keep ratio %", 100), ("sparsity_p", "z_p sparsity %",
                                  100), ("fisher_kept", "Fisher kept", 1),
                                  ("fisher_dropped", "Fisher dropped", 1)):
            values = np.nanmean([r.analysis[key] for r in method_runs], axis=0) * scale
            lines.append(f"| {label} | {title} | " + " | ".join(f"{v:.2f}" for v in values)
                         + f" | {np.nanmean(values):.2f} |")
    if "FedPick" in runs:
        matrix = overlap_matrix(runs["FedPick"][0].analysis["frequency"])
        lines += ["", "FedPick, first seed: overlap (Jaccard) of the top-50 % most often "
                  "selected features between domains:", "",
                  f"| | {cols} |", "|" + " --- |" * (len(names) + 1)]
        for d, row in enumerate(matrix):
            lines.append(f"| {SHORT.get(names[d], names[d])} | "
                         + " | ".join(f"{v:.2f}" for v in row) + " |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    rows = list(method_factories())
    parser.add_argument("--methods", nargs="+", default=rows, choices=rows,
                        help="Table II rows (Table IV reuses the FedBN and FedPick runs)")
    parser.add_argument("--knobs", nargs="+", default=list(KNOBS), choices=list(KNOBS),
                        help="selection-knob rows")
    parser.add_argument("--ablations", nargs="+", default=list(ABLATIONS),
                        choices=list(ABLATIONS), help="Table IV rows that are their own runs")
    parser.add_argument("--sections", nargs="+", default=["methods", "ablations"],
                        choices=SECTIONS, help="Table II (methods), Table IV (ablations; its "
                        "FedPick, w/o PFSM and w/o Ensemble rows reuse the FedPick and FedBN "
                        "method runs when those are in --methods) and the selection knobs "
                        "(FedPick variants)")
    parser.add_argument("--root", default=None,
                        help="keep the run folders here (default: a temporary folder)")
    parser.add_argument("--out", default=None, help="write the Markdown here too")
    parser.add_argument("--backbone", default="cnn_bn", choices=("cnn_bn", "digit_cnn"),
                        help="cnn_bn (CPU-sized, default) or digit_cnn (the paper's FedBN digits "
                             "CNN, 8192-d features: GPU-sized)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fedpick_bench_") as scratch:
        report(args, Path(args.root or scratch), argv)


def report(args: argparse.Namespace, root: Path, argv: list[str] | None) -> None:
    """Run every method and ablation, print the Markdown and write it to ``args.out``."""
    started, cpu_started = time.perf_counter(), cpu_seconds()
    data = FederatedDataModule(source="digits5", num_clients=5, partition="domains",
                               merge_test=True, train_fraction=0.6, seed=0)
    data.setup()
    names = list(data.data.domain_names or DIGITS5_DOMAINS)
    COMMON.update(num_classes=data.num_classes, input_shape=data.input_shape,
                  backbone=args.backbone)
    if args.backbone == "digit_cnn":  # the paper's layout: the mask on the 8192 conv features
        COMMON["backbone_kwargs"] = {"all_fc_head": True}
    seeds = range(args.seeds)

    def run_all(make: Callable[[], FederatedClient], label: str) -> list[Run]:
        done = [run_one(make, s, args.rounds, args.threads, root, data) for s in seeds]
        print(f"{label}: done ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
        return done

    def fedpick_variants(table: dict[str, dict[str, Any]], wanted: list[str],
                         prefix: str = "") -> dict[str, list[Run]]:
        return {prefix + label: run_all(partial(FedPick, **COMMON, **switches), label)
                for label, switches in table.items() if label in wanted}

    methods = {label: factory for label, factory in method_factories().items()
               if label in args.methods and "methods" in args.sections}
    runs = {label: run_all(make, label) for label, (make, _) in methods.items()}
    ablation_runs = (fedpick_variants(ABLATIONS, args.ablations)
                     if "ablations" in args.sections else {})
    knob_runs = (fedpick_variants(KNOBS, args.knobs, prefix="FedPick + ")
                 if "knobs" in args.sections else {})

    wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu_started
    emulated = [label for label, (_, fake) in methods.items() if fake]
    command = "python benchmarks/fedpick_table.py " + shlex.join(argv if argv is not None
                                                                 else sys.argv[1:])
    lines = ["## FedPick on digits5 (offline Digits-Five stand-in)", "",
             f"`{command}`: {args.rounds} rounds, seeds {list(seeds)}, "
             f"{args.threads} torch thread(s); wall {wall / 60:.1f} min, CPU {cpu / 60:.1f} min. "
             "Far fewer rounds than the paper's 300: these are short-run numbers, not a "
             "reproduction of its tables.", "",
             "Domains (`*`: offline stand-ins, see fedlight.data.crossdomain): MT = mnist, "
             "MM* = mnist_m (MNIST-M-like), UP* = usps_like (scikit-learn 8x8 digits), SY* = "
             "synth_like (font-rendered), SV* = svhn_like (rendered house-number crops on "
             "photos); 1020 training / 680 test images each. Cells: mean (std over seeds) of "
             "each domain's best test accuracy over rounds, in %.", ""]
    if runs:
        lines += ["Table II (methods):", "",
                  *accuracy_table({label + ("*" if label in emulated else ""):
                                   [r.best() for r in method_runs]
                                   for label, method_runs in runs.items()}, names)]
    if emulated:
        lines += ["", f"`*` no client class in fedlight.clients when this ran: "
                  f"{', '.join(emulated)} run as FedAvg / FedPick partitions (see the script)."]
    if ablation_runs:
        fedpick, fedbn = runs.get("FedPick"), runs.get("FedBN")
        rows = {**({"FedPick": [r.best() for r in fedpick]} if fedpick else {}),
                **({"w/o PFSM (= FedBN)": [r.best() for r in fedbn]} if fedbn else {}),
                **{label: [r.best() for r in rs] for label, rs in ablation_runs.items()},
                **({"w/o Ensemble (h_g alone)": [r.best("global_head") for r in fedpick],
                    "w/o Ensemble (h_p alone)": [r.best("personalized_head") for r in fedpick]}
                   if fedpick else {})}
        lines += ["", "Table IV (ablations):", "", *accuracy_table(rows, names)]
    if knob_runs:
        lines += ["", "Selection knobs (opt-in, not in the paper; FedPick otherwise as Table "
                  "II's; compare with its FedPick row, same data and seeds):", "",
                  *accuracy_table({label: [r.best() for r in rs]
                                   for label, rs in knob_runs.items()}, names)]
    lines += ["", *analysis_tables({**runs, **ablation_runs, **knob_runs}, names)]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
