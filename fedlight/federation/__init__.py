"""The orchestrator (``FederatedTrainer``) and the server rules."""

from fedlight.federation.aggregate import WeightedSum, aggregation_weights, weighted_mean
from fedlight.federation.trainer import FederatedTrainer, derive_seed, sample_clients

__all__ = ["FederatedTrainer", "WeightedSum", "aggregation_weights", "derive_seed",
           "sample_clients", "weighted_mean"]
