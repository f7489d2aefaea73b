"""Several worker processes per device (``trainer.workers_per_device``): seconds per round.

Workload: FedAvg and GPFL with the 4-layer CNN on CIFAR-10-shaped synthetic data (3x32x32,
10 classes, IID), 1 local epoch, training + aggregation time of a round (no evaluation inside
the timed rounds), median over the rounds after the first. For every (method, clients, batch,
precision) the runs with 1, 2, 4, 8 workers per device are printed with their speed-up over
1 worker and whether their metrics equal the 1-worker run's (they must, up to the float64
all-reduce of the weighted sums; see fedlight.federation.distributed).

Also printed: the physical floor of a round, its training FLOPs (counted with
torch.utils.flop_counter) over the throughput measured on the same model at batch 512.

    python benchmarks/workers.py                                   # on a GPU, ~5 minutes
    python benchmarks/workers.py --accelerator cpu --clients 8 --workers 1 2 --batches 10 \\
        --precisions 32-true --samples 8 --rounds 2                 # CPU smoke test
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing
import os
import statistics
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from fedlight.clients import CLIENTS
from fedlight.data import FederatedDataModule
from fedlight.data.partitions.iid import IID
from fedlight.data.sources.synthetic import Synthetic
from fedlight.federation.trainer import FederatedTrainer

SHAPE = (3, 32, 32)
CLASSES = 10
LR = 0.01


def make_data(clients: int, samples: int) -> FederatedDataModule:
    return FederatedDataModule(source=Synthetic(samples=clients * samples, shape=SHAPE,
                                                classes=CLASSES),
                               partition=IID(),
                               num_clients=clients, seed=0)


def make_client(method: str) -> Any:
    torch.manual_seed(0)
    return CLIENTS[method](backbone="cnn", num_classes=CLASSES, input_shape=SHAPE, lr=LR)


def run(method: str, args: argparse.Namespace, clients: int, batch: int, precision: str,
        workers: int) -> tuple[float, list[dict[str, str]]]:
    """Median seconds per timed round and the metrics rows (wall-clock column dropped)."""
    if args.deterministic:  # deterministic cuDNN / cuBLAS kernels (inherited by forked workers)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    with tempfile.TemporaryDirectory() as root:
        trainer = FederatedTrainer(
            rounds=args.rounds, batch_size=batch, eval_every=args.rounds,
            checkpoint_every=args.rounds, accelerator=args.accelerator, devices=1,
            workers_per_device=workers, strategy="ddp_fork" if workers > 1 else "auto",
            precision=precision, default_root_dir=root, progress_bar=False, verbose=False)
        summary = trainer.fit(make_client(method), make_data(clients, args.samples))
        with open(f"{summary['run_dir']}/metrics.csv") as handle:
            rows = [{k: v for k, v in r.items() if k != "seconds"} for r in csv.DictReader(handle)]
        seconds = trainer.round_seconds[1:] or trainer.round_seconds
        return statistics.median(seconds), rows


def run_isolated(*args: Any) -> tuple[float, list[dict[str, str]]]:
    """`run` in a fresh spawned process: a run that initialized CUDA in this process would stop
    the next run's worker processes from forking (CUDA cannot be re-initialized after fork)."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:  # non-daemonic worker
        return pool.submit(run, *args).result()


def floor_seconds(method: str, accelerator: str, clients: int, samples: int) -> float:
    """Training FLOPs of a round / FLOP/s measured at batch 512 on one device (75 % of the
    samples are training samples)."""
    device = torch.device("cuda" if accelerator in ("cuda", "gpu", "auto")
                          and torch.cuda.is_available() else "cpu")
    client = make_client(method).to(device)
    client.capture_logs(True)
    optimizer = torch.optim.SGD(client.parameters(), lr=LR)
    x = torch.randn(512, *SHAPE, device=device)
    y = torch.randint(0, CLASSES, (512,), device=device)

    def step() -> None:  # the method's own training_step (GPFL: both routes and its losses)
        output = client.training_step((x, y), 0)
        (output["loss"] if isinstance(output, dict) else output).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    with FlopCounterMode(display=False) as counter:
        step()
    for _ in range(3):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(10):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    throughput = counter.get_total_flops() * 10 / (time.perf_counter() - started)
    return counter.get_total_flops() / 512 * clients * samples * 0.75 / throughput


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--accelerator", default="auto")
    parser.add_argument("--methods", nargs="+", default=["FedAvg", "GPFL"])
    parser.add_argument("--clients", nargs="+", type=int, default=[20, 100])
    parser.add_argument("--batches", nargs="+", type=int, default=[10, 64])
    parser.add_argument("--precisions", nargs="+", default=["32-true", "bf16-mixed"])
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--samples", type=int, default=250, help="samples per client")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--deterministic", action="store_true",
                        help="torch.use_deterministic_algorithms(True): on a GPU, the "
                             "'same metrics' column then compares like with like")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    print("method  clients  batch  precision   workers  s/round  clients/s  speed-up  "
          "same metrics  floor s")
    for method in args.methods:
        for clients in args.clients:
            floor = floor_seconds(method, args.accelerator, clients, args.samples)
            for batch in args.batches:
                for precision in args.precisions:
                    base: tuple[float, list[dict[str, str]]] | None = None
                    for workers in args.workers:
                        seconds, rows = run_isolated(method, args, clients, batch, precision,
                                                     workers)
                        base = base or (seconds, rows)
                        print(f"{method:7s} {clients:7d} {batch:6d}  {precision:10s} "
                              f"{workers:8d} {seconds:8.3f} {clients / seconds:10.1f} "
                              f"{base[0] / seconds:9.2f}  "
                              f"{str(rows == base[1]):12s} {floor:8.3f}", flush=True)


if __name__ == "__main__":
    main()
