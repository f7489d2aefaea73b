"""Comparing metric tables (lists of per-round dicts) within a tolerance.

``pytest.approx`` takes one flat mapping of numbers: pytest 9.2 raises ``TypeError`` on a list
of dicts and on ``None`` values, so tables are compared row by row with the missing values apart.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest


def assert_same_rows(ours: Sequence[Mapping[str, Any]], theirs: Sequence[Mapping[str, Any]],
                     ignore: tuple[str, ...] = ("seconds",), **tolerance: float) -> None:
    """Same number of rows, same keys per row, ``None`` in the same places, numbers within
    ``tolerance`` (``rel`` / ``abs`` as for ``pytest.approx``)."""
    assert len(ours) == len(theirs), (len(ours), len(theirs))
    for index, (mine, other) in enumerate(zip(ours, theirs, strict=True)):
        mine = {k: v for k, v in mine.items() if k not in ignore}
        other = {k: v for k, v in other.items() if k not in ignore}
        assert mine.keys() == other.keys(), index
        missing = {key for key, value in other.items() if value is None}
        assert {key for key, value in mine.items() if value is None} == missing, index
        assert {k: v for k, v in mine.items() if k not in missing} == pytest.approx(
            {k: v for k, v in other.items() if k not in missing}, **tolerance), index
