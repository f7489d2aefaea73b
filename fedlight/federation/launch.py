"""Starting the processes of a multi-process run, on Lightning Fabric only (see
:mod:`fedlight.federation.distributed` for how the ranks share the work)."""

from __future__ import annotations

import contextlib
import glob
import logging
import math
import multiprocessing
import os
import pickle
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any, Literal

import torch
from lightning.fabric import Fabric
from lightning.fabric.strategies.ddp import DDPStrategy
from torch import nn

from fedlight.core.errors import ConfigError
from fedlight.federation.interrupt import SignalScope
from fedlight.federation.server.base import move as _move
from fedlight.federation.store import STORAGES

StartMethod = Literal["popen", "spawn", "fork", "forkserver"]

#: ``trainer.strategy`` values and the start method of Fabric's DDP launcher they select.
STRATEGIES: dict[str, StartMethod] = {"auto": "popen", "ddp": "popen", "ddp_spawn": "spawn",
                                      "ddp_fork": "fork", "ddp_notebook": "fork"}


class FederatedDDPStrategy(DDPStrategy):
    """Fabric's DDP strategy (launcher, process group, collectives) for per-client training:
    :meth:`setup_module` does not wrap the module in ``DistributedDataParallel``, because the
    ranks train different clients and must never average gradients or buffers."""

    def setup_module(self, module: nn.Module) -> nn.Module:  # type: ignore[override]
        return module


