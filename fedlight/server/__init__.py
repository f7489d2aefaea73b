"""Server rules: one file per rule, each a fedlight.core.rules.ServerRule the round protocol
drives.

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

from fedlight.server.dp import DPFedAvg
from fedlight.server.fedopt import FedAdagrad, FedAdam, FedAvgM, FedYogi
from fedlight.server.mean import WeightedMean
from fedlight.server.robust import CoordinateMedian, Krum, TrimmedMean

__all__ = ["CoordinateMedian", "DPFedAvg", "FedAdagrad", "FedAdam", "FedAvgM", "FedYogi", "Krum",
           "TrimmedMean", "WeightedMean"]
