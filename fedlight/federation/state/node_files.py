"""A Flower SuperNode's client state between rounds, kept on the node's disk.

After each round the node writes what its client carries to the next round (its private
partition, its optimizer state under ``optimizer_state: persist``, its participation count;
:meth:`~fedlight.federation.population.Population.snapshot`) to
``<folder>/round-<r>.pt`` and reads it back before the next message, so a restarted SuperNode
keeps its personalization. Each round's state is its own file, so a run resumed from an
earlier checkpoint restarts the client from its state as of that round; files no resume can
need any more are deleted. Files are written with fedlight.core.files.atomic_write, the write
of checkpoints (temporary file, fsync, rename, fsync of the folder).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

import torch

from fedlight.core.errors import ConfigError
from fedlight.core.files import atomic_write

ROUND_FILE = re.compile(r"round-(\d+)\.pt")


class NodeStateFiles:
    """One client's states on a node's disk, one file per round.

    Args:
        folder: the client's state folder (created when missing).
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder).expanduser()

    def file(self, round_idx: int) -> Path:
        return self.folder / f"round-{round_idx}.pt"

    def rounds(self) -> list[int]:
        """The rounds whose state this node holds, oldest first."""
        if not self.folder.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.folder.iterdir()
                      if (m := ROUND_FILE.fullmatch(p.name)))

    def save(self, round_idx: int, keep_from: int, snapshot: dict[str, Any]) -> None:
        """Write the state after ``round_idx``, then delete the states no resume from round
        ``keep_from`` or later can need."""
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write(self.file(round_idx), lambda stream: torch.save(snapshot, stream))
        saved = self.rounds()
        needed = max((r for r in saved if r < keep_from), default=None)
        for old in saved:
            if needed is not None and old < needed:
                self.file(old).unlink(missing_ok=True)

    def load(self, before: int, private_keys: Collection[str]) -> dict[str, Any] | None:
        """The newest state written for a round before ``before`` (None when there is none).

        Raises:
            ConfigError: the file holds another model's private state (``private_keys``).
        """
        rounds = [r for r in self.rounds() if r < before]
        if not rounds:
            return None
        file = self.file(rounds[-1])
        snapshot: dict[str, Any] = torch.load(file, map_location="cpu", weights_only=False)
        if set(snapshot["private"]) != set(private_keys):
            raise ConfigError(f"{file} holds the private state of another model (keys "
                              f"{sorted(snapshot['private'])[:3]}...); give this run its own "
                              "state-dir")
        return snapshot


__all__ = ["NodeStateFiles"]
