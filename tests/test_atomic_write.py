"""fedlight.core.files.atomic_write: whole files only, also when writers race."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedlight.core.files import atomic_write


def test_two_writers_of_one_file_at_once_both_succeed_and_leave_one_whole_file(tmp_path):
    """A second writer starts and finishes while the first is writing (two sweep runs
    building one data cache): neither may lose its temporary file to the other."""
    target = tmp_path / "cache.npz"

    def first_writer(stream) -> None:
        stream.write(b"first half, ")
        atomic_write(target, lambda other: other.write(b"the other writer's bytes"))
        stream.write(b"second half")

    atomic_write(target, first_writer)
    assert target.read_bytes() == b"first half, second half"
    assert [p.name for p in tmp_path.iterdir()] == ["cache.npz"]


def test_a_failed_write_leaves_the_previous_file_and_no_temporary_file(tmp_path: Path):
    target = tmp_path / "record.json"
    target.write_bytes(b"previous")

    def failing(stream) -> None:
        stream.write(b"part")
        raise ValueError("the writer failed")

    with pytest.raises(ValueError, match="the writer failed"):
        atomic_write(target, failing)
    assert target.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]
