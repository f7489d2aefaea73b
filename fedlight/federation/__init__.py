"""The orchestrator (``FederatedTrainer``), the local loop and the server rules.

The trainer is imported lazily: client classes import the server-rule base from here, and the
trainer imports the client base.
"""

from __future__ import annotations

from typing import Any

from fedlight.federation.aggregate import WeightedSum, aggregation_weight, weighted_mean
from fedlight.federation.sampling import derive_seed, sample_clients


def __getattr__(name: str) -> Any:
    if name == "FederatedTrainer":
        from fedlight.federation.trainer import FederatedTrainer

        return FederatedTrainer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["FederatedTrainer", "WeightedSum", "aggregation_weight", "derive_seed",
           "sample_clients", "weighted_mean"]
