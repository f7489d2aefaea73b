"""The cache of decoded files: arrays saved once under the user cache folder, written whole
or not at all (see ``fedlight.data.sources.images`` for what is cached and how it is keyed).

``$FEDLIGHT_CACHE`` when set, else ``$XDG_CACHE_HOME/fedlight`` or ``~/.cache/fedlight``; a
file is written under a temporary name and renamed when complete, and inside
`cache_writes_on_success` (every ``Source.load``) only once the whole source has loaded.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from fedlight.core.files import atomic_write

__all__ = ["FORMAT_VERSION", "cache_folder", "cache_writes_on_success", "cached", "content_key"]

FORMAT_VERSION = 1  # bump when the decoded bytes change for the same files


def cache_folder() -> Path:
    """Where decoded images are cached (see the module docstring)."""
    if os.environ.get("FEDLIGHT_CACHE"):
        return Path(os.environ["FEDLIGHT_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "fedlight"


def content_key(paths: Sequence[str], extra: str = "") -> str:
    """Hash of the file list, each file's size and modification time, and `extra`."""
    digest = hashlib.sha256(f"{FORMAT_VERSION}:{extra}".encode())
    for path in paths:
        stat = os.stat(path)
        digest.update(f"\0{path}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:20]


#: Cache files held back by the innermost `cache_writes_on_success` block (None outside one).
_PENDING: contextvars.ContextVar[list[tuple[Path, dict[str, np.ndarray]]] | None] = (
    contextvars.ContextVar("fedlight_pending_cache_writes", default=None))


@contextlib.contextmanager
def cache_writes_on_success() -> Iterator[None]:
    """Hold back the cache files `cached` builds inside the block; write them when it ends
    without an error (a nested block joins the outer one)."""
    if _PENDING.get() is not None:
        yield
        return
    pending: list[tuple[Path, dict[str, np.ndarray]]] = []
    token = _PENDING.set(pending)
    try:
        yield
    finally:
        _PENDING.reset(token)
    for target, arrays in pending:
        _write_cache(target, arrays)


def cached(name: str, build: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The arrays cached as ``<cache folder>/images/<name>.npz``, built (and cached) when absent.

    The file is written under a temporary name and renamed when complete: readers never see
    a half file; inside `cache_writes_on_success` it is written when that block ends well. A
    cache that cannot be written (read-only home) only costs the next run a rebuild.
    """
    target = cache_folder() / "images" / f"{name}.npz"
    if target.is_file():
        with np.load(target) as archive:
            return {key: archive[key] for key in archive.files}
    arrays = build()
    pending = _PENDING.get()
    if pending is not None:
        pending.append((target, arrays))
    else:
        _write_cache(target, arrays)
    return arrays


def _write_cache(target: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write `arrays` to `target` atomically (skipped where the folder cannot be written)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    if os.access(target.parent, os.W_OK):
        atomic_write(target, lambda stream: np.savez(stream, **arrays))
