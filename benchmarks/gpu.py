"""The GPU check: placement, mixed precision, workers per GPU, memory and the floor (~6 minutes).

Run on a machine with one CUDA GPU; everything runs on ``cuda:0``.

1. Placement: FedAvg and GPFL train one round on 3x32x32 inputs with forward hooks on every
   submodule of the live client; every parameter, buffer, input and output tensor a module
   sees must be on the GPU. Prints the count of tensors checked and of those found elsewhere
   (exit code 1 if any: no silent CPU fallback).
2. Precision: FedAvg with the 4-layer CNN trains ``--rounds`` rounds at ``32-true``,
   ``bf16-mixed`` and ``16-mixed`` on the same clients: median training round (training +
   aggregation, no evaluation), best and last personalized accuracy, peak GPU memory. With
   ``--pfllib-root`` the clients are a PFLlib dataset folder (for example real CIFAR-10 written
   by PFLlib's generator or by ``fedlight export-partition``), otherwise synthetic
   CIFAR-shaped classes (then the accuracy only says the three precisions learn alike).
3. Workers per GPU: ``benchmarks/workers.py`` in a child process (CUDA must not be initialized
   in this process) for FedAvg and GPFL, 20 clients of 250 synthetic 3x32x32
   samples, batch 10, 32-true, 1/2/4/8 workers per GPU: s/round, speed-up, clients per second
   and whether the metrics equal one worker's. Then batched clients
   (``benchmarks/batched.py``: ``trainer.batched_clients`` 4, 10 and 20 against the loop, FedAvg,
   20 clients x 250, batch 10): s/round, ratio to the loop, clients per second and the largest
   difference of the global model from the loop's.
4. GPU memory per client: peak allocated memory of one round of FedAvg and GPFL with 20 and
   with 100 clients of the same size; the difference / 80 is what each extra client costs
   (client states live in host memory, so it is near zero; the peak is the one live module).
5. The floor on this GPU (``benchmarks/floor.py``): FLOPs per sample and best throughput of
   the 4-layer CNN at batch 512 on 3x32x32, the floor of the CIFAR-10 round (9000 training
   samples) and fedlight's FedAvg round at batch 10 against it.

    python benchmarks/gpu.py
    python benchmarks/gpu.py --pfllib-root data/cifar10_pfllib --rounds 20
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from batched import main as batched_main
from floor import best_throughput, fedlight_round_seconds, flops_per_sample, quiet

from fedlight.clients import CLIENTS
from fedlight.data import FederatedDataModule
from fedlight.federation.trainer import FederatedTrainer

BENCHMARKS = Path(__file__).resolve().parent

SHAPE = (3, 32, 32)
CIFAR_ROUND_SAMPLES = 9000


def synthetic(clients: int, samples: int = 250) -> FederatedDataModule:
    return FederatedDataModule(source="synthetic", num_clients=clients, partition="iid",
                               synthetic_samples=clients * samples, synthetic_shape=SHAPE,
                               synthetic_classes=10, min_client_size=2, seed=0)


def train(method: str, data: FederatedDataModule, rounds: int, precision: str = "32-true",
          client_hook: Any = None, lr: float = 0.005) -> FederatedTrainer:
    """Fit `method` (4-layer CNN, batch 10) on cuda and return the trainer."""
    data.setup()
    torch.manual_seed(0)
    client = CLIENTS[method](backbone="cnn", num_classes=data.num_classes,
                             input_shape=data.input_shape, lr=lr)
    if client_hook:
        client_hook(client)
    with tempfile.TemporaryDirectory() as root, quiet():
        trainer = FederatedTrainer(rounds=rounds, batch_size=10, accelerator="cuda", devices=1,
                                   precision=precision, default_root_dir=root,
                                   checkpoint_every=rounds, progress_bar=False, verbose=False)
        trainer.fit(client, data)
    return trainer


class PlacementCheck:
    """Forward hooks on every submodule recording tensors that are not on the GPU."""

    def __init__(self) -> None:
        self.checked = 0
        self.off_device: list[str] = []

    def attach(self, client: torch.nn.Module) -> None:
        for name, module in client.named_modules():
            module.register_forward_hook(self.hook(name or type(client).__name__))

    def hook(self, name: str) -> Any:
        def check(module: torch.nn.Module, inputs: tuple, output: Any) -> None:
            tensors = [*module.parameters(recurse=False), *module.buffers(recurse=False),
                       *[t for t in inputs if isinstance(t, torch.Tensor)],
                       *([output] if isinstance(output, torch.Tensor) else [])]
            for tensor in tensors:
                self.checked += 1
                if tensor.device.type != "cuda":
                    self.off_device.append(f"{name}: {tuple(tensor.shape)} on {tensor.device}")
        return check


def placement() -> bool:
    print("\n## 1. Placement (one round, 4 clients, every module call checked)")
    ok = True
    for method in ("FedAvg", "GPFL"):
        check = PlacementCheck()
        train(method, synthetic(4, 50), 1, client_hook=check.attach)
        print(f"{method:7s} tensors checked {check.checked:7d}   off the GPU "
              f"{len(check.off_device):3d}  {'; '.join(check.off_device[:3])}")
        ok = ok and not check.off_device
    return ok


def precision(args: argparse.Namespace) -> None:
    source = f"PFLlib folder {args.pfllib_root}" if args.pfllib_root else \
        "synthetic 3x32x32, 20 clients x 250, IID"
    print(f"\n## 2. Precision (FedAvg, cnn, batch 10, lr 0.005, {args.rounds} rounds, {source})")
    print(f"{'precision':11s} {'s/round':>8s} {'best acc':>9s} {'last acc':>9s} {'peak MiB':>9s}")
    for name in ("32-true", "bf16-mixed", "16-mixed"):
        data = (FederatedDataModule(source="pfllib", root=args.pfllib_root)
                if args.pfllib_root else synthetic(20))
        torch.cuda.reset_peak_memory_stats()
        trainer = train("FedAvg", data, args.rounds, precision=name)
        accuracy = [row["personalized_accuracy"] for row in trainer.history]
        seconds = statistics.median(trainer.round_seconds[1:] or trainer.round_seconds)
        print(f"{name:11s} {seconds:8.3f} {100 * max(accuracy):9.2f} {100 * accuracy[-1]:9.2f} "
              f"{torch.cuda.max_memory_allocated() / 2**20:9.1f}", flush=True)


def workers(args: argparse.Namespace) -> None:
    print("\n## 3. Workers per GPU (benchmarks/workers.py, 20 clients x 250, batch 10, 32-true)")
    command = [sys.executable, str(BENCHMARKS / "workers.py"), "--accelerator", "cuda",
               "--samples", "250", "--methods", "FedAvg", "GPFL",
               "--clients", "20", "--batches", "10", "--precisions", "32-true",
               "--workers", *map(str, args.workers), "--rounds", "3"]
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    print(result.stdout.rstrip())
    if result.returncode:
        print(f"workers.py failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    print(f"({time.perf_counter() - started:.0f} s)")
    print("\n## 3b. Batched clients (benchmarks/batched.py, FedAvg, 20 clients x 250, batch 10)")
    batched_main(["--accelerator", "cuda", "--groups", "4", "10", "20", "--rounds", "3"])


def memory() -> None:
    print("\n## 4. GPU memory per client (one round, 32-true)")
    for method in ("FedAvg", "GPFL"):
        peaks = {}
        for clients in (20, 100):
            torch.cuda.reset_peak_memory_stats()
            train(method, synthetic(clients, 50), 1)
            peaks[clients] = torch.cuda.max_memory_allocated() / 2**20
        print(f"{method:7s} peak 20 clients {peaks[20]:8.1f} MiB, 100 clients {peaks[100]:8.1f} "
              f"MiB, per extra client {(peaks[100] - peaks[20]) / 80 * 1024:8.1f} KiB")


def floor() -> None:
    print("\n## 5. Floor on this GPU (cnn, 3x32x32, training step at batch 512)")
    device = torch.device("cuda")
    flops = flops_per_sample("cnn", SHAPE, 10, 32)
    best = best_throughput("cnn", SHAPE, 10, 512, 20, device, flops)
    floor_s = CIFAR_ROUND_SAMPLES / best.samples_per_second
    print(f"{flops / 1e6:.2f} MFLOP/sample; best {best.setting}: {best.samples_per_second:.0f} "
          f"samples/s, {best.flops_per_second / 1e12:.2f} TFLOP/s; round floor "
          f"({CIFAR_ROUND_SAMPLES} samples) {floor_s:.3f} s")
    seconds = fedlight_round_seconds(3, "cuda", CIFAR_ROUND_SAMPLES)
    print(f"fedlight FedAvg round at batch 10: {seconds:.3f} s = {seconds / floor_s:.1f}x the "
          "floor (batch 10 is launch-bound on a GPU: see section 3 for workers per GPU)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="rounds of the precision runs")
    parser.add_argument("--pfllib-root", default=None, help="PFLlib dataset folder (optional)")
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--skip", nargs="*", default=[],
                        choices=["placement", "precision", "workers", "memory", "floor"])
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("error: benchmarks/gpu.py needs a CUDA GPU; torch sees none")
    if "workers" not in args.skip:  # first: its processes fork before CUDA is initialized here
        workers(args)
    print(f"device {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB")
    placed = "placement" in args.skip or placement()
    if "precision" not in args.skip:
        precision(args)
    if "memory" not in args.skip:
        memory()
    if "floor" not in args.skip:
        floor()
    sys.exit(0 if placed else 1)


if __name__ == "__main__":
    main()
