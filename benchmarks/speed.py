"""How fast is a fedlight round against the practical floor (a hand-written PyTorch loop)?

Workload (GPFL's default): mnist5k, 20 clients, Dirichlet(0.1), join ratio 1, batch 10,
1 local epoch, the 4-layer CNN, FedAvg. Three ways in one run, on identical batches:

1. fedlight's ``FederatedTrainer`` (Fabric, one live module, state swapping);
2. a raw PyTorch loop: per client, load the global weights, SGD over the same batches,
   weighted average of the state dicts (the practical floor);
3. for information, one ``lightning.Trainer.fit`` per client per round.

Printed: median seconds per round after warm-up, samples per second, the fedlight / raw
ratio, the analytic floor (training FLOPs of a round / the machine's measured FLOP/s for the
same model at a large batch) and the per-client overhead ((round time - compute time) /
clients, compute time = the same steps in a tight loop with no client switching). Each
method's overhead is split into its own extra compute (its training_step and optimizer in the
same tight loop, minus FedAvg's) and the framework's share (fedlight's round minus the
method's tight loop). Threads are pinned; nothing is logged or evaluated inside the timed
region. ``--clock cpu`` times with this process's CPU time instead of wall time: steadier
when other jobs share the cores (run it with ``--threads 1``).

``--workload agnews`` (text) and ``--workload shakespeare`` (character sequences) time the
same comparison on token ids: AG News-format CSV files written into a temporary folder
(:data:`AGNEWS_ARTICLES` articles of about 40 words over an AG News-sized vocabulary of
:data:`AGNEWS_VOCABULARY` made-up words), 20 clients, Dirichlet(1), GPFL's fastText, lr 0.1;
and LEAF-format Shakespeare JSON (:data:`SHAKESPEARE_ROLES` roles of
:data:`SHAKESPEARE_SAMPLES` 80-character samples), one client per role, the privatization
paper's CharLSTM, lr 1.0. The files' contents are made up: the timing depends on the shapes,
the vocabulary size and the model, not on the words.

    python benchmarks/speed.py                 # ~3 minutes on 2 cores
    python benchmarks/speed.py --methods FedAvg GPFL MAP --rounds 6
    python benchmarks/speed.py --methods FedAvg GPFL --threads 1 --clock cpu
    python benchmarks/speed.py --workload agnews --methods FedAvg --lightning-rounds 0
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.util
import io
import logging
import math
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from fedlight.clients import CLIENTS
from fedlight.core.rules import WeightedSum
from fedlight.core.seeding import derive_seed
from fedlight.data import FederatedDataModule, iterate_batches
from fedlight.data.partitions.dirichlet import Dirichlet
from fedlight.data.partitions.natural import Natural
from fedlight.data.sources import Source
from fedlight.data.sources.agnews import AGNews
from fedlight.data.sources.mnist5k import MNIST5k
from fedlight.data.sources.shakespeare import Shakespeare
from fedlight.federation.build import Federation
from fedlight.federation.memory_format import (
    apply_memory_format,
    in_memory_format,
)
from fedlight.federation.trainer import FederatedTrainer
from fedlight.federation.training_loop import parse_optimizers

BATCH = 10
AGNEWS_ARTICLES = 8000  # 2000 a class: 6000 train + 2000 test, all partitioned
AGNEWS_VOCABULARY = 98_635  # GPFL's AG News vocabulary
SHAKESPEARE_ROLES = 20
SHAKESPEARE_SAMPLES = 100


def text_fixtures() -> Any:
    """The test suite's writers of AG News and Shakespeare files (tests/text_fixtures.py),
    loaded from their file: this script runs as a script, beside the tests, not as a package."""
    path = Path(__file__).resolve().parents[1] / "tests" / "text_fixtures.py"
    spec = importlib.util.spec_from_file_location("text_fixtures", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Workload:
    """A data source and the backbone and learning rate the papers train on it: ``source``
    builds the source given the folder ``write`` wrote its files into (None without one)."""

    source: Callable[[str | None], Source]
    data: dict[str, Any]
    backbone: str
    lr: float
    write: Callable[[Path], Path] | None = None  # writes the source's files into a folder
    # torch's FLOP counter sees every op of the model (not of embedding lookups or LSTMs)
    countable: bool = False


WORKLOADS = {
    "mnist5k": Workload(lambda root: MNIST5k(), {"partition": Dirichlet(beta=0.1)}, "cnn",
                        0.005, countable=True),
    "agnews": Workload(
        AGNews, {"partition": Dirichlet(beta=1.0), "merge_test": True},
        "fasttext", 0.1, lambda folder: text_fixtures().write_agnews(
            folder, AGNEWS_ARTICLES * 3 // 16, AGNEWS_ARTICLES // 16,
            vocabulary=AGNEWS_VOCABULARY)),
    "shakespeare": Workload(
        Shakespeare, {"partition": Natural(), "merge_test": True, "train_fraction": 0.8},
        "char_lstm", 1.0,
        lambda folder: text_fixtures().write_shakespeare(folder, SHAKESPEARE_ROLES,
                                                         SHAKESPEARE_SAMPLES)),
}
workload = WORKLOADS["mnist5k"]  # set from --workload
LR = workload.lr


def make_data() -> FederatedDataModule:
    root = None
    if workload.write is not None:
        root = str(workload.write(Path(tempfile.mkdtemp(prefix="fedlight-speed-"))))
    data = FederatedDataModule(source=workload.source(root), num_clients=20, **workload.data)
    data.setup()
    return data


def make_client(name: str, data: FederatedDataModule):
    torch.manual_seed(0)
    return CLIENTS[name](backbone=workload.backbone, num_classes=data.num_classes,
                         input_shape=data.input_shape, vocab_size=data.vocab_size, lr=LR)


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = time.perf_counter  # set from --clock


class ClockedTrainer(FederatedTrainer):
    """The trainer, timing each round's training and aggregation with :data:`clock`."""

    def _build(self, *args: Any, **kwargs: Any) -> Federation:
        built = super()._build(*args, **kwargs)
        self.clocked_seconds: list[float] = []
        run_round = built.protocol.run_round

        def timed(*run_args: Any, **run_kwargs: Any) -> Any:
            started = clock()
            result = run_round(*run_args, **run_kwargs)
            self.clocked_seconds.append(clock() - started)
            return result

        built.protocol.run_round = timed  # type: ignore[method-assign]
        return built


