"""What a group trains on: each participant's state and batches, and the steps of a phase.

Each client keeps its own batches: the same shuffled order from the same seed as the loop
(drawn through ``ClientRuntime.batches``), its own number of steps and its own smaller last
batch. A step of the group is planned from the real samples each client has at it
(:func:`step_counts`: 0 once its data is used up): on the device, one weight per sample (1
real, 0 padding) and one flag per client (active or finished), built once per phase
(:func:`step_masks`) and copied into the workspace's fixed tensors step by step.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import torch
from torch import Tensor, nn

from fedlight.core.client import Phase
from fedlight.core.messages import TrainTask
from fedlight.federation.runtime import ClientRound
from fedlight.federation.training_loop import step_budget

Batch = tuple[Tensor, Tensor]
Rows = dict[str, Tensor]


@dataclass
class PreparedClient:
    """A participant started and planned: its round (the runtime's handle), its parameters
    and buffers before training, its phases, the key of the group it trains in and, per
    phase, the batches the loop would draw for it in order; after training, its state after
    each phase, loss sum, steps and logged means."""

    started: ClientRound
    start: Rows
    phases: list[Phase]
    key: Hashable
    batches: list[list[Batch]]
    rows: list[Rows] = field(default_factory=list)
    loss_sum: Tensor = field(default_factory=lambda: torch.zeros(()))
    steps: int = 0
    logs: dict[str, Tensor] = field(default_factory=dict)

    @property
    def task(self) -> TrainTask:
        return self.started.task


def phase_batches(epoch_batches: Callable[[], Iterable[Batch]], phase: Phase,
                  step_limit: int | None = None) -> list[Batch]:
    """The batches one phase of the loop trains on, one epoch after another of
    ``epoch_batches()`` as the loop draws them (none after ``max_steps`` or ``step_limit``,
    the steps ``max_local_steps`` leaves)."""
    budget = step_budget(phase.max_steps, step_limit)
    batches: list[Batch] = []
    for _ in range(phase.epochs):
        if len(batches) >= budget:
            break
        for batch in epoch_batches():
            if len(batches) >= budget:
                break
            batches.append(batch)
    return batches


def schedule_signature(phases: Sequence[Phase]) -> tuple[Any, ...]:
    """What of a schedule a vmapped step shares: each phase's name, trainable parameters,
    learning-rate scale and upload point (epochs and step caps only shape the batches)."""
    return tuple((p.name, p.trainable, p.lr_scale, p.upload_after) for p in phases)


def client_state(client: nn.Module) -> Rows:
    """Detached copies of the module's parameters and buffers (non-persistent ones too)."""
    return {name: tensor.detach().clone()
            for name, tensor in chain(client.named_parameters(), client.named_buffers())}


def load_rows(client: nn.Module, rows: Rows) -> None:
    """Write one client's parameters and buffers into the live module."""
    with torch.no_grad():
        for name, tensor in chain(client.named_parameters(), client.named_buffers()):
            tensor.copy_(rows[name])


def to_device(tensor: Tensor, device: torch.device) -> Tensor:
    """A host tensor on ``device``; to a GPU from pinned memory without blocking (a plain
    host-to-device copy of pageable memory waits for the work queued before it)."""
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def device_rows(members: Sequence[int], device: torch.device) -> Tensor:
    """The row indices ``members`` on ``device`` (:func:`to_device`)."""
    return to_device(torch.tensor(list(members), dtype=torch.long), device)


def step_counts(batches: Sequence[Sequence[Batch]]) -> list[list[int]]:
    """Per step of the phase, the real samples of each client's batch (0 once its data is
    used up): ``counts[t][k]``."""
    steps = max((len(own) for own in batches), default=0)
    return [[len(own[t][1]) if t < len(own) else 0 for own in batches] for t in range(steps)]


def step_masks(counts: Sequence[Sequence[int]], batch_size: int,
               device: torch.device) -> tuple[Tensor, Tensor]:
    """For every step: the sample weights ``[T, K, B]`` (1 for the first ``counts[t][k]``
    samples, 0 for the padding; all 1 for a finished client, whose step is discarded, so its
    loss stays finite) and the active flags ``[T, K]`` (a client with samples at the step),
    on ``device`` in one copy each."""
    count = torch.tensor(counts, dtype=torch.long)
    active = count > 0
    weights = torch.arange(batch_size) < count.unsqueeze(-1)
    weights |= ~active.unsqueeze(-1)
    return to_device(weights.float(), device), to_device(active, device)


def padded(tensor: Tensor, size: int) -> Tensor:
    """``tensor``'s rows repeated in order up to ``size`` rows (real samples as padding: any
    layer sees values of the data's own kind; their weight is 0)."""
    rows = tensor.shape[0]
    if rows == size:
        return tensor
    return tensor[torch.arange(size, device=tensor.device) % rows]


__all__ = ["Batch", "PreparedClient", "Rows", "client_state", "device_rows", "load_rows",
           "padded", "phase_batches", "schedule_signature", "step_counts", "step_masks",
           "to_device"]
