"""Stopping a run cleanly on Ctrl-C (SIGINT) or SIGTERM.

While the round loop runs, the first SIGINT or SIGTERM only asks the run to stop: the round in
progress finishes, a checkpoint of the state after it is written, and the run stops with
``RunInterrupted``. A second signal stops at once (``KeyboardInterrupt`` mid-round; the state
in memory is then half a round, so no checkpoint is written and the last periodic one stays).
Outside the round loop, and outside the main thread, signals keep their usual meaning.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType
from typing import Any, Self

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunInterrupted(KeyboardInterrupt):
    """The run stopped at a round boundary on request; ``rounds_done`` rounds are saved."""

    def __init__(self, rounds_done: int) -> None:
        super().__init__(f"interrupted after round {rounds_done}")
        self.rounds_done = rounds_done

    def __reduce__(self) -> tuple[Any, ...]:  # pickled by a rank for the launching process
        return type(self), (self.rounds_done,), self.__dict__


class SignalScope:
    """Context manager handling SIGINT / SIGTERM with :meth:`handle` while it is entered, in the
    main thread (elsewhere, and outside it, signals keep their usual meaning); the previous
    handlers (``self.previous``) come back on exit."""

    def __init__(self) -> None:
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> Self:
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self.handle) for s in SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for number, handler in self.previous.items():
            signal.signal(number, handler)
        self.previous = {}

    def handle(self, signum: int, frame: FrameType | None) -> None:
        raise NotImplementedError


class StopSignals(SignalScope):
    """Context manager turning the first SIGINT / SIGTERM into ``requested = True``.

    Args:
        announce: print one line on stderr when the first signal arrives.
    """

    def __init__(self, announce: bool = True) -> None:
        super().__init__()
        self.announce = announce
        self.requested = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        if self.announce:
            print(f"fedlight: {signal.Signals(signum).name} received: finishing this round and "
                  "saving a checkpoint (send it again to stop at once)", file=sys.stderr,
                  flush=True)


__all__ = ["RunInterrupted", "SignalScope", "StopSignals"]
