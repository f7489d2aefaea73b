"""``Shards``: label-sorted shards dealt out at random (McMahan et al. 2017)."""

from __future__ import annotations

import numpy as np

from fedlight.core.errors import ConfigError
from fedlight.data.partitions.base import Partition, require_positive_int

__all__ = ["Shards"]


class Shards(Partition):
    """Sort by label, cut into num_clients * shards_per_client shards, deal shards_per_client
    random shards to each client (McMahan et al. 2017).

    Args:
        shards_per_client: label-sorted shards each client gets.
    """

    name = "shards"

    def __init__(self, shards_per_client: int = 2) -> None:
        self.shards_per_client = shards_per_client

    def assign(self, labels: np.ndarray, k: int, rng: np.random.Generator,
               ids: np.ndarray | None) -> list[np.ndarray]:
        require_positive_int("shards_per_client", self.shards_per_client)
        num_shards = k * self.shards_per_client
        if num_shards > len(labels):
            raise ConfigError(
                f"num_clients={k} x shards_per_client={self.shards_per_client} = {num_shards} "
                f"shards exceeds the {len(labels)} samples; lower shards_per_client or num_clients"
            )
        shuffled = rng.permutation(len(labels))  # random order inside each label
        by_label = shuffled[np.argsort(labels[shuffled], kind="stable")]
        shards = np.array_split(by_label, num_shards)  # sizes differ by at most one
        dealt = rng.permutation(num_shards).reshape(k, self.shards_per_client)
        return [np.concatenate([shards[s] for s in row]) for row in dealt]