def time_fedlight(name: str, data: FederatedDataModule, rounds: int) -> list[float]:
    with tempfile.TemporaryDirectory() as root:
        trainer = ClockedTrainer(rounds=rounds, batch_size=BATCH, eval_every=10**6,
                                 accelerator="cpu", devices=1, default_root_dir=root,
                                 progress_bar=False, checkpoint_every=10**6, verbose=False,
                                 threads=torch.get_num_threads())
        # Evaluation and the checkpoint run after the last round, outside the timed rounds.
        trainer.fit(make_client(name, data), data)
        return trainer.clocked_seconds


def time_raw_loop(data: FederatedDataModule, rounds: int) -> list[float]:
    model = make_client("FedAvg", data).model
    memory_format = apply_memory_format(model, "auto", torch.device("cpu"))  # as fedlight
    global_state = copy.deepcopy(model.state_dict())
    clients = [(in_memory_format(x, memory_format), y)
               for x, y in (data.client_train(i) for i in range(data.num_clients))]
    times = []
    for round_idx in range(rounds):
        started = clock()
        sums = {k: torch.zeros_like(v, dtype=torch.float32) for k, v in global_state.items()}
        for client_id, (x, y) in enumerate(clients):
            model.load_state_dict(global_state)
            optimizer = torch.optim.SGD(model.parameters(), lr=LR)
            seed = derive_seed(0, round_idx, client_id)
            torch.manual_seed(seed)
            for xb, yb in iterate_batches(x, y, BATCH, torch.Generator().manual_seed(seed)):
                loss = F.cross_entropy(model(xb), yb)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            for key, value in model.state_dict().items():
                sums[key].add_(value, alpha=len(y))
        total = sum(len(y) for _, y in clients)
        global_state = {k: (v / total).to(global_state[k].dtype) for k, v in sums.items()}
        times.append(clock() - started)
    return times


def time_lightning_trainer(data: FederatedDataModule, rounds: int) -> list[float]:
    import lightning as L

    client = make_client("FedAvg", data)
    global_state = copy.deepcopy(client.state_dict())
    views = [data.client(i) for i in range(data.num_clients)]
    times = []
    for _ in range(rounds):
        started = clock()
        total = WeightedSum()
        for view in views:
            client.load_state_dict(global_state)
            trainer = L.Trainer(max_epochs=1, accelerator="cpu", logger=False,
                                enable_checkpointing=False, enable_progress_bar=False,
                                enable_model_summary=False, num_sanity_val_steps=0,
                                limit_val_batches=0)
            quiet = io.StringIO()
            with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                trainer.fit(client, train_dataloaders=view.train_dataloader())
            total.add(client.state_dict(), len(view.train_set))
        global_state = total.mean()
        times.append(clock() - started)
    return times


def compute_time(data: FederatedDataModule, name: str = "FedAvg") -> tuple[float, int]:
    """Seconds of one round's steps of method ``name`` in a tight loop (its training_step and
    optimizer on the live module, no client switching; the first local phase only) and the
    round's samples: the method's own compute."""
    client = make_client(name, data)
    memory_format = apply_memory_format(client, "auto", torch.device("cpu"))  # as fedlight
    client.capture_logs(True)
    client.phase = client.local_phases(1)[0].name
    optimizer, _ = parse_optimizers(client.configure_optimizers())
    batches = [(in_memory_format(x, memory_format), y) for i in range(data.num_clients)
               for x, y in iterate_batches(*data.client_train(i), BATCH, torch.Generator())]
    started = clock()
    for index, batch in enumerate(batches):
        output = client.training_step(batch, index)
        loss = output["loss"] if isinstance(output, dict) else output
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    seconds = clock() - started
    client.capture_logs(False)
    return seconds, sum(len(b[1]) for b in batches)


