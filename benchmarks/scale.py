"""Scale-out figures: seconds per round with 1 and 2 processes, and memory with many clients.

Workload: FedPer (shared encoder, private head) with the 4-layer CNN on CIFAR-shaped synthetic
data (3x32x32, 10 classes, IID), batch 10, 1 local epoch, join ratio 1 for timing.

1. **Time per round** (train + aggregate, no evaluation) for 20 and 100 clients: one process
   with one thread, one process with every core, and two processes (``devices=2``, Fabric's
   DDP process group over gloo, forked workers, ``cores / 2`` threads each as Fabric's
   launcher sets), and the speed-ups. The first round is a warm-up and is not counted; the
   figure is the median over the timed rounds (then over seeds).
2. **Memory** for 100, 1 000 and 10 000 clients, each in a fresh process:
   * a whole ``fit`` (1 round, a few samples per client, about 20 clients sampled, every
     client scored at the end) with ``client_state_storage`` ``memory`` and ``disk``: peak
     resident memory (``VmHWM``) and the resident memory before the data is built;
   * the client-state store alone with *every* client's private head stored (what a long run
     ends with): the growth of anonymous resident memory (``RssAnon``, what cannot be paged
     out) and of file-backed resident memory (``RssFile``, page cache the kernel may drop).
3. **GPU** (only when ``torch.cuda.is_available()``): one bf16-mixed run, seconds per round and
   peak GPU memory; skipped cleanly otherwise.

    python benchmarks/scale.py --rounds 3 --seeds 1 --out benchmarks/results/scale.md
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from fedlight.clients import FedPer
from fedlight.data import FederatedDataModule
from fedlight.data.partitions.iid import IID
from fedlight.data.sources.synthetic import Synthetic
from fedlight.federation.state.stores import make_store
from fedlight.federation.trainer import FederatedTrainer

SHAPE = (3, 32, 32)
CLASSES = 10
LR = 0.01


def make_data(num_clients: int, samples_per_client: int, seed: int = 0) -> FederatedDataModule:
    return FederatedDataModule(source=Synthetic(samples=num_clients * samples_per_client,
                                                shape=SHAPE, classes=CLASSES),
                               partition=IID(),
                               num_clients=num_clients, seed=seed)


def make_client(seed: int = 0) -> FedPer:
    torch.manual_seed(seed)
    return FedPer(backbone="cnn", num_classes=CLASSES, input_shape=SHAPE, lr=LR)


def trainer(root: str, **kwargs: Any) -> FederatedTrainer:
    options: dict[str, Any] = dict(batch_size=10, accelerator="cpu", devices=1,
                                   default_root_dir=root, progress_bar=False, logger="csv")
    options.update(kwargs)
    return FederatedTrainer(**options)


# ===================================================================== 1. time per round
def seconds_per_round(num_clients: int, processes: int, threads: int | None, rounds: int,
                      seed: int, samples: int) -> float:
    """Median train + aggregate seconds of the timed rounds (rank 0's wall time per round)."""
    with tempfile.TemporaryDirectory() as root:
        extra: dict[str, Any] = ({"devices": processes, "strategy": "ddp_fork"}
                                 if processes > 1 else {"threads": threads})
        run = trainer(root, rounds=rounds + 1, eval_every=rounds + 1, seed=seed,
                      checkpoint_every=rounds + 1, **extra)
        run.fit(make_client(seed), make_data(num_clients, samples, seed))
        return statistics.median(run.round_seconds[1:])  # the warm-up round is dropped


def _matmul_work(queue: Any, repeats: int) -> None:
    torch.set_num_threads(1)
    x = torch.randn(256, 256)
    started = time.perf_counter()
    for _ in range(repeats):
        x @ x
    queue.put(time.perf_counter() - started)


def parallel_ceiling(repeats: int = 3000) -> float:
    """Throughput of two concurrent single-thread processes over one, on a fixed matmul loop:
    2.0 on two idle cores, less when other work shares the machine. The best a 2-process run
    can do against a 1-process, 1-thread one at that moment."""
    context = multiprocessing.get_context("fork")
    times = []
    for count in (1, 2):
        queue = context.SimpleQueue()
        workers = [context.Process(target=_matmul_work, args=(queue, repeats))
                   for _ in range(count)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        times.append(max(queue.get() for _ in range(count)))
    return 2 * times[0] / times[1]


def timing_table(clients: list[int], rounds: int, seeds: int, samples: int) -> str:
    cores = os.cpu_count() or 1
    ceilings = [parallel_ceiling()]
    configs = [("1 process, 1 thread", 1, 1), (f"1 process, {cores} threads", 1, cores),
               (f"2 processes, {max(1, cores // 2)} thread(s) each", 2, None)]
    header = " | ".join(f"{name} (s / round)" for name, _, _ in configs)
    lines = [f"| clients | samples (75 % train) | {header} | speed-up 2 proc. vs 1 proc. "
             "1 thread | vs 1 proc. all threads |", "| ---: | ---: | ---: | ---: | ---: | ---: "
             "| ---: |"]
    for num_clients in clients:
        times = [statistics.median(seconds_per_round(num_clients, processes, threads, rounds, s,
                                                     samples) for s in range(seeds))
                 for _, processes, threads in configs]
        cells = " | ".join(f"{t:.3f}" for t in times)
        lines.append(f"| {num_clients} | {num_clients * samples} | {cells} "
                     f"| {times[0] / times[2]:.2f}x | {times[1] / times[2]:.2f}x |")
        print(lines[-1], flush=True)
    ceilings.append(parallel_ceiling())
    return "\n".join(lines) + (
        "\n\nParallelism this machine offered (two concurrent single-thread matmul loops "
        f"against one, before / after the table): {ceilings[0]:.2f}x / {ceilings[1]:.2f}x "
        "(2.00x on two idle cores).")


# ===================================================================== 2. memory
def _status() -> dict[str, int]:
    """Resident-memory figures of this process from /proc/self/status, in KiB."""
    values = {}
    with open("/proc/self/status") as handle:
        for line in handle:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                values[key] = int(rest.split()[0])
    return values


def memory_worker(kind: str, num_clients: int, storage: str, samples: int) -> dict[str, Any]:
    """Run in a fresh process: one measurement, returned as a dict of MiB figures."""
    warnings.filterwarnings("ignore")
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    before = _status()
    if kind == "store":
        template = make_client().client_state()  # FedPer's private head
        with tempfile.TemporaryDirectory() as root:
            store = make_store(storage, template, num_clients, root)
            for client_id in range(num_clients):
                store[client_id] = {k: torch.randn_like(v) for k, v in template.items()}
            after = _status()
            store.close()
        head_kib = sum(v.numel() * v.element_size() for v in template.values()) / 1024
        return {"anon_mib": (after["RssAnon"] - before["RssAnon"]) / 1024,
                "file_mib": (after["RssFile"] - before["RssFile"]) / 1024,
                "states_mib": num_clients * head_kib / 1024}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        join = min(1.0, 20 / num_clients)
        run = trainer(root, rounds=1, join_ratio=join, client_state_storage=storage,
                      eval_batch_size=512)
        data = make_data(num_clients, samples)
        summary = run.fit(make_client(), data)
    return {"baseline_mib": before["VmRSS"] / 1024, "peak_mib": _status()["VmHWM"] / 1024,
            "seconds": time.perf_counter() - started,
            "accuracy": summary["last_personalized_accuracy"],
            "trained": len(run.client_states)}


def _measure(kind: str, num_clients: int, storage: str, samples: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--memory-worker", kind, str(num_clients), storage,
               str(samples)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def memory_tables(clients: list[int], samples: int) -> str:
    fit_lines = ["| clients | samples | storage | trained | resident before data (MiB) "
                 "| peak resident (MiB) | wall (s) |",
                 "| ---: | ---: | --- | ---: | ---: | ---: | ---: |"]
    store_lines = ["| clients | private heads (MiB) | memory store: anon / file (MiB) "
                   "| disk store: anon / file (MiB) |", "| ---: | ---: | ---: | ---: |"]
    for num_clients in clients:
        for storage in ("memory", "disk"):
            r = _measure("fit", num_clients, storage, samples)
            fit_lines.append(f"| {num_clients} | {num_clients * samples} | {storage} "
                             f"| {r['trained']} | {r['baseline_mib']:.0f} | {r['peak_mib']:.0f} "
                             f"| {r['seconds']:.1f} |")
            print(fit_lines[-1], flush=True)
        mem = _measure("store", num_clients, "memory", samples)
        disk = _measure("store", num_clients, "disk", samples)
        store_lines.append(f"| {num_clients} | {mem['states_mib']:.1f} "
                           f"| {mem['anon_mib']:.1f} / {mem['file_mib']:.1f} "
                           f"| {disk['anon_mib']:.1f} / {disk['file_mib']:.1f} |")
        print(store_lines[-1], flush=True)
    return "\n".join(fit_lines) + "\n\nClient-state store alone, every client stored:\n\n" + \
        "\n".join(store_lines)


# ===================================================================== 3. GPU
def gpu_section(rounds: int) -> str:
    if not torch.cuda.is_available():
        return "No GPU on this machine: the bf16-mixed GPU run was skipped."
    torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory() as root:
        run = trainer(root, rounds=rounds + 1, eval_every=rounds + 1, accelerator="cuda",
                      precision="bf16-mixed", checkpoint_every=rounds + 1)
        run.fit(make_client(), make_data(20, 25))
    seconds = statistics.median(run.round_seconds[1:])
    peak = torch.cuda.max_memory_allocated() / 2**20
    return (f"GPU ({torch.cuda.get_device_name()}), 20 clients, bf16-mixed: "
            f"{seconds:.3f} s / round, peak GPU memory {peak:.0f} MiB.")


# ===================================================================== main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (after 1 warm-up)")
    parser.add_argument("--seeds", type=int, default=1, help="repetitions of each timing")
    parser.add_argument("--timing-clients", type=int, nargs="+", default=[20, 100])
    parser.add_argument("--timing-samples", type=int, default=20,
                        help="samples per client in the timing runs (75%% train)")
    parser.add_argument("--memory-clients", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--memory-samples", type=int, default=4,
                        help="samples per client in the memory runs")
    parser.add_argument("--skip", nargs="*", default=[], choices=["timing", "memory", "gpu"])
    parser.add_argument("--out", type=str, default=None, help="write the Markdown here")
    parser.add_argument("--memory-worker", nargs=4, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.memory_worker:
        kind, clients, storage, samples = options.memory_worker
        print(json.dumps(memory_worker(kind, int(clients), storage, int(samples))))
        return
    warnings.filterwarnings("ignore")
    started = time.perf_counter()
    sections = []
    if "timing" not in options.skip:
        print("time per round", flush=True)
        sections.append("### Seconds per round, 1 and 2 processes\n\n" + timing_table(
            options.timing_clients, options.rounds, options.seeds, options.timing_samples))
    if "memory" not in options.skip:
        print("memory", flush=True)
        sections.append("### Peak resident memory, FedPer, 1 round\n\n" + memory_tables(
            options.memory_clients, options.memory_samples))
    if "gpu" not in options.skip:
        sections.append("### GPU\n\n" + gpu_section(options.rounds))
        print(sections[-1], flush=True)
    wall = time.perf_counter() - started
    command = "python benchmarks/scale.py " + " ".join(sys.argv[1:])
    header = (f"## Scale-out\n\n`{command}`\n\n{platform.processor() or platform.machine()}, "
              f"{os.cpu_count()} cores, torch {torch.__version__}; "
              f"timed rounds {options.rounds} (+1 warm-up), seeds {options.seeds}; "
              f"total wall time {wall:.0f} s.\n")
    text = header + "\n" + "\n\n".join(sections) + "\n"
    if options.out:
        Path(options.out).parent.mkdir(parents=True, exist_ok=True)
        Path(options.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
