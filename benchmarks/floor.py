"""The floor of a round: training FLOPs per sample of each backbone and the best throughput
this machine reaches on it, so a fedlight round can be read against what the hardware allows.

For every backbone of the zoo at the input size the four papers use it with:

- FLOPs per training sample, counted with ``torch.utils.flop_counter.FlopCounterMode`` over
  one forward + backward of the backbone at ``--batch`` samples (cross-entropy loss), divided by
  the batch. The counter adds 2 FLOPs per multiply-add of convolutions and matrix products
  (forward, input gradient and weight gradient); elementwise work, normalization and the
  optimizer step are not counted, so the figure is a lower bound on the arithmetic.
- the best throughput (FLOP/s and samples/s) of a plain SGD training step at that batch over
  the settings tried on this device: float32 in the default memory format, float32
  ``channels_last`` (images only), and bfloat16 autocast where the device runs it natively
  (a CUDA GPU, or a CPU reporting ``avx512_bf16`` / ``amx_bf16``). Each setting is timed over
  ``--steps`` steps after three warm-up steps; the fastest is kept and named.
- the floor of a round of the CIFAR-10 workload (``--round-samples`` training samples: 20
  clients, 1200 images per class, 75 % for training, one local epoch) = samples x FLOPs per
  sample / best FLOP/s.

``--fedlight-rounds R`` also runs R rounds of fedlight's FedAvg on that workload (synthetic
3x32x32 data of the same size: the work is compute-bound, so the pixels do not change the
time) with the 4-layer CNN at batch 10 and prints the median training round against the floor.

    python benchmarks/floor.py                         # every backbone, this machine (CPU)
    python benchmarks/floor.py --backbones cnn resnet18 --fedlight-rounds 3
    python benchmarks/floor.py --device cuda --batch 512
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from fedlight.data.partitions.iid import IID
from fedlight.data.sources.synthetic import Synthetic
from fedlight.federation.processes.cpus import native_bf16
from fedlight.models import BACKBONES, build_backbone

#: (backbone, input shape, classes, where the papers use it). Rows whose backbone is not in
#: the zoo are skipped with a note, so the table follows the zoo as it grows.
PAPER_SETTINGS: tuple[tuple[str, tuple[int, ...], int, str], ...] = (
    ("cnn", (1, 28, 28), 10, "GPFL FMNIST"),
    ("cnn", (3, 32, 32), 10, "GPFL CIFAR-10/100"),
    ("cnn", (3, 64, 64), 200, "GPFL Tiny-ImageNet"),
    ("resnet18", (3, 64, 64), 200, "GPFL Tiny-ImageNet"),
    ("mlp", (1, 28, 28), 10, "MAP FaMnist MLPNet"),
    ("lenet", (1, 28, 28), 10, "MAP FaMnist"),
    ("tfcnn", (3, 32, 32), 10, "MAP CIFAR-10"),
    ("vgg8", (3, 32, 32), 10, "MAP CIFAR-10"),
    ("vgg8_bn", (3, 32, 32), 100, "MAP CIFAR-100"),
    ("vgg11", (3, 32, 32), 100, "MAP CIFAR-100 / privatize FeCifar"),
    ("resnet20", (3, 32, 32), 10, "MAP CINIC-10"),
    ("resnet56", (3, 32, 32), 10, "MAP CINIC-10"),
    ("femnist_cnn", (1, 28, 28), 62, "privatize FeMnist"),
    ("digit_cnn", (3, 32, 32), 10, "FedPick Digits-Five"),
    ("cnn_bn", (3, 32, 32), 10, "FedBN-style CNN"),
    ("alexnet_bn", (3, 256, 256), 10, "FedPick Office-Caltech / DomainNet"),
)

#: The CIFAR-10 workload: 20 clients, 1200 images per class (12,000), 75 % train, 1 epoch.
ROUND_SAMPLES = 9000


@dataclass
class Throughput:
    setting: str
    samples_per_second: float
    flops_per_second: float


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def training_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
                  y: torch.Tensor, autocast: Callable[[], object]) -> None:
    with autocast():  # type: ignore[attr-defined]
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def flops_per_sample(name: str, shape: tuple[int, ...], classes: int, batch: int) -> float:
    """Counted FLOPs of one forward + backward at `batch`, per sample (see the module doc)."""
    model = build_backbone(name, shape, classes)
    x, y = torch.randn(batch, *shape), torch.randint(0, classes, (batch,))
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(x), y).backward()
    return counter.get_total_flops() / batch


@contextmanager
def tf32() -> Iterator[None]:
    """Let CUDA matrix products and convolutions use TensorFloat-32 inside the block."""
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cudnn.allow_tf32 = before[1]


def settings(device: torch.device, image: bool, emulated_bf16: bool = False
             ) -> Iterator[tuple[str, bool, Callable]]:
    """(name, channels_last, autocast factory) of each setting worth trying on `device`
    (bf16 also where it is emulated, with `emulated_bf16`)."""
    plain = nullcontext
    yield "fp32", False, plain
    if image:
        yield "fp32 channels_last", True, plain
    if device.type == "cuda":  # TensorFloat-32 matrix products: fp32 storage, 10-bit mantissa
        yield "tf32", False, tf32
    if native_bf16(device) or emulated_bf16:
        def bf16() -> object:
            return torch.autocast(device.type, dtype=torch.bfloat16)
        yield "bf16 autocast", False, bf16
        if image:
            yield "bf16 autocast channels_last", True, bf16


def throughputs(name: str, shape: tuple[int, ...], classes: int, batch: int, steps: int,
                device: torch.device, flops: float, emulated_bf16: bool = False
                ) -> list[Throughput]:
    """Each setting's samples/s and FLOP/s for a training step at `batch`."""
    measured = []
    for setting, channels_last, autocast in settings(device, len(shape) == 3, emulated_bf16):
        torch.manual_seed(0)
        model = build_backbone(name, shape, classes).to(device)
        x = torch.randn(batch, *shape, device=device)
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, classes, (batch,), device=device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(3):
            training_step(model, optimizer, x, y, autocast)
        synchronize(device)
        started = time.perf_counter()
        for _ in range(steps):
            training_step(model, optimizer, x, y, autocast)
        synchronize(device)
        rate = steps * batch / (time.perf_counter() - started)
        measured.append(Throughput(setting, rate, rate * flops))
    return measured


