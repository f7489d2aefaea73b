"""Running a sweep's planned cells, ``jobs`` at a time, each in a process of its own; a cell with
a record is finished and never runs again."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

import yaml

from fedlight.core.files import atomic_write
from fedlight.federation.outputs.progress import Clock, eta
from fedlight.sweep import runner
from fedlight.sweep.plan import Planned


def process_context() -> Any:
    """The multiprocessing context cells run in: fork where the platform has it (a cell's
    process starts without importing fedlight again), spawn elsewhere."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def exit_with_parent(parent: int) -> None:
    """In a cell's process: stop at once when the sweep's process is gone (killed), as a
    killed run stops, so that a resumed sweep never runs a cell beside an orphaned one."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def prepare(item: Planned) -> bool | None:
    """None when the cell is finished (a record exists); else whether to resume it from its
    checkpoint. A folder left without a checkpoint (stopped in its first rounds) is removed."""
    if item.record.is_file():
        return None
    item.runs.mkdir(parents=True, exist_ok=True)
    if (item.folder / "checkpoints" / "last.ckpt").is_file():
        return True
    shutil.rmtree(item.folder, ignore_errors=True)
    item.config_file.write_text(yaml.safe_dump(item.config, sort_keys=False))
    return False


def finish(item: Planned, result: dict[str, Any], note: str = "") -> None:
    """Write the cell's record (atomically: a record means the cell is done) and print its
    line (with ``note`` before its times or error)."""
    record = json.dumps({"cell": item.cell.label, **result}, indent=1)
    atomic_write(item.record, lambda stream: stream.write(record.encode()))
    status = f"failed: {result['error']}" if result["error"] else (
        f"{result['wall']:.0f} s wall, {result['cpu']:.0f} s CPU")
    print(f"  {item.cell.label}: {note + '; ' if note else ''}{status}", flush=True)


def announce_crash(running: int) -> None:
    """Say on stderr that a run crashed and the sweep stops once the ``running`` cells have
    finished (their records are written, so that a resumed sweep skips them)."""
    print(f"sweep: a run crashed; stopping after the {running} still running", file=sys.stderr,
          flush=True)


class SweepProgress:
    """The line printed as each of ``total`` runs (or trials) ends: how many are done, running
    and left, and the ETA at the pace of those done so far (parallel runs included).

    Args:
        total: the runs to run in this process.
        prefix: what the line starts with (``sweep``, ``search <study>``).
        noun: what is counted (runs, trials).
        clock: seconds.
    """

    def __init__(self, total: int, prefix: str = "sweep", noun: str = "runs",
                 clock: Clock = time.perf_counter) -> None:
        self.total, self.prefix, self.noun, self.clock = total, prefix, noun, clock
        self.started = clock()

    def line(self, done: int, running: int) -> str:
        left = max(self.total - done - running, 0)
        return (f"{self.prefix}: {done} of {self.total} {self.noun} done, {running} running, "
                f"{left} left, {eta(self.clock() - self.started, done, running + left)}")

    def report(self, done: int, running: int) -> None:
        print(self.line(done, running), flush=True)


def run_cells(planned: Sequence[Planned], jobs: int, resume_command: str | None = None,
              clock: Clock = time.perf_counter) -> int:
    """Run every unfinished cell, ``jobs`` at a time, with a progress line as each ends;
    returns how many ran. ``resume_command`` is what a stopped cell says resumes it."""
    todo = []
    for item in planned:
        resume = prepare(item)
        if resume is not None:
            todo.append((item, resume))
    print(f"sweep: {len(planned)} runs, {len(planned) - len(todo)} cached, {len(todo)} to run "
          f"({jobs} at a time)", flush=True)
    progress = SweepProgress(len(todo), clock=clock)
    if jobs == 1:
        for done, (item, resume) in enumerate(todo, 1):
            finish(item, runner.run_cell(str(item.config_file), resume, resume_command))
            progress.report(done, 0)
        return len(todo)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=process_context(),
                             initializer=exit_with_parent, initargs=(os.getpid(),)) as pool:
        # The pool gets a cell only when a worker is free: a cell already handed to the pool
        # cannot be cancelled, so on Ctrl-C the workers would start such cells after saving
        # the interrupted ones, and the sweep would go on running.
        waiting = iter(todo)
        futures: dict[Future, Planned] = {}

        def hand_over(count: int) -> None:
            for item, resume in itertools.islice(waiting, count):
                futures[pool.submit(runner.run_cell, str(item.config_file), resume,
                                    resume_command)] = item

        hand_over(jobs)
        crash: BaseException | None = None
        ended = 0
        while futures:
            done, _ = wait(futures, return_when=FIRST_COMPLETED)
            for future in done:
                item, failure = futures.pop(future), future.exception()
                if failure is None:
                    finish(item, future.result())
                    ended += 1
                else:
                    crash = crash or failure
                    announce_crash(len(futures))
            if crash is None:
                hand_over(len(done))
                progress.report(ended, len(futures))
        # A cell that crashed (not a user error: that is a failed cell's record) stops the
        # sweep, but only after the cells already running have finished and been recorded:
        # a finished run without its record could not be resumed (nothing left to train).
        if crash is not None:
            raise crash
    return len(todo)
