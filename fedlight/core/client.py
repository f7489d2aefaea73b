"""The client contract: what a client module and the engine that drives it exchange.

A client's local schedule is a list of :class:`Phase` objects; before it trains it is told its
:class:`ClientContext`; after it trains it hands over an :class:`Upload`; its state dict is
split into shared and private keys by glob patterns (:class:`Partition`). The base class that
implements this contract is ``fedlight.clients.base.FederatedClient``.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from fedlight.core.errors import ConfigError


@dataclass(frozen=True)
class Phase:
    """One stage of a client's local schedule.

    Args:
        name: read by ``training_step`` through ``self.phase``.
        epochs: passes over the client's training data in this phase.
        trainable: glob patterns of the parameter names that train in this phase; ``None``
            trains every parameter. The others keep ``requires_grad=False`` for the phase.
        upload_after: snapshot the upload when this phase ends. When no phase asks for it,
            the upload is taken after the last phase.
        lr_scale: multiplies every learning rate of the optimizer built for this phase.
        max_steps: end the phase after this many optimizer steps (``None``: ``epochs`` full
            passes), e.g. Per-FedAvg's one adaptation step.
    """

    name: str = "train"
    epochs: int = 1
    trainable: tuple[str, ...] | None = None
    upload_after: bool = False
    lr_scale: float = 1.0
    max_steps: int | None = None


@dataclass
class ClientContext:
    """What the orchestrator tells a client about itself before it trains."""

    client_id: int
    round: int
    rounds: int
    join_ratio: float
    class_counts: Tensor  # (num_classes,) label counts of the client's training split
    participations: int = 0  # rounds this client has trained in, this one excluded
    train_data: tuple[Tensor, Tensor] | None = None  # (x, y) on the device, for hooks that
    # need the data outside training_step (e.g. re-estimating BatchNorm statistics)
    batch_size: int = 10
    drop_last: bool = False  # training epochs drop a trailing partial batch (trainer.drop_last)

    @property
    def num_train_samples(self) -> int:
        return int(self.class_counts.sum())


@dataclass
class Upload:
    """What leaves a client after local training.

    ``state`` is the shared partition (name -> tensor), ``weight`` the aggregation weight under
    ``weighting: samples`` (the number of training samples), ``payload`` anything else the
    method's server rule reduces (for example per-class prototypes).
    """

    state: dict[str, Tensor]
    weight: float
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Partition:
    """State-dict keys split into shared and private; disjoint and covering by construction."""

    shared: tuple[str, ...]
    private: tuple[str, ...]


def match_keys(keys: Iterable[str], patterns: Sequence[str]) -> list[str]:
    """Return the keys that match at least one glob pattern, in key order."""
    return [k for k in keys if any(fnmatch.fnmatchcase(k, p) for p in patterns)]


def resolve_partition(
    keys: Sequence[str], shared: Sequence[str], private: Sequence[str], owner: str = "client"
) -> Partition:
    """Split state-dict ``keys`` by glob patterns; private patterns win over shared ones.

    Raises ``ConfigError`` when a pattern matches no key (it is then almost surely a typo) or
    when a key is matched by neither list (it would silently never be aggregated nor kept).
    """
    for pattern in [*shared, *private]:
        if not match_keys(keys, [pattern]):
            preview = ", ".join(list(keys)[:8]) + (", ..." if len(keys) > 8 else "")
            raise ConfigError(
                f"{owner}: partition pattern {pattern!r} matches no parameter or buffer; "
                f"state-dict keys are: {preview}"
            )
    private_keys = match_keys(keys, private)
    private_set = set(private_keys)
    shared_keys = [k for k in match_keys(keys, shared) if k not in private_set]
    uncovered = [k for k in keys if k not in private_set and k not in set(shared_keys)]
    if uncovered:
        raise ConfigError(
            f"{owner}: keys {uncovered[:5]} are neither shared nor private; add a pattern for them"
        )
    return Partition(shared=tuple(shared_keys), private=tuple(private_keys))


def upload_phase(phases: Sequence[Phase]) -> int:
    """The index of the phase after which the upload is taken: the first that asks for it
    (``upload_after``), else the last."""
    return next((i for i, phase in enumerate(phases) if phase.upload_after), len(phases) - 1)


__all__ = ["ClientContext", "Partition", "Phase", "Upload", "match_keys", "resolve_partition",
           "upload_phase"]
