"""``IID``: shuffle the samples and deal them out evenly."""

from __future__ import annotations

import numpy as np

from fedlight.data.partitions.base import Partition

__all__ = ["IID"]


class IID(Partition):
    """Shuffle and deal out evenly: every client gets N / K samples (within one), classes mixed
    as in the whole data.
    """

    name = "iid"

    def assign(self, labels: np.ndarray, k: int, rng: np.random.Generator,
               ids: np.ndarray | None) -> list[np.ndarray]:
        return np.array_split(rng.permutation(len(labels)), k)
