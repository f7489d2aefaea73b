"""The one way fedlight writes a file that must never be seen half-written: checkpoints, the
run folder's files, the Flower nodes' client states, data caches and sweep records; and how a
number of the CSV files it writes is read back (:func:`csv_number`).

``atomic_write`` writes into a temporary file beside the target, flushes and fsyncs it, renames
it over the target and fsyncs the folder, so a crash or power cut leaves either the old file or
the new one, whole. Each writer has a temporary file of its own, so processes writing the same
file at once (a sweep's runs building one data cache) never rename each other's file: the
last rename wins, and every writer writes the same bytes there. On any failure the temporary
file is removed and the target is untouched; a full disk is reported as
:class:`~fedlight.core.errors.DiskFullError` naming the folder.
"""

from __future__ import annotations

import errno
import math
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from fedlight.core.errors import DiskFullError

#: errno values that mean "no space left": the disk, or the user's quota on it.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class _RecordingStream:
    """A binary file that remembers the OSError its last write raised: torch.save reports a
    failed write as a RuntimeError of its own, without the errno that says the disk is full."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle = handle
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self.handle.write(data)
        except OSError as error:
            self.error = error
            raise

    def __getattr__(self, name: str) -> Any:  # flush, seek, tell... of the file itself
        return getattr(self.handle, name)


def atomic_write(path: str | Path, write: Callable[[Any], object]) -> None:
    """Write ``path`` through ``write(stream)`` (a binary file object) atomically and durably.

    Raises:
        DiskFullError: the disk holding ``path`` has no space left (nothing was changed).
    """
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    stream = None
    try:
        with open(temporary, "xb") as handle:
            stream = _RecordingStream(handle)
            write(stream)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        temporary.unlink(missing_ok=True)
        cause = error if isinstance(error, OSError) else getattr(stream, "error", None)
        if cause is not None and cause.errno in DISK_FULL:
            raise DiskFullError(
                f"the disk holding {str(path.parent)!r} is full: {path.name} was "
                "not written (the previous version is intact); free some space and resume"
            ) from error
        raise
    fsync_folder(path.parent)


def fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (where the platform can open a folder)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:  # Windows cannot open a folder; its renames are durable once done
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def csv_number(cell: str | None) -> float:
    """A cell of a CSV file fedlight wrote (``metrics.csv``, ``per_client_rounds.csv``, a
    sweep's ``runs.csv``) as a number: NaN for an empty cell (a run writes a value that is not
    finite as one), a cell the row lacks (None) and text that is not a number."""
    if cell is None:
        return math.nan
    try:
        return float(cell)
    except ValueError:
        return math.nan


__all__ = ["DISK_FULL", "atomic_write", "csv_number", "fsync_folder"]
