"""Privacy on MNIST-5k: GPFL's Table 5 (DLG PSNR per method).

    python benchmarks/privacy_table.py --rounds 2 --seeds 1
    python benchmarks/privacy_table.py --rounds 2 --seeds 1 --out benchmarks/results/privacy.md

Workload (GPFL's default, on data that needs no download): mnist5k, 20 clients, Dirichlet(0.1),
75/25 split per client, the 4-layer CNN, SGD lr 0.005, batch 10, 1 local epoch, every client
every round; each method keeps its own defaults (FedRep: 10 head epochs; GPFL: lambda 0.01,
mu 0.1). Training seeds are ``0 .. seeds-1``.

**PSNR table** (GPFL Sec. 4.7, Table 5). Each method trains ``--rounds`` rounds; then the server
attacks client 0: loaded as it would be for the next round, the client takes ONE local SGD step
on a single training image with its own loss, and the server runs DLG
(:func:`fedlight.privacy.evaluate_client_leakage`: dummy input and dummy output matched by MSE,
Adam, ``--iterations`` steps) on the update of the attacked module. The cell is the PSNR (dB,
lower = better privacy) between the recovered and the real image in [0, 1], averaged over
``--images`` images and the seeds; two data-free guesses of the same images calibrate it (a
uniform-noise image, and an all-black one, which already scores ~10 dB on MNIST's mostly black
digits). Surfaces, with the paper's suffixes: ``-fe`` the feature
extractor (``model.encoder``), no suffix the whole model (FedAvg only: the other methods keep
their head private), and for GPFL ``-sfe`` the pseudo feature extractor ``phi o CoV`` on the
global route (``g`` = mean of the received GCE table) and ``-sm`` the pseudo model
``sim(phi o CoV(x), GCE(u))`` (Eq. 13). Methods missing from ``fedlight.clients`` are skipped.

The DP-FedAvg accuracy / epsilon trade-off of results/privacy.md is a sweep:
``fedlight sweep benchmarks/sweeps/privacy_dp.yaml``. Client-level DP protects the *released*
models, not the raw updates the server sees, so it does not lower the PSNR here.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import resource
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

os.environ.setdefault("WANDB_MODE", "offline")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fedlight.clients import CLIENTS, FederatedClient  # noqa: E402
from fedlight.data import FederatedDataModule  # noqa: E402
from fedlight.federation import FederatedTrainer  # noqa: E402
from fedlight.privacy import client_leakage, psnr  # noqa: E402

SURFACES = {"FedPer": ["fe"], "FedRep": ["fe"], "FedAvg": ["fe", "model"],
            "GPFL": ["fe", "sfe", "sm"]}
SHORT = {"FedPer": "Per", "FedRep": "Rep", "FedAvg": "Avg", "GPFL": "GPFL"}


def make_data() -> FederatedDataModule:
    return FederatedDataModule(source="mnist5k", num_clients=20, partition="dirichlet", beta=0.1,
                               train_fraction=0.75)


def train(method: str, seed: int, rounds: int, root: str) -> FederatedTrainer:
    torch.manual_seed(seed)
    client = CLIENTS[method](backbone="cnn", num_classes=10, input_shape=(1, 28, 28), lr=0.005)
    trainer = FederatedTrainer(rounds=rounds, batch_size=10, seed=seed, accelerator="cpu",
                               devices=1, default_root_dir=root, progress_bar=False, threads=1,
                               checkpoint_every=max(rounds, 1))
    with contextlib.redirect_stdout(io.StringIO()):
        trainer.fit(client, make_data())
    return trainer


# ===================================================================== GPFL's pseudo modules
class PseudoFeatureExtractor(nn.Module):
    """GPFL-sfe: ``phi o CoV`` on the global route, ``f_G = CoV(phi(x), g)``; ``g`` (the mean
    of the received GCE table) is known to the server. Holds the client's own modules."""

    def __init__(self, client: FederatedClient) -> None:
        super().__init__()
        self.encoder = client.model.encoder
        self.cov = client.cov
        self.g = client.g.detach().clone()

    def forward(self, x: Tensor) -> Tensor:
        return self.cov(self.encoder(x), self.g)


class PseudoModel(PseudoFeatureExtractor):
    """GPFL-sm: logits ``sim(f_G, GCE(u))`` for every class ``u`` (GPFL's Eq. 13)."""

    def __init__(self, client: FederatedClient) -> None:
        super().__init__(client)
        self.gce = client.gce

    def forward(self, x: Tensor) -> Tensor:
        features = F.normalize(super().forward(x), dim=1)
        return features @ F.normalize(self.gce.weight, dim=1).T


