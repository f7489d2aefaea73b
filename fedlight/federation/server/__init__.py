"""Server rules: one file per rule, the orchestrator drives them through
ServerRule.

| rule | file | what it computes |
| --- | --- | --- |
| WeightedMean | mean.py | FedAvg's weighted mean (every method's default) |
| FedAvgM, FedAdam, FedYogi, FedAdagrad | fedopt.py | server optimizers |
| CoordinateMedian, TrimmedMean, Krum | robust.py | Byzantine-robust reductions |
| DPFedAvg | dp.py | client-level DP around any mean-type rule |

Method-specific rules (SCAFFOLD's control variates, FedDyn's h, FedProto's class means) live
in their method's file under fedlight/clients/.
"""

from __future__ import annotations

import copy

from fedlight.core.errors import ConfigError
from fedlight.federation.server.base import (
    Collectives,
    Report,
    ServerContext,
    ServerRule,
    SingleProcess,
)
from fedlight.federation.server.dp import DPFedAvg
from fedlight.federation.server.fedopt import FedAdagrad, FedAdam, FedAvgM, FedYogi
from fedlight.federation.server.mean import WeightedMean
from fedlight.federation.server.robust import CoordinateMedian, Krum, TrimmedMean


def resolve_rule(default: ServerRule, override: ServerRule | None, method: str) -> ServerRule:
    """The rule a run uses: the client's default, or a fresh copy of the config's override
    where the default accepts it (wrappers such as DP are put around the default). The copy
    keeps an override object that serves several runs (a config parsed once, a rule passed to
    fit twice) from carrying one run's state (momentum, moments, a wrapped rule) into the next.

    Raises:
        ValueError: the method's own rule cannot be replaced by override.
    """
    if override is None:
        return default
    rule = copy.deepcopy(override).wrap_default(default)
    if not default.accepts(rule):
        raise ConfigError(
            f"{method} aggregates with its own server rule {type(default).__name__}, which "
            f"server: {type(override).__name__} cannot replace; drop the server section or "
            f"use a {type(default).__name__} subclass")
    return rule


__all__ = ["Collectives", "CoordinateMedian", "DPFedAvg", "FedAdagrad", "FedAdam", "FedAvgM",
           "FedYogi", "Krum", "Report", "ServerContext", "ServerRule", "SingleProcess",
           "TrimmedMean", "WeightedMean", "resolve_rule"]
