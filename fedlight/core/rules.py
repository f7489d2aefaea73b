"""The server-rule contract: what the orchestrator asks of the server side each round, and the
weighted sums mean-type rules reduce reports with.

A rule owns the server's state: the global shared state, the message broadcast with it (teacher
models, control variates, prototypes...) and whatever it keeps between rounds (momentum, Adam
moments, SCAFFOLD's control variate, FedDyn's h). Each round the orchestrator

1. asks ServerRule.download what to send each participant (the same global state and
   message by default; a rule that personalizes on the server returns per-client states);
2. calls ServerRule.begin_round, then ServerRule.add once per report as clients
   finish (streaming: a mean-type rule keeps one running sum, O(model) memory however many
   clients report);
3. calls ServerRule.end_round with the run's Collectives, after which
   ServerRule.global_state and ServerRule.message are next round's.

Several processes: each process adds the reports of the clients it trained, and end_round
makes the round's reduction whole with the collectives: running sums are all-reduced (sums are
exact up to float64 rounding order), anything non-linear (median, Krum, payload lists) is
gathered in client-id order, so every process computes the same next state as one process
would. With one process the collectives are the identity.

state_dict / load_state_dict carry everything above, so a resumed run equals an
uninterrupted one.

The default rule of every method is the weighted mean of the shared partition, computed as a
running weighted sum (:class:`WeightedSum`): the server holds one model's worth of memory
however many clients report, and partial sums from several processes are simply added before
the one division.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor

State = dict[str, Tensor]


@dataclass
class Report:
    """What one client sent after local training.

    state is its shared partition, weight its aggregation weight (its sample count, or
    1 under trainer.weighting: uniform), payload any non-parameter tensors the method
    sends (prototypes, control-variate deltas, local step counts).
    """

    client_id: int
    state: State
    weight: float
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ServerContext:
    """What a rule may know about the federation; given once by ServerRule.setup."""

    num_clients: int
    rounds: int
    join_ratio: float
    seed: int = 0
    weighting: str = "samples"  # trainer.weighting: "samples" or "uniform"
    public_inputs: Tensor | None = None  # data.public_samples unlabeled inputs (FedDF), on CPU


class Collectives(Protocol):
    """The cross-process operations a rule uses in ServerRule.end_round."""

    def reduce_sum(self, total: Any) -> None:
        """Sum a WeightedSum across processes, in place."""

    def gather_by_client(self, items: Mapping[int, Any]) -> dict[int, Any]:
        """Every process's {client: value} merged and ordered by client id."""


class SingleProcess:
    """The collectives of a one-process run: the identity."""

    def reduce_sum(self, total: Any) -> None:
        return None

    def gather_by_client(self, items: Mapping[int, Any]) -> dict[int, Any]:
        return dict(sorted(items.items()))


class ServerRule(ABC):
    """Base class of server rules. Subclasses implement add and end_round.

    A client class names its default rule in configure_server(); a config may replace it
    (server: in YAML) where accepts says so.
    """

    #: Whether a config may replace this rule with another one (see accepts).
    replaceable: bool = False

    def __init__(self) -> None:
        self.global_state: State = {}
        self.message: dict[str, Any] = {}
        self.context: ServerContext | None = None

    # ----------------------------------------------------------------- life cycle
    def setup(self, initial_state: Mapping[str, Tensor], context: ServerContext) -> None:
        """Start from the model's initial shared state (called once per run, before resume)."""
        self.global_state = {k: v.detach().clone() for k, v in initial_state.items()}
        self.message = {}
        self.context = context

    def download(self, client_id: int) -> tuple[State, dict[str, Any]]:
        """Shared state and message sent to client_id. Default: the same for everyone."""
        return self.global_state, self.message

    def begin_round(self, round_idx: int) -> None:  # noqa: B027 (optional: no-op default)
        """Reset the round's accumulators."""

    @abstractmethod
    def add(self, report: Report) -> None:
        """Fold one client's report into the round's reduction."""

    @abstractmethod
    def end_round(self, collectives: Collectives) -> None:
        """Complete the reduction across processes and set the next global state and message."""

    # ----------------------------------------------------------------- reporting
    def round_metrics(self, rounds_done: int) -> dict[str, float]:
        """Extra columns of the metrics row after rounds_done rounds (e.g. dp_epsilon)."""
        return {}

    def summary(self, rounds_done: int) -> dict[str, Any]:
        """Extra entries of summary.json."""
        return {}

    # ----------------------------------------------------------------- composition
    def accepts(self, replacement: ServerRule) -> bool:
        """Whether a config may run replacement instead of this (the client's default) rule.
        A generic mean accepts any rule on shared states; a method-specific rule (SCAFFOLD,
        FedProto...) only a rule of its own class."""
        return self.replaceable or isinstance(replacement, type(self))

    def wrap_default(self, default: ServerRule) -> ServerRule:
        """The rule to run when a config names this one and the client's default is
        default. Wrappers (DP) put themselves around default; others return self."""
        return self

    # ----------------------------------------------------------------- resume
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue the run: global state, message and the rule's own."""
        return {"global_state": self.global_state, "message": self.message,
                "extra": self.extra_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.global_state = dict(state["global_state"])
        self.message = dict(state["message"])
        self.load_extra_state(state.get("extra") or {})

    def extra_state(self) -> dict[str, Any]:
        """The rule's own state between rounds (momentum, moments, control variates)."""
        return {}

    def load_extra_state(self, state: Mapping[str, Any]) -> None:  # noqa: B027 (optional)
        """Restore extra_state."""

    def to(self, device: torch.device) -> ServerRule:
        """Move every tensor the rule holds to device."""
        self.global_state = {k: v.to(device) for k, v in self.global_state.items()}
        self.message = move(self.message, device)
        self.load_extra_state(move(self.extra_state(), device))
        return self


def move(obj: Any, device: torch.device) -> Any:
    """obj with every tensor (in nested dicts, lists and tuples) moved to device."""
    if isinstance(obj, Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: move(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(move(v, device) for v in obj)
    return obj


#: ``trainer.weighting``: a report weighs its training samples, or 1.
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


__all__ = ["ACCUMULATOR_DTYPE", "WEIGHTINGS", "Collectives", "Report", "ServerContext",
           "ServerRule", "SingleProcess", "State", "WeightedSum", "aggregation_weight", "move",
           "weighted_mean"]