def analytic_floor(data: FederatedDataModule, samples: int) -> tuple[float, float]:
    """(seconds, FLOP/s): training FLOPs of one round / measured throughput at batch 256."""
    model = make_client("FedAvg", data).model
    memory_format = apply_memory_format(model, "auto", torch.device("cpu"))  # as fedlight
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    x = in_memory_format(data.client_train(0)[0][:1].expand(256, *data.input_shape).clone(),
                         memory_format)  # real ids / values
    y = torch.randint(0, data.num_classes, (256,))
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(x), y).backward()
    flops_per_sample = counter.get_total_flops() / 256
    for _ in range(2):  # warm-up
        F.cross_entropy(model(x), y).backward()
    started = clock()
    steps = 8
    for _ in range(steps):
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    throughput = flops_per_sample * 256 * steps / (clock() - started)
    return flops_per_sample * samples / throughput, throughput


def median_after_warmup(times: list[float], warmup: int) -> float:
    return statistics.median(times[warmup:] if len(times) > warmup else times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2,
                        help="alternate raw and fedlight this many times; keep the fastest")
    parser.add_argument("--lightning-rounds", type=int, default=2,
                        help="rounds of the Trainer-per-client way (0 skips it)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall time, or this process's CPU time (steadier on a shared "
                             "machine with --threads 1)")
    parser.add_argument("--methods", nargs="+", default=["FedAvg", "GPFL", "MAP"])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="mnist5k",
                        help="mnist5k (images, the default), agnews (text, fastText) or "
                             "shakespeare (characters, CharLSTM)")
    args = parser.parse_args()
    global clock, workload, LR
    clock = CLOCKS[args.clock]
    workload = WORKLOADS[args.workload]
    LR = workload.lr
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")

    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    data = make_data()
    compute, samples = compute_time(data)  # warm-up; measured again in the loop below
    clients = data.num_clients
    print(f"torch {torch.__version__}, {args.threads} threads, {args.clock} clock; "
          f"{args.workload} ({workload.backbone}), {clients} clients, {samples} training "
          f"samples per round, batch {BATCH}")
    if workload.countable:
        floor, throughput = analytic_floor(data, samples)
        print(f"analytic floor        {floor:8.3f} s/round  ({throughput / 1e9:.1f} GFLOP/s at "
              "batch 256)")
    # Tight loop, raw loop and fedlight alternate so that load from other processes hits all
    # alike; the fastest repeat of each is kept.
    compute, raw = math.inf, math.inf
    fedlight = {name: math.inf for name in args.methods if name in CLIENTS}
    own = dict.fromkeys(fedlight, math.inf)  # each method's tight-loop compute
    for _ in range(args.repeats):
        compute = min(compute, compute_time(data)[0])
        raw = min(raw, median_after_warmup(time_raw_loop(data, args.rounds), args.warmup))
        for name in fedlight:
            own[name] = min(own[name], compute_time(data, name)[0])
            seconds = median_after_warmup(time_fedlight(name, data, args.rounds), args.warmup)
            fedlight[name] = min(fedlight[name], seconds)
    print(f"tight loop (compute)  {compute:8.3f} s/round")
    print(f"raw PyTorch loop      {raw:8.3f} s/round  {samples / raw:8.0f} samples/s  "
          f"overhead {(raw - compute) / clients * 1e3:6.2f} ms/client")
    for name in args.methods:
        if name not in fedlight:
            print(f"fedlight {name:12s} (not available)")
            continue
        seconds = fedlight[name]
        line = (f"fedlight {name:12s} {seconds:8.3f} s/round  {samples / seconds:8.0f} "
                f"samples/s  overhead {(seconds - compute) / clients * 1e3:6.2f} ms/client  "
                f"(own compute {own[name]:.3f} s/round: method extra "
                f"{(own[name] - compute) / clients * 1e3:6.2f}, framework "
                f"{(seconds - own[name]) / clients * 1e3:6.2f} ms/client)")
        if name == "FedAvg":
            line += f"  ratio fedlight/raw = {seconds / raw:.3f}"
        print(line)
    if args.lightning_rounds:
        seconds = statistics.median(time_lightning_trainer(data, args.lightning_rounds))
        print(f"Trainer per client    {seconds:8.3f} s/round  {samples / seconds:8.0f} samples/s  "
              f"ratio Trainer/raw = {seconds / raw:.2f}")


if __name__ == "__main__":
    main()