def surface_module(client: FederatedClient, surface: str) -> str | nn.Module:
    if surface == "fe":
        return "encoder"
    if surface == "model":
        return "model"
    return PseudoFeatureExtractor(client) if surface == "sfe" else PseudoModel(client)


def leakage(trainer: FederatedTrainer, surfaces: list[str], images: int, iterations: int,
            seed: int) -> dict[str, float]:
    """Client 0 loaded for round ``rounds + 1``; PSNR per attacked surface."""
    client = trainer.load_client(0, trainer.rounds)
    data = trainer.population.train_data[0]
    return {surface: client_leakage(client, data, batches=images, batch_size=1, seed=seed,
                                    surface=surface_module(client, surface),
                                    iterations=iterations)
            for surface in surfaces}


# ===================================================================== tables
def mean_std(values: list[float], digits: int = 2) -> str:
    if not values:
        return "-"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.{digits}f}" + (f" ± {std:.{digits}f}" if len(values) > 1
                                                      else "")


def reference_psnr(images: int, seed: int) -> dict[str, float]:
    """PSNR of two data-free guesses of the same images the attack targets: a uniform-noise
    image and an all-black one (MNIST is mostly background, so black already scores ~10 dB)."""
    data = make_data()
    data.setup("fit")
    x, _ = data.client_train(0)
    lo, hi = float(x.min()), float(x.max())
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    real = ((x[order[:images]] - lo) / (hi - lo)).clamp(0, 1)
    noise = torch.rand(real.shape, generator=torch.Generator().manual_seed(seed))
    pairs = zip(noise, real, strict=True)
    return {"guess: noise": statistics.mean(psnr(n[None], r[None]) for n, r in pairs),
            "guess: black": statistics.mean(psnr(torch.zeros_like(r[None]), r[None])
                                            for r in real)}


def psnr_table(args: argparse.Namespace, root: str) -> str:
    methods = [m for m in SURFACES if m in CLIENTS]
    cells: dict[str, list[float]] = {}
    for method in methods:
        for seed in range(args.seeds):
            trainer = train(method, seed, args.rounds, root)
            values = leakage(trainer, SURFACES[method], args.images, args.iterations, seed)
            for surface, value in values.items():
                name = SHORT[method] + ("" if surface == "model" else f"-{surface}")
                cells.setdefault(name, []).append(value)
                print(f"  {name} seed {seed}: {value:.2f} dB", flush=True)
    for seed in range(args.seeds):
        for name, value in reference_psnr(args.images, seed).items():
            cells.setdefault(name, []).append(value)
    header = "| " + " | ".join(cells) + " |"
    rule = "|" + "---|" * len(cells)
    row = "| " + " | ".join(mean_std(v) for v in cells.values()) + " |"
    skipped = [m for m in SURFACES if m not in CLIENTS]
    note = f"\n\n(skipped, no client class: {', '.join(skipped)})" if skipped else ""
    return "\n".join([header, rule, row]) + note


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2,
                        help="training rounds before the DLG attack")
    parser.add_argument("--seeds", type=int, default=1, help="training seeds 0..seeds-1")
    parser.add_argument("--images", type=int, default=2, help="images attacked per surface")
    parser.add_argument("--iterations", type=int, default=200, help="DLG Adam steps")
    parser.add_argument("--out", type=Path, default=None, help="write the Markdown here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        print("DLG PSNR (dB):", flush=True)
        psnr_md = psnr_table(args, root)
        print(psnr_md)
    wall = time.perf_counter() - started
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    command = "python benchmarks/privacy_table.py " + shlex.join(sys.argv[1:])
    text = "\n".join([
        "## Privacy: DLG leakage (GPFL Table 5) on MNIST-5k", "",
        f"Command: `{command}`  ",
        f"Small run, NOT paper scale: {args.rounds} training rounds before the attack, "
        f"{args.images} single images x {args.iterations} Adam steps per surface, "
        f"seeds 0..{args.seeds - 1}; "
        f"wall time {wall:.0f} s, CPU time {cpu.ru_utime + cpu.ru_stime:.0f} s (1 thread).", "",
        "mnist5k, 20 clients, Dirichlet(0.1), 4-layer CNN, lr 0.005, batch 10, 1 local epoch, "
        "join ratio 1. PSNR (dB, lower = more private) of DLG reconstructions of one image "
        "from the one-step update of client 0 (GPFL's suffixes: -fe feature extractor, no "
        "suffix whole model, -sfe phi o CoV, -sm Eq. 13's pseudo model; the two guess "
        "columns score data-free guesses of the same images):", "",
        psnr_md, "",
    ])
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
