"""``Dirichlet``: label skew with per-class shares over the clients drawn from Dir(beta)."""

from __future__ import annotations

import math

import numpy as np

from fedlight.core.errors import ConfigError
from fedlight.data.partitions.base import (
    Partition,
    by_class,
    cut,
    gather,
    require_min_client_size,
    sized_limit,
)

__all__ = ["Dirichlet"]

_MAX_DIRICHLET_ATTEMPTS = 1000


class Dirichlet(Partition):
    """Per class, shares over clients ~ Dir(beta) (Hsu et al. 2019, as in NIID-Bench and
    PFLlib, including their cap that stops a client already holding N/K samples from taking
    more), redrawn until every client has min_client_size samples.

    Args:
        beta: Dirichlet concentration; smaller is more skewed (0.1 in GPFL's protocol).
        min_client_size: least samples per client.
    """

    name = "dirichlet"

    def __init__(self, beta: float = 0.1, min_client_size: int = 10) -> None:
        require_min_client_size(min_client_size)
        self.beta = beta
        self.min_client_size = min_client_size

    def assign(self, labels: np.ndarray, k: int, rng: np.random.Generator,
               ids: np.ndarray | None) -> list[np.ndarray]:
        if not (math.isfinite(self.beta) and self.beta > 0):
            raise ConfigError(f"beta={self.beta} is invalid for the dirichlet partition; "
                              "use beta > 0")
        n = len(labels)
        if self.min_client_size * k > n:
            raise ConfigError(
                f"min_client_size={self.min_client_size} x num_clients={k} needs more than the {n} "
                f"samples; use at most {n // self.min_client_size} clients or lower min_client_size"
            )
        classes = by_class(labels, rng)
        for _ in range(_MAX_DIRICHLET_ATTEMPTS):
            counts = _dirichlet_counts([len(c) for c in classes], k, self.beta, rng)
            if counts.sum(axis=0).min() >= self.min_client_size:
                pieces = [
                    (client, piece)
                    for idx, row in zip(classes, counts, strict=True)
                    for client, piece in enumerate(cut(idx, row))
                ]
                return gather(pieces, k)
        raise ConfigError(
            f"the dirichlet partition found no draw giving every client at least "
            f"min_client_size={self.min_client_size} samples in {_MAX_DIRICHLET_ATTEMPTS} tries "
            f"(beta={self.beta}, num_clients={k}, {n} samples); raise beta, lower num_clients "
            "or lower min_client_size"
        )

    def client_limit(self, samples: int) -> str:
        return sized_limit(samples, self.min_client_size)


def _dirichlet_counts(
    class_sizes: list[int], k: int, beta: float, rng: np.random.Generator
) -> np.ndarray:
    """(classes, clients) sample counts: each class's shares ~ Dir(beta) over the clients
    still holding fewer than N/K samples."""
    n = sum(class_sizes)
    held = np.zeros(k, np.int64)
    rows = []
    for size in class_sizes:
        shares = rng.dirichlet(np.full(k, beta)) * (held < n / k)
        if not shares.sum() > 0:  # every open client drew ~0: share among them evenly
            shares = (held < n / k).astype(float)
        cuts = (np.cumsum(shares / shares.sum()) * size).astype(np.int64)
        cuts[-1] = size
        row = np.diff(cuts, prepend=0)
        held += row
        rows.append(row)
    return np.stack(rows)
