"""The error of a bad sweep file, and the check every part of a sweep file's reading shares
(in a module of its own: the sweep file's reader and its search section's reader both use
them, and neither imports the other)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedlight.core.errors import ConfigError


class SweepError(ConfigError):
    """A bad sweep file or command line (one line, naming the bad value and what is valid)."""


def mapping(value: Any, what: str) -> dict[str, Any]:
    """``value`` as a dict (None: empty), or SweepError naming ``what``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SweepError(f"{what} must be a mapping, got {value!r}")
    return dict(value)
