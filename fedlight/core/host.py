"""The machine a process runs on, as far as every part of fedlight needs to know it."""

from __future__ import annotations

import os


def cpu_cores() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


__all__ = ["cpu_cores"]