@contextmanager
def quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def fedlight_round_seconds(rounds: int, device: str, samples: int) -> float:
    """Median training round (training + aggregation, no evaluation) of fedlight's FedAvg on
    the CIFAR-10 workload's shape: 20 clients, `samples` / 0.75 synthetic 3x32x32 images."""
    from fedlight.clients import FedAvg
    from fedlight.data import FederatedDataModule
    from fedlight.federation.trainer import FederatedTrainer

    data = FederatedDataModule(source=Synthetic(samples=round(samples / 0.75),
                                                shape=(3, 32, 32), classes=10),
                               partition=IID(), num_clients=20,
                               seed=0)
    data.setup()
    torch.manual_seed(0)
    client = FedAvg(backbone="cnn", num_classes=10, input_shape=(3, 32, 32), lr=0.005)
    with tempfile.TemporaryDirectory() as root, quiet():
        trainer = FederatedTrainer(rounds=rounds, batch_size=10, eval_every=rounds,
                                   checkpoint_every=rounds, accelerator=device, devices=1,
                                   default_root_dir=root, progress_bar=False, verbose=False)
        trainer.fit(client, data)
    timed = trainer.round_seconds[1:] or trainer.round_seconds
    return statistics.median(timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbones", nargs="+", default=None,
                        help="backbones to measure (default: every row of PAPER_SETTINGS)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--round-samples", type=int, default=ROUND_SAMPLES)
    parser.add_argument("--fedlight-rounds", type=int, default=0)
    parser.add_argument("--every-setting", action="store_true",
                        help="print every setting's row (bf16 too where it is emulated), "
                             "not only the best")
    args = parser.parse_args()
    device = torch.device(args.device)
    gpu = f"{torch.cuda.get_device_name(device)}, " if device.type == "cuda" else ""
    print(f"device {device} ({gpu}{torch.get_num_threads()} CPU threads), batch {args.batch}, "
          f"torch {torch.__version__}, "
          f"native bf16: {native_bf16(device)}")
    print(f"{'backbone':12s} {'input':12s} {'setting (paper)':34s} {'MFLOP/sample':>12s} "
          f"{'best setting':28s} {'samples/s':>10s} {'GFLOP/s':>8s} {'round floor s':>13s}")
    floors: dict[tuple[str, tuple[int, ...]], float] = {}
    for name, shape, classes, where in PAPER_SETTINGS:
        if args.backbones and name not in args.backbones:
            continue
        if name not in BACKBONES:
            print(f"{name:12s} (not in the zoo; skipped)")
            continue
        with quiet():
            flops = flops_per_sample(name, shape, classes, min(args.batch, 32))
            measured = throughputs(name, shape, classes, args.batch, args.steps, device, flops,
                                   args.every_setting)
        best = max(measured, key=lambda t: t.samples_per_second)
        floors[(name, shape)] = args.round_samples / best.samples_per_second
        for row in measured if args.every_setting else [best]:
            print(f"{name:12s} {'x'.join(map(str, shape)):12s} {where:34s} {flops / 1e6:12.2f} "
                  f"{row.setting:28s} {row.samples_per_second:10.0f} "
                  f"{row.flops_per_second / 1e9:8.1f} "
                  f"{args.round_samples / row.samples_per_second:13.2f}", flush=True)
    if args.fedlight_rounds:
        seconds = fedlight_round_seconds(args.fedlight_rounds, args.device, args.round_samples)
        floor = floors.get(("cnn", (3, 32, 32)))
        ratio = f", {seconds / floor:.2f}x the cnn floor ({floor:.2f} s)" if floor else ""
        print(f"fedlight FedAvg round (cnn 3x32x32, 20 clients, batch 10, "
              f"{args.round_samples} samples): {seconds:.2f} s{ratio}")


if __name__ == "__main__":
    main()
