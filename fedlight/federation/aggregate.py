"""Server rules as pure functions on state dicts.

The default server rule of every method is the weighted mean of the shared partition. It is
computed as a running weighted sum (:class:`WeightedSum`), so the server holds one model's worth
of memory however many clients report, and so partial sums from several processes can simply
be added before the division.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

WEIGHTINGS = ("samples", "uniform")


# Everything is summed in float64: integer buffers (BatchNorm's num_batches_tracked) and half
# precision get an exact enough mean, and a single client's state comes back bit for bit
# (w * n / n is exact in float64 for a float32 w). The mean is cast back to each dtype.
ACCUMULATOR_DTYPE = torch.float64


class WeightedSum:
    """Running ``sum_i w_i * state_i`` and ``sum_i w_i`` over the states added so far."""

    def __init__(self) -> None:
        self.sums: dict[str, Tensor] = {}
        self.dtypes: dict[str, torch.dtype] = {}
        self.total_weight = 0.0
        self.count = 0

    def add(self, state: Mapping[str, Tensor], weight: float) -> None:
        if weight < 0:
            raise ValueError(f"aggregation weight must be non-negative, got {weight}")
        if self.count and set(state) != set(self.sums):
            raise ValueError("all aggregated states must have the same keys")
        for key, tensor in state.items():
            if key not in self.sums:
                self.sums[key] = torch.zeros(tensor.shape, dtype=ACCUMULATOR_DTYPE,
                                             device=tensor.device)
                self.dtypes[key] = tensor.dtype
            # One fused multiply-add with dtype promotion: no float64 copy of the state (as
            # fast as a copy + same-dtype add on CPU with torch 2.15, 1.5x faster than the
            # copy + mul_ + add_ it replaces).
            self.sums[key].add_(tensor.detach(), alpha=weight)
        self.total_weight += weight
        self.count += 1

    def mean(self) -> dict[str, Tensor]:
        """The weighted mean, each tensor in its original dtype (integers rounded)."""
        if self.count == 0:
            return {}
        if self.total_weight <= 0:
            raise ValueError("aggregation weights sum to zero")
        return {k: _cast(v / self.total_weight, self.dtypes[k]) for k, v in self.sums.items()}


def _cast(tensor: Tensor, dtype: torch.dtype) -> Tensor:
    if dtype.is_floating_point:
        return tensor.to(dtype)
    return tensor.round().to(dtype)


def weighted_mean(
    states: Sequence[Mapping[str, Tensor]], weights: Sequence[float]
) -> dict[str, Tensor]:
    """Weighted mean of state dicts with identical keys; weights need not be normalized."""
    if len(states) != len(weights):
        raise ValueError(f"{len(states)} states but {len(weights)} weights")
    total = WeightedSum()
    for state, weight in zip(states, weights, strict=True):
        total.add(state, weight)
    return total.mean()


def aggregation_weight(samples: float, weighting: str) -> float:
    """A report's weight in the server rule's reduction under trainer.weighting: the client's
    training sample count (samples), or 1 (uniform)."""
    if weighting == "samples":
        return float(samples)
    if weighting == "uniform":
        return 1.0
    raise ValueError(f"unknown weighting {weighting!r}; valid: {', '.join(WEIGHTINGS)}")


def state_bytes(state: Mapping[str, object]) -> int:
    """Bytes a message of tensors (nested in dicts / lists) takes on the wire."""
    total = 0
    for value in state.values():
        if isinstance(value, Tensor):
            total += value.numel() * value.element_size()
        elif isinstance(value, Mapping):
            total += state_bytes(value)
        elif isinstance(value, (list, tuple)):
            total += state_bytes({str(i): v for i, v in enumerate(value)})
    return total
