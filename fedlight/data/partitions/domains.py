"""``Domains``: one domain of a cross-domain source per client."""

from __future__ import annotations

import numpy as np

from fedlight.core.errors import ConfigError
from fedlight.data.partitions.base import Partition, required_ids

__all__ = ["Domains"]


class Domains(Partition):
    """One domain per client; with more clients than domains, each domain is split IID among
    num_clients / num_domains clients (FedPick's natural partition). Needs a source that
    records a domain per sample.
    """

    name = "domains"
    ids = "domain"

    def assign(self, labels: np.ndarray, k: int, rng: np.random.Generator,
               ids: np.ndarray | None) -> list[np.ndarray]:
        domains = required_ids("domains", "a domain id", "domains", ids, labels)
        ids = np.unique(domains)
        if k % len(ids):
            raise ConfigError(
                f"num_clients={k} is invalid for the domains partition: the data has {len(ids)} "
                f"domains, so use a multiple of {len(ids)} (one or more clients per domain)"
            )
        per_domain = k // len(ids)
        parts = []
        for d in ids:
            idx = rng.permutation(np.flatnonzero(domains == d))
            if len(idx) < per_domain:
                raise ConfigError(
                    f"domain {d} has {len(idx)} samples, fewer than its {per_domain} clients "
                    f"(num_clients={k}); lower num_clients"
                )
            parts += np.array_split(idx, per_domain)
        return parts
