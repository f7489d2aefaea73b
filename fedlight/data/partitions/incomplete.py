"""``Incomplete``: random class subsets and LogNormal client sizes (MAP's partition)."""

from __future__ import annotations

import math

import numpy as np

from fedlight.core.errors import ConfigError
from fedlight.data.partitions.base import (
    Partition,
    by_class,
    cut,
    gather,
    proportional_counts,
    require_min_client_size,
    sized_limit,
)

__all__ = ["Incomplete"]


class Incomplete(Partition):
    """Each client holds a random k in {2..C} classes and a LogNormal(0, size_sigma) size
    factor; each class is split among its holders in proportion to their size factors (MAP).

    Args:
        size_sigma: sigma of the LogNormal client size factors.
        min_client_size: least samples per client.
    """

    name = "incomplete"

    def __init__(self, size_sigma: float = 0.3, min_client_size: int = 10) -> None:
        require_min_client_size(min_client_size)
        self.size_sigma = size_sigma
        self.min_client_size = min_client_size

    def assign(self, labels: np.ndarray, k: int, rng: np.random.Generator,
               ids: np.ndarray | None) -> list[np.ndarray]:
        classes = by_class(labels, rng)
        if len(classes) < 2:
            raise ConfigError(
                f"the incomplete partition needs at least 2 classes; the labels hold {len(classes)}"
            )
        if not (math.isfinite(self.size_sigma) and self.size_sigma >= 0):
            raise ConfigError(f"size_sigma={self.size_sigma} is invalid; use size_sigma >= 0")
        holders = _random_class_sets(len(classes), k, rng)
        size = rng.lognormal(0.0, self.size_sigma, k)
        pieces = []
        for c, (idx, owners) in enumerate(zip(classes, holders, strict=True)):
            if len(idx) < len(owners):
                raise ConfigError(
                    f"class {c} has {len(idx)} samples but {len(owners)} clients hold it in the "
                    f"incomplete partition (num_clients={k}); lower num_clients"
                )
            counts = 1 + proportional_counts(len(idx) - len(owners), size[owners])
            pieces += zip(owners, cut(idx, counts), strict=True)
        parts = gather(pieces, k)
        _check_min_size(parts, self.min_client_size)
        return parts

    def client_limit(self, samples: int) -> str:
        return sized_limit(samples, self.min_client_size)


def _random_class_sets(num_classes: int, k: int, rng: np.random.Generator) -> list[list[int]]:
    """Each client takes a random k in {2..C} classes; a class nobody took goes to a random
    client (who then holds k + 1 <= C). Returns the holders of each class."""
    holders: list[list[int]] = [[] for _ in range(num_classes)]
    for client in range(k):
        count = rng.integers(2, num_classes + 1)
        for c in rng.choice(num_classes, size=count, replace=False):
            holders[c].append(client)
    for owners in holders:
        if not owners:
            owners.append(int(rng.integers(k)))
    return [sorted(owners) for owners in holders]


def _check_min_size(parts: list[np.ndarray], minimum: int) -> None:
    sizes = [len(p) for p in parts]
    smallest = int(np.argmin(sizes))
    if sizes[smallest] < minimum:
        raise ConfigError(
            f"the incomplete partition gave client {smallest} only {sizes[smallest]} samples, "
            f"fewer than min_client_size={minimum}; lower num_clients={len(parts)}, "
            "min_client_size or size_sigma, or try another seed"
        )
