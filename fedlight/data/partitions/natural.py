"""``Natural``: one client per writer / user / subject of a source that records them."""

from __future__ import annotations

import numpy as np

from fedlight.core.errors import ConfigError
from fedlight.data.partitions.base import Partition, required_ids

__all__ = ["Natural"]


class Natural(Partition):
    """One client per group of a source that records who made each sample (the writer of a
    LEAF FEMNIST character, a play role, a subject): every sample of a group goes to its
    client. With fewer clients than groups, num_clients groups are drawn at random (the
    papers' sampling of writers); the local train/test cut is the data module's
    train_fraction (0.8 for the papers' 80/20).
    """

    name = "natural"
    ids = "group"

    def assign(self, labels: np.ndarray, k: int, rng: np.random.Generator,
               ids: np.ndarray | None) -> list[np.ndarray]:
        groups = required_ids("natural", "a group (writer, user) id", "groups", ids,
                              labels)
        ids = np.unique(groups)
        if k > len(ids):
            raise ConfigError(
                f"num_clients={k} exceeds the {len(ids)} groups (writers / users) of the data; "
                f"the natural partition has one client per group, so use at most {len(ids)}"
            )
        chosen = ids if k == len(ids) else np.sort(rng.choice(ids, size=k, replace=False))
        order = np.argsort(groups, kind="stable")
        starts = np.searchsorted(groups[order], chosen)
        ends = np.searchsorted(groups[order], chosen, side="right")
        return [order[a:b] for a, b in zip(starts, ends, strict=True)]