def check_scale_options(strategy: str, drop_rate: float, client_state_storage: str) -> None:
    """Raise ``ValueError`` naming the bad value of the trainer's scale-out options."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"trainer.strategy: unknown strategy {strategy!r}; valid: "
                         f"{', '.join(STRATEGIES)} (the sharding strategies split ONE model "
                         "across devices; fedlight runs different clients on different processes)")
    if not 0 <= drop_rate < 1:
        raise ConfigError(f"trainer.drop_rate must be in [0, 1), got {drop_rate}")
    if client_state_storage not in STORAGES:
        raise ConfigError(f"trainer.client_state_storage: unknown storage "
                          f"{client_state_storage!r}; "
                         "valid: "
                         f"{', '.join(STORAGES)}")


#: ``trainer.precision`` values that run every method: 32-bit, or mixed precision (the weights
#: stay float32). The "-true" half / double precisions and transformer-engine are refused:
#: methods compute on their data outside the training step (prototypes, GPFL's conditions,
#: Per-FedAvg's functional steps) with float32 inputs, which a float16 / float64 model rejects.
PRECISIONS = ("32-true", "16-mixed", "bf16-mixed", "32", "16", "bf16")


def check_precision(precision: str) -> str:
    """Return ``precision`` when it is one of :data:`PRECISIONS`, else raise ``ValueError``
    naming it and the valid values."""
    if str(precision) not in PRECISIONS:
        raise ConfigError(f"trainer.precision {precision!r} is not supported; valid: "
                         f"{', '.join(PRECISIONS)} (fedlight trains float32 weights; the "
                         "'-true' half / double precisions and transformer-engine do not run)")
    return str(precision)


#: ``trainer.threads`` values that are not a thread count.
THREAD_RULES = ("auto", None)


def check_threads(threads: int | str | None) -> int | str | None:
    """Return ``threads`` when it is ``auto``, None or a count of at least 1; otherwise raise
    ``ValueError`` naming it and the valid values."""
    valid = threads in THREAD_RULES or (isinstance(threads, int) and not isinstance(threads, bool)
                                        and threads >= 1)
    if not valid:
        raise ConfigError(f"trainer.threads must be 'auto', None or an integer >= 1, got "
                         f"{threads!r}")
    return threads


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


def cpu_cores() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


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


def make_fabric(accelerator: str, devices: int | str, num_nodes: int, precision: str,
                strategy: str = "auto", workers_per_device: int = 1) -> Fabric:
    """The trainer's ``Fabric``: Fabric's own choice for one process, otherwise
    :class:`FederatedDDPStrategy` with the launcher of ``strategy`` (``auto`` = ``ddp``);
    ``devices: auto`` on CPU is one process per idle core (:func:`resolve_auto_devices`).

    ``workers_per_device`` > 1 starts that many processes on each device (each trains its own
    clients, as with several devices); on GPUs their process group is gloo, because NCCL
    refuses two ranks on one GPU."""
    precision = check_precision(precision)
    if devices == "auto" and workers_per_device == 1 and num_nodes == 1:
        devices, strategy = resolve_auto_devices(accelerator, strategy)
    options: dict[str, Any] = dict(accelerator=accelerator, devices=devices, num_nodes=num_nodes,
                                   precision=precision, loggers=[])
    if workers_per_device > 1:
        return _shared_device_fabric(options, strategy, workers_per_device)
    if strategy == "auto":
        if isinstance(devices, int) and devices * num_nodes == 1:
            return Fabric(**options)
        if not isinstance(devices, int):  # "auto", "0,1", ...: ask Fabric how many
            fabric = Fabric(**options)
            if fabric.world_size == 1:
                return fabric
    return Fabric(strategy=FederatedDDPStrategy(start_method=STRATEGIES[strategy]), **options)


def _shared_device_fabric(options: dict[str, Any], strategy: str, workers: int) -> Fabric:
    """A Fabric with ``workers`` processes on each of the devices ``options`` select."""
    chosen = Fabric(**{**options, "num_nodes": 1})  # resolves the device list, starts nothing
    devices = list(getattr(chosen.strategy, "parallel_devices", None) or [chosen.device])
    shared = [device for device in devices for _ in range(workers)]
    backend = "gloo" if shared[0].type != "cpu" else None
    rule = FederatedDDPStrategy(parallel_devices=shared, start_method=STRATEGIES[strategy],
                                process_group_backend=backend)
    return Fabric(strategy=rule, **{k: v for k, v in options.items() if k != "devices"})


def needs_launch(fabric: Fabric) -> bool:
    """True when the run has several processes and they are not started yet."""
    return fabric.world_size > 1 and not torch.distributed.is_initialized()


#: What a spawned run sends back to the calling process besides the method's return value.
RETURNED_ATTRIBUTES = ("history", "server", "round_seconds", "totals", "last_client_scores")


def launch(trainer: Any, method: str, *args: Any) -> Any:
    """Start the processes with ``fabric.launch`` and call ``trainer.<method>(*args)`` in each.

    Returns rank 0's result. With a spawn / fork launcher the calling process does not take
    part; it receives rank 0's :data:`RETURNED_ATTRIBUTES` (``trainer.history`` and
    ``trainer.global_state`` are then filled as after a 1-process run; the client states are
    in the run's checkpoint), and an exception of a rank is raised here as it was raised there
    (the first rank to fail names the cause; e.g. ``RunInterrupted`` after a Ctrl-C).

    Ctrl-C and SIGTERM: the started processes run in process groups of their own, so a
    terminal's Ctrl-C reaches the calling process only, which passes each SIGINT / SIGTERM on
    to every rank once. The ranks then stop as a one-process run does (the first signal after
    the round in progress, with a checkpoint; a second one at once).
    """
    fd, path = tempfile.mkstemp(prefix="fedlight-result-", suffix=".pt")
    os.close(fd)
    try:
        with ForwardSignals(), _quiet_process_group_setup():
            result = trainer.fabric.launch(_run_in_process, trainer, method, path, os.getpid(),
                                           *args)
        if torch.distributed.is_initialized():  # this process was a rank itself (ddp / torchrun)
            return result
        outcomes = [torch.load(p, map_location="cpu", weights_only=False)
                    for p in glob.glob(f"{path}.*")]
    finally:
        for name in [path, *glob.glob(f"{path}.*")]:
            os.unlink(name)
    failures = sorted((o for o in outcomes if o[0] == "error"), key=lambda o: o[1])
    if failures:
        raise failures[0][2]
    (_, value, attributes), = [o for o in outcomes if o[0] == "result"]
    for name, attribute in attributes.items():
        setattr(trainer, name, attribute)
    return value


#: Loggers of Fabric's process-group set-up lines ("Initializing distributed: GLOBAL_RANK...",
#: the "All distributed processes registered" banner): fedlight's own output says what runs.
#: The banner goes through Lightning's rank-zero logger, which is Fabric's or, once
#: lightning.pytorch is imported (the fedlight command imports it), PyTorch Lightning's.
PROCESS_GROUP_LOGGERS = ("lightning.fabric.utilities.distributed",
                         "lightning.fabric.utilities.rank_zero",
                         "lightning.pytorch.utilities.rank_zero")


@contextlib.contextmanager
def _quiet_process_group_setup() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in PROCESS_GROUP_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(max(logger.level, logging.WARNING))
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


class ForwardSignals(SignalScope):
    """While the ranks of a spawn / fork launch run, pass each SIGINT / SIGTERM the calling
    process receives on to them (they run in their own process groups, see :func:`launch`).
    Before any rank has started, a signal keeps its usual meaning."""

    def handle(self, signum: int, frame: FrameType | None) -> None:
        ranks = multiprocessing.active_children()
        if not ranks:
            previous = self.previous[signum]
            if callable(previous):
                previous(signum, frame)
            elif previous != signal.SIG_IGN:
                raise KeyboardInterrupt
            return
        for rank in ranks:
            with contextlib.suppress(ProcessLookupError):
                if rank.pid is not None:
                    os.kill(rank.pid, signum)


def _run_in_process(fabric: Fabric, trainer: Any, method: str, path: str, caller: int,
                    *args: Any) -> Any:
    started = os.getpid() != caller
    if started:  # signals reach this rank through the caller only (ForwardSignals)
        if hasattr(os, "setpgid"):
            os.setpgid(0, 0)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    trainer.fabric = fabric  # the launched (set-up) Fabric of this process
    try:
        value = getattr(trainer, method)(*args)
    except BaseException as error:
        if not started:
            raise
        # torch's worker wrapper swallows a KeyboardInterrupt (the rank then exits as if it
        # succeeded and the caller waits for a result forever) and turns other exceptions
        # into a traceback text: hand the exception itself to the caller instead.
        failed_at = time.time()
        error.add_note(f"(raised on rank {fabric.global_rank}:)\n{traceback.format_exc()}")
        _save_outcome(f"{path}.{fabric.global_rank}", ("error", failed_at, error))
        return None
    if fabric.global_rank != 0 or not started:
        return value
    # A spawned / forked rank 0 hands its results to the caller through a file: Fabric's
    # launcher reads its result pipe only after the workers exit (a result over the pipe's
    # 64 KiB blocks forever), and tensors on a multiprocessing queue are shared through file
    # descriptors that die with the worker.
    attributes = {name: _move(getattr(trainer, name), torch.device("cpu"))
                  for name in RETURNED_ATTRIBUTES if hasattr(trainer, name)}
    _save_outcome(f"{path}.0", ("result", value, attributes))
    return None


def _save_outcome(path: str, outcome: tuple[Any, ...]) -> None:
    # pickle's default protocol: torch.save's protocol 2 turns a FileNotFoundError into OSError
    try:
        torch.save(outcome, path, pickle_protocol=pickle.DEFAULT_PROTOCOL)
    except Exception:  # an exception that does not pickle: its type and text, as text
        if outcome[0] != "error":
            raise
        error = outcome[2]
        text = "".join(traceback.format_exception(error))
        torch.save(("error", outcome[1], RuntimeError(f"{type(error).__name__}: {error}\n{text}")),
                   path, pickle_protocol=pickle.DEFAULT_PROTOCOL)


__all__ = ["PRECISIONS", "STRATEGIES", "THREAD_RULES", "FederatedDDPStrategy", "apply_threads",
           "busy_cores", "check_precision", "check_scale_options", "check_threads", "cpu_cores",
           "devices_note", "idle_cores", "launch", "make_fabric", "needs_launch",
           "resolve_auto_devices"]
