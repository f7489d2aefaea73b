"""Batched clients against one client after another: training-round time and agreement.

FedAvg with the 4-layer CNN on CIFAR-shaped synthetic clients (3x32x32, 10 classes, batch
10, lr 0.005, one local epoch), trained with ``trainer.batched_clients`` 1 (the loop) and each
group size given: the median training round (training + aggregation, no evaluation, the
first round left out), its ratio to the loop's, clients trained per second, and the largest
difference of the final global model from the loop's (float tolerance: the batched sums run
in another order).

    python benchmarks/batched.py --accelerator cpu --groups 4 20      # one thread
    python benchmarks/batched.py --accelerator cuda --groups 4 10 20  # on a GPU
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from fedlight.clients import FedAvg
from fedlight.data import FederatedDataModule
from fedlight.data.partitions.iid import IID
from fedlight.data.sources.synthetic import Synthetic
from fedlight.federation.trainer import FederatedTrainer


def fit(group: int, args: argparse.Namespace) -> FederatedTrainer:
    """One FedAvg run with ``batched_clients=group``."""
    data = FederatedDataModule(source=Synthetic(samples=args.clients * args.samples,
                                                shape=(3, 32, 32), classes=10),
                               partition=IID(),
                               num_clients=args.clients, seed=0)
    torch.manual_seed(0)
    client = FedAvg(backbone="cnn", num_classes=10, input_shape=(3, 32, 32), lr=0.005)
    with tempfile.TemporaryDirectory() as root:
        trainer = FederatedTrainer(
            rounds=args.rounds, batch_size=10, accelerator=args.accelerator, devices=1,
            threads=args.threads, precision=args.precision, batched_clients=group,
            default_root_dir=root, checkpoint_every=args.rounds, eval_every=args.rounds,
            progress_bar=False, verbose=False, memory_format="contiguous")
        trainer.fit(client, data)
    return trainer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--groups", nargs="+", type=int, default=[4, 20],
                        help="batched_clients values compared with 1")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--samples", type=int, default=250, help="training samples per client")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", default="auto", help="torch threads (auto: 1 on CPU)")
    parser.add_argument("--precision", default="32-true")
    args = parser.parse_args(argv)
    print(f"FedAvg, cnn on 3x32x32, {args.clients} clients x {args.samples}, batch 10, "
          f"{args.rounds} rounds, {args.accelerator}, {args.precision}")
    print(f"{'batched_clients':>15s} {'s/round':>8s} {'vs loop':>8s} {'clients/s':>10s} "
          f"{'max |diff|':>11s}")
    reference = None
    for group in [1, *args.groups]:
        started = time.perf_counter()
        trainer = fit(group, args)
        seconds = statistics.median(trainer.round_seconds[1:] or trainer.round_seconds)
        state = {k: v.detach().float().cpu() for k, v in trainer.global_state.items()}
        if reference is None:
            reference = (seconds, state)
        diff = max(float((v - reference[1][k]).abs().max()) for k, v in state.items())
        print(f"{group:15d} {seconds:8.3f} {seconds / reference[0]:7.2f}x "
              f"{args.clients / seconds:10.1f} {diff:11.2e}   ({time.perf_counter() - started:.0f}"
              " s whole run)", flush=True)


if __name__ == "__main__":
    main()
