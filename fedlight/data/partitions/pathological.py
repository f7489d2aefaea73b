"""``Pathological``: a few classes per client (FedAvg's pathological non-IID split, PFLlib's)."""

from __future__ import annotations

import numpy as np

from fedlight.core.errors import ConfigError
from fedlight.data.partitions.base import Partition, by_class, cut, gather

__all__ = ["Pathological"]

#: PFLlib's ``least_samples`` bound: one test batch of 10 at its 75 / 25 split (10 / 0.25)
_PFLLIB_LEAST_SAMPLES = 40


class Pathological(Partition):
    """classes_per_client classes per client, each class used by as many clients as the others
    (within one), its samples split evenly among them (FedAvg; PFLlib's balance=True), or with
    balanced=false in random shares as PFLlib's generators do by default (separate_data,
    balance=False): each holder but the last of a class gets a uniform random integer in
    [max(n / h / 10, least / C), n / h) of its n samples (h holders, C classes, least =
    min(40, N / K / 2), PFLlib's at least one test batch of 10 at a 75 / 25 split), the last
    holder the rest.

    Args:
        classes_per_client: classes each client holds.
        balanced: true (default) splits each class evenly among the clients holding it
            (FedAvg's shards); false gives each holder a random share, as PFLlib's generators
            do (balance=False, their default; GPFL's protocol).
    """

    name = "pathological"

    def __init__(self, classes_per_client: int = 2, balanced: bool = True) -> None:
        self.classes_per_client = classes_per_client
        self.balanced = balanced

    def assign(self, labels: np.ndarray, k: int, rng: np.random.Generator,
               ids: np.ndarray | None) -> list[np.ndarray]:
        classes = by_class(labels, rng)
        m = self.classes_per_client
        if int(m) != m or not 1 <= m <= len(classes):
            raise ConfigError(
                f"classes_per_client={m} is invalid; the labels hold {len(classes)} classes, "
                f"so use 1..{len(classes)}"
            )
        holders = _assign_classes(len(classes), k, m, rng)
        pieces = []
        for c, (idx, owners) in enumerate(zip(classes, holders, strict=True)):
            if len(idx) < len(owners):
                raise ConfigError(
                    f"class {c} has {len(idx)} samples but {len(owners)} clients must hold it "
                    f"(classes_per_client={m}, num_clients={k}); lower num_clients or "
                    "classes_per_client"
                )
            if not owners:  # with num_clients * classes_per_client < C some classes go unused
                continue
            if self.balanced:
                pieces += zip(owners, np.array_split(idx, len(owners)), strict=True)
            else:
                least = int(min(_PFLLIB_LEAST_SAMPLES, len(labels) / k / 2)) / len(classes)
                pieces += zip(owners, cut(idx, _random_shares(len(idx), len(owners), least, rng)),
                              strict=True)
        return gather(pieces, k)


def _random_shares(n: int, holders: int, least: float, rng: np.random.Generator) -> np.ndarray:
    """PFLlib's unequal shares of a class's `n` samples among `holders` clients: each but the
    last draws an integer in [max(n / holders / 10, least), n / holders) (bounds truncated to
    integers as ``np.random.randint`` does, and at least 1), the last takes the rest; a class
    too small for that range is split evenly."""
    mean = n / holders
    low, high = max(1, int(max(mean / 10, least))), int(mean)
    if holders == 1 or low >= high:
        return np.array([len(p) for p in np.array_split(np.arange(n), holders)])
    drawn = rng.integers(low, high, holders - 1)
    return np.append(drawn, n - drawn.sum())


def _assign_classes(num_classes: int, k: int, m: int, rng: np.random.Generator) -> list[list[int]]:
    """Give each client `m` distinct classes, always among the least used so far (random
    ties), so class usage differs by at most one. Returns the holders of each class."""
    used = np.zeros(num_classes, np.int64)
    holders: list[list[int]] = [[] for _ in range(num_classes)]
    for client in range(k):
        chosen = np.lexsort((rng.random(num_classes), used))[:m]
        used[chosen] += 1
        for c in chosen:
            holders[c].append(client)
    return holders
