"""What this machine's CPUs offer a run: the cores idle now (``devices: auto`` starts one
process per idle core), torch's threads per process (``trainer.threads``) and whether
bfloat16 is native."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import torch
from lightning.fabric import Fabric

from fedlight.core.host import cpu_cores

#: The kernel's CPU time counters (Linux).
PROC_STAT = Path("/proc/stat")


def busy_cores(window: float = 0.25) -> float | None:
    """Cores' worth of CPU time the machine spends busy over the next ``window`` seconds (from
    /proc/stat: every program, this one idle while it waits), or None where there is no
    /proc/stat. Sampled now rather than read from the load average, which lags by a minute and
    would show a busy neighbour that just started as idle cores."""
    try:
        before = _cpu_jiffies()
        time.sleep(window)
        after = _cpu_jiffies()
    except (OSError, ValueError, IndexError):
        return None
    total, idle = after[0] - before[0], after[1] - before[1]
    if total <= 0:
        return None
    return (os.cpu_count() or 1) * (total - idle) / total


def _cpu_jiffies() -> tuple[int, int]:
    """(all, idle) CPU time of the machine so far, from the first line of /proc/stat."""
    with PROC_STAT.open() as stat:
        fields = [int(value) for value in stat.readline().split()[1:9]]
    # user nice system idle iowait irq softirq steal (guest time is already inside user)
    return sum(fields), fields[3] + fields[4]


def idle_cores() -> int:
    """Cores of :func:`cpu_cores` that no program is using now (:func:`busy_cores`; the
    1-minute load average where the platform has no /proc/stat, all cores where it has
    neither)."""
    cores = cpu_cores()
    busy = busy_cores()
    if busy is None:
        busy = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return max(0, min(cores, math.floor(cores - busy + 0.5)))


def devices_note(devices: int | str, world_size: int, device: torch.device) -> str | None:
    """One line for a ``devices: auto`` CPU run that found some cores busy and so runs fewer
    processes than the machine has cores; None otherwise."""
    cores = cpu_cores()
    if devices != "auto" or device.type != "cpu" or world_size >= cores:
        return None
    return (f"fedlight: devices: auto runs {world_size} process"
            f"{'es' if world_size > 1 else ''} on this {cores}-core CPU, one per core idle at "
            "start (the others were busy); --trainer.devices N sets the count")


def resolve_auto_devices(accelerator: str, strategy: str) -> tuple[int | str, str]:
    """``devices: auto`` as (devices, strategy): on CPU one process per idle core
    (:func:`idle_cores`, at least one), each with one thread under ``threads: auto``, started
    by fork (``ddp_fork``) when ``strategy`` is ``auto``; elsewhere Fabric's own ``auto``
    (every visible GPU). Why not Fabric's CPU meaning (one process): fedlight's clients are
    independent, so processes scale without threads' contention: on the real-CIFAR-10 FedAvg
    workload 2 processes ran 10 rounds in 80.3 s against 143.6 s for one on 2 idle cores,
    start-up included (benchmarks/results/cpu_speed.md). Why idle cores, not all: a process
    that shares its core with a busy program sets every round's pace (1.46-1.7x the quiet
    round; benchmarks/contention.py). Fork is Linux-only here (it is unsafe with macOS system
    libraries and absent on Windows): elsewhere ``auto`` on CPU with ``strategy: auto`` is one
    process, and an explicit ``strategy`` (e.g. ``ddp_spawn``) gets one process per idle
    core."""
    on_cpu = accelerator == "cpu" or (
        accelerator == "auto" and Fabric(accelerator="auto", devices=1).device.type == "cpu")
    if not on_cpu:
        return "auto", strategy
    if strategy == "auto" and not sys.platform.startswith("linux"):
        return 1, strategy
    processes = max(1, idle_cores()) if cpu_cores() > 1 else 1
    if processes == 1:
        return 1, strategy
    return processes, "ddp_fork" if strategy == "auto" else strategy


def apply_threads(threads: int | str | None, device: torch.device) -> None:
    """Set this process's torch intra-op threads from ``trainer.threads``.

    A count is used as given; None leaves torch's default (all cores for one process, cores
    divided among the processes of a multi-process run); ``auto`` is one thread per process
    on CPU and torch's default elsewhere. One thread because fedlight's models are small and
    trained at batch 10: a second thread gains 1.2-1.4x on an idle 2-core machine, but with
    another program busy on a core the OpenMP threads of each operation wait for each other (a
    round of the MNIST-5k GPFL workload went from ~3 s to 48-270 s with 2 threads, ~9 s with
    1; see benchmarks/contention.py). To use all cores, run one process per core (devices: N,
    strategy: ddp_fork) rather than N threads.
    """
    if threads == "auto":
        threads = 1 if device.type == "cpu" else None
    if threads is not None:
        torch.set_num_threads(int(threads))


def native_bf16(device: torch.device) -> bool:
    """Whether bfloat16 matrix work runs natively on ``device``: a CUDA GPU that supports it,
    or a CPU reporting AVX512-BF16 or AMX-BF16 (read from /proc/cpuinfo; False elsewhere)."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if device.type != "cpu":
        return False
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def precision_hint(precision: str, device: torch.device) -> str | None:
    """One line for ``bf16-mixed`` on a CPU without native bfloat16, where oneDNN emulates it:
    the 4-layer CNN trained 9.5x slower per sample than in ``32-true`` on such a CPU (AVX2,
    batch 10, one thread; benchmarks/results/cpu_speed.md). None otherwise."""
    if str(precision) not in ("bf16-mixed", "bf16") or device.type != "cpu" or native_bf16(
            device):
        return None
    return ("fedlight: this CPU has no native bfloat16 (avx512_bf16 / amx_bf16), so bf16-mixed "
            "is emulated and several times slower than 32-true here")


__all__ = ["PROC_STAT", "apply_threads", "busy_cores", "cpu_cores", "devices_note", "idle_cores",
           "native_bf16", "precision_hint", "resolve_auto_devices"]
