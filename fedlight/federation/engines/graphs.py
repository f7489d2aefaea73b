"""A step captured once and replayed: CUDA graphs for the batched engine's static steps.

At batch 10 a small CNN's step is a few hundred short kernels whose launch cost, not their
arithmetic, sets a GPU's pace. A CUDA graph records the kernels of one call (forward,
backward, optimizer step, loss accumulation) and replays them with one launch; the replay
reads and writes the same addresses as the recorded call, so everything the step touches
lives at fixed addresses (the batched engine's workspace: stacked parameters, buffers,
optimizer state, input buffers filled with ``copy_``) and nothing in it reads a value on the
host.

:class:`ReplayedStep` runs a step eagerly for its first ``warmup`` calls (lazy state such as
SGD's momentum buffers is created there, on a side stream as CUDA requires), captures the
next call with a :data:`Capture` and replays from then on (a step that cannot be captured,
whatever the error, stays eager, the reason kept in ``failure`` and reported in one line; an
out-of-memory error is raised, so that the caller can make room). :func:`cuda_graph` is the CUDA
capture; :func:`eager_capture` "captures" by keeping the callable (what runs on a CPU and
what the tests use to check the same plumbing without a GPU).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

Capture = Callable[[Callable[[], None]], Callable[[], None]]


def eager_capture(step: Callable[[], None]) -> Callable[[], None]:
    """The step itself: a replay calls it again (no graph)."""
    return step


def cuda_graph(step: Callable[[], None]) -> Callable[[], None]:
    """Record ``step``'s kernels in a CUDA graph (without running them) and return its
    replay. Its tensors must stay at their addresses for as long as it is replayed."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


@contextlib.contextmanager
def side_stream(enabled: bool) -> Iterator[None]:
    """Run the block on a side CUDA stream (warm-up before a capture must not run on the
    stream that is captured later), ordered after and before the current stream's work."""
    if not enabled:
        yield
        return
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        yield
    torch.cuda.current_stream().wait_stream(stream)


class ReplayedStep:
    """Calls ``step`` eagerly ``warmup`` times, then captures it with ``capture`` and replays.

    Args:
        step: the step; it reads only tensors at fixed addresses.
        capture: how to capture it (None: every call runs eagerly).
        warmup: eager calls before the capture.
    """

    def __init__(self, step: Callable[[], None], capture: Capture | None,
                 warmup: int = 2, report: Callable[[str], None] | None = None) -> None:
        self.step, self.capture, self.warmup, self.report = step, capture, warmup, report
        self.calls = 0
        self.replays = 0  # calls served by the capture
        self.replay: Callable[[], None] | None = None
        self.failure: str | None = None  # why the capture failed (the step then stays eager)

    @property
    def captured(self) -> bool:
        return self.replay is not None

    def __call__(self) -> None:
        if self.replay is None and self.capture is not None and self.calls >= self.warmup:
            self._capture()
        if self.replay is not None:
            self.replay()
            self.replays += 1
        else:
            with side_stream(self.capture is cuda_graph):
                self.step()
        self.calls += 1

    def _capture(self) -> None:
        """Capture the step; where that fails the step stays eager and ``report`` hears the
        cause in one line. Running out of device memory is not such a failure: it is raised,
        for the caller to make room (the batched engine halves its group)."""
        assert self.capture is not None
        try:
            self.replay = self.capture(self.step)
        except torch.OutOfMemoryError:  # a RuntimeError: caught before the others
            raise
        except Exception as error:  # anything CUDA or torch cannot capture: stay eager
            self.capture, self.failure = None, one_line(error)
            if self.report is not None:
                self.report(self.failure)


def one_line(error: BaseException) -> str:
    """``error`` as one line: its type and the first line of its message."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


__all__ = ["Capture", "ReplayedStep", "cuda_graph", "eager_capture", "one_line", "side_stream"]
