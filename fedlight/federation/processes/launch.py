"""Starting the processes of a multi-process run (Fabric's launchers) and bringing rank 0's
result back to the calling process."""

from __future__ import annotations

import atexit
import contextlib
import glob
import logging
import multiprocessing
import os
import pickle
import signal
import tempfile
import time
import traceback
from collections.abc import Iterator
from types import FrameType
from typing import Any

import torch
from lightning.fabric import Fabric

from fedlight.core.rules import move
from fedlight.federation.processes.signals import SignalScope


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
    leave_process_group_at_exit()
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
    attributes = {name: move(getattr(trainer, name), torch.device("cpu"))
                  for name in RETURNED_ATTRIBUTES if hasattr(trainer, name)}
    _save_outcome(f"{path}.0", ("result", value, attributes))
    return None


def leave_process_group_at_exit() -> None:
    """Destroy this rank's process group when its interpreter exits (once, however many runs
    the process starts). A rank that exits with gloo's process group still alive (after a run,
    or on ``error: ...`` and exit code 2) can be killed by SIGABRT ("terminate called without
    an active exception") while the interpreter tears down gloo's threads; atexit runs while
    the interpreter is still whole."""
    atexit.unregister(_destroy_process_group)
    atexit.register(_destroy_process_group)


def _destroy_process_group() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


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


__all__ = ["RETURNED_ATTRIBUTES", "ForwardSignals", "launch", "needs_launch"]
