"""One phase of a group of K clients at fixed addresses, trained step by step.

Every tensor a step touches lives in the :class:`Workspace` (stacked parameters and buffers,
optimizer state, input buffers, sample weights, active flags, loss and log sums) and is
reused from round to round (loaded with ``copy_``; the optimizer state zeroed, which for
SGD's momentum and Adam's moments is a fresh optimizer exactly), so a step can be captured
once in a CUDA graph and replayed (``graphs.py``).

One shape from a group's first step to its last: a client's smaller last batch is padded to
the group's batch size with samples of weight 0 (the method's losses and logged values are
means over the real samples: ``FederatedClient.sample_weighted``), and a client whose data is
used up stays in the group with its step discarded: after the optimizer step its parameters,
buffers and optimizer state tensors are put back where its flag is off
(``torch.where(active, new, old)``), so its momentum does not decay and weight decay does
not touch it. (Adam's step count is one number per stacked tensor, counted for the group: a
finished client never steps again in the phase, and the optimizer is fresh at the next.)
Such a step is the *static* step, captured in a graph where the engine captures.

Where a client's batch cannot be padded (:func:`~.eligibility.padding_refusal`: BatchNorm,
or a loss that does not weight samples), the steps at which an active client has a smaller
batch run eagerly instead: one vmapped call per batch size on the clients of that size
(``index_select`` of their rows), the others' rows kept by the same masking. The other steps
stay static.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any

import torch
from torch import Tensor

from fedlight.clients.base import FederatedClient
from fedlight.core.client import Phase
from fedlight.federation.engines.batched.optimizer import (
    reset_optimizer,
    resettable,
    stacked_optimizer,
)
from fedlight.federation.engines.batched.planning import (
    Batch,
    Rows,
    device_rows,
    padded,
    step_counts,
    step_masks,
)
from fedlight.federation.engines.graphs import Capture, ReplayedStep, cuda_graph
from fedlight.federation.engines.stacked_step import StackedStep
from fedlight.federation.training_loop import TrainingLoop, only_trainable


def step_capture(fabric: Any, graphs: bool) -> Capture | None:
    """How static steps are captured: CUDA graphs on a GPU at 32-true precision (autocast's
    cast cache does not survive a capture) where ``graphs``, else None (eager)."""
    precision = str(getattr(fabric.strategy.precision, "precision", "32-true"))
    if graphs and fabric.device.type == "cuda" and precision == "32-true":
        return cuda_graph
    return None


class Workspace:
    """One phase of a group of K clients: its tensors at fixed addresses, reused from round
    to round (module docstring).

    Args:
        client: the live module (its methods build the optimizer and the step).
        loop: the local loop (Fabric: device, precision, backward).
        phase: the phase.
        template: name -> ``[K, ...]`` tensors giving every shape.
        sample: one batch, giving the input shape and dtypes.
        capture: how static steps are captured (None: eager).
        pads: whether a smaller batch is padded with samples of weight 0 (else the steps
            with one run eagerly).
        report: called with the one-line cause where a capture fails (the step then runs
            eagerly).
    """

    def __init__(self, client: FederatedClient, loop: TrainingLoop, phase: Phase, template: Rows,
                 sample: Batch, capture: Capture | None, pads: bool = True,
                 report: Callable[[str], None] | None = None) -> None:
        self.fabric = loop.fabric
        device = self.fabric.device
        params = dict(client.named_parameters())
        with only_trainable(client, phase.trainable):
            trainable = {n for n, p in params.items() if p.requires_grad}
            self.params = {n: torch.zeros_like(template[n]).requires_grad_(n in trainable)
                           for n in params}
            self.optimizer = stacked_optimizer(client, phase, self.params, device,
                                               capture is not None)
        self.buffers = {n: torch.zeros_like(template[n]) for n in template if n not in params}
        self.reusable = resettable(self.optimizer)
        self.step = StackedStep(client)
        self.size = next(iter(template.values())).shape[0]
        self.pads = pads
        x, y = sample
        self.batch_size = loop.batch_size
        self.inputs = x.new_zeros((self.size, self.batch_size, *x.shape[1:]))
        self.labels = y.new_zeros((self.size, self.batch_size))
        self.weights = torch.ones(self.size, self.batch_size, device=device)
        self.active = torch.ones(self.size, dtype=torch.bool, device=device)
        self.zero = torch.zeros((), device=device)
        self.loss_sum = torch.zeros(self.size, device=device, dtype=torch.float32)
        self.log_sums: dict[str, Tensor] = {}
        self.log_counts: dict[str, list[int]] = {}
        # what a masked step puts back: the trainable parameters, the buffers and (made at
        # the first step that finds them) the optimizer's per-client state tensors
        self.kept = {n: torch.zeros_like(template[n]) for n in chain(trainable, self.buffers)}
        self.kept_state: dict[tuple[int, str], Tensor] = {}
        self.full = ReplayedStep(self._static_step, capture if self.reusable else None,
                                 report=report)
        self.static_steps = 0
        self.eager_steps = 0

    # ----------------------------------------------------------------- one round
    def load(self, state: Rows) -> None:
        """Start a round from ``state`` (name -> ``[K, ...]``): tensors copied in place, a
        fresh optimizer, sums at zero."""
        with torch.no_grad():
            for name, tensor in chain(self.params.items(), self.buffers.items()):
                tensor.copy_(state[name])
            for total in self.log_sums.values():
                total.zero_()
            self.loss_sum.zero_()
        reset_optimizer(self.optimizer)
        self.log_counts = {name: [0] * self.size for name in self.log_counts}

    def train(self, batches: Sequence[Sequence[Batch]]) -> None:
        """Every step of the phase, client k on ``batches[k]`` (module docstring)."""
        counts = step_counts(batches)
        if not counts:
            return
        weights, active = step_masks(counts, self.batch_size, self.inputs.device)
        fillers = [self._filler(own) for own in batches]
        for t, row in enumerate(counts):
            self.active.copy_(active[t])
            if self.pads or all(n in (0, self.batch_size) for n in row):
                self.weights.copy_(weights[t])
                step = [self._input(own, t, filler)
                        for own, filler in zip(batches, fillers, strict=True)]
                torch.stack([x for x, _ in step], out=self.inputs)
                torch.stack([y for _, y in step], out=self.labels)
                self.full()
                self.static_steps += 1
            else:
                sizes: dict[int, list[int]] = {}
                for k, n in enumerate(row):
                    if n:
                        sizes.setdefault(n, []).append(k)
                self._mixed_step([(members, torch.stack([batches[k][t][0] for k in members]),
                                   torch.stack([batches[k][t][1] for k in members]))
                                  for members in sizes.values()])
                self.eager_steps += 1
            self._count([k for k, n in enumerate(row) if n])

    def result(self) -> Rows:
        """Every client's parameters and buffers after the phase (new tensors)."""
        return {n: v.detach().clone() for n, v in chain(self.params.items(),
                                                        self.buffers.items())}

    def logged_means(self, k: int) -> dict[str, tuple[Tensor, int]]:
        """Client k's logged sums and counts by name (names it logged at least once)."""
        return {name: (self.log_sums[name][k], counts[k])
                for name, counts in self.log_counts.items() if counts[k]}

    # ----------------------------------------------------------------- inputs
    def _filler(self, own: Sequence[Batch]) -> Batch:
        """What a finished client's rows hold (its step is discarded): its first batch,
        padded, where that gives the group's shape; zeros otherwise."""
        if own and (self.pads or len(own[0][1]) == self.batch_size):
            return padded(own[0][0], self.batch_size), padded(own[0][1], self.batch_size)
        return self.inputs[0].new_zeros(self.inputs.shape[1:]), self.labels.new_zeros(
            self.labels.shape[1:])

    def _input(self, own: Sequence[Batch], t: int, filler: Batch) -> Batch:
        if t >= len(own):
            return filler
        x, y = own[t]
        return padded(x, self.batch_size), padded(y, self.batch_size)

    # ----------------------------------------------------------------- steps
    def _static_step(self) -> None:
        """Every client at the group's shape (padded, finished ones masked): what a CUDA
        graph captures."""
        self._keep()
        self.optimizer.zero_grad(set_to_none=True)
        state = {**self.params, **self.buffers}
        weights = self.weights if self.pads else None
        with self.fabric.autocast():
            losses, logs = self.step(state, self.inputs, self.labels, weights)
        self.fabric.backward(torch.where(self.active, losses, self.zero.to(losses.dtype)).sum())
        self.fabric.strategy.optimizer_step(self.optimizer)
        with torch.no_grad():
            self._put_back()
            self._add_sums(losses, logs, None)

    def _mixed_step(self, parts: Sequence[tuple[list[int], Tensor, Tensor]]) -> None:
        """One optimizer step for clients whose batches differ in size: one vmapped call per
        size (gradients of distinct rows add up), eagerly; the finished clients masked."""
        self._keep()
        self.optimizer.zero_grad(set_to_none=True)
        device = self.loss_sum.device
        for members, inputs, labels in parts:
            rows = None if len(members) == self.size else device_rows(members, device)
            params = self.params if rows is None else {
                n: v.index_select(0, rows) for n, v in self.params.items()}
            buffers = self.buffers if rows is None else {
                n: v.index_select(0, rows) for n, v in self.buffers.items()}
            with self.fabric.autocast():
                losses, logs = self.step({**params, **buffers}, inputs, labels)
            self.fabric.backward(losses.sum())
            with torch.no_grad():
                if rows is not None:
                    for name, value in buffers.items():
                        self.buffers[name].index_copy_(0, rows, value)
                self._add_sums(losses, logs, rows)
        self.fabric.strategy.optimizer_step(self.optimizer)
        with torch.no_grad():
            self._put_back()

    def _add_sums(self, losses: Tensor, logs: dict[str, Tensor], rows: Tensor | None) -> None:
        """Add the step's losses and logged values to the sums: of the active clients
        (``rows`` None: every row, masked by the active flags; else those rows)."""
        for name in logs:
            if name not in self.log_sums:
                self.log_sums[name] = torch.zeros_like(self.loss_sum)
                self.log_counts[name] = [0] * self.size
        values = {"": losses.detach(), **logs}
        totals = {"": self.loss_sum, **self.log_sums}
        for name, value in values.items():
            if rows is None:
                totals[name].add_(torch.where(self.active, value.float(), self.zero))
            else:
                totals[name].index_add_(0, rows, value.float())

    def _keep(self) -> None:
        """Copy what a finished client must keep (before the step changes it)."""
        with torch.no_grad():
            for name, kept in self.kept.items():
                kept.copy_(self.params[name] if name in self.params else self.buffers[name])
            for key, value in self._state_tensors():
                if key not in self.kept_state:
                    self.kept_state[key] = torch.empty_like(value)
                self.kept_state[key].copy_(value)

    def _put_back(self) -> None:
        """Finished clients' rows back to what :meth:`_keep` copied (optimizer state made at
        this step: back to zero, a fresh optimizer's)."""
        for name, kept in self.kept.items():
            tensor = self.params[name] if name in self.params else self.buffers[name]
            torch.where(self._rows(tensor), tensor, kept, out=tensor)
        for key, value in self._state_tensors():
            kept_state = self.kept_state.get(key)
            if kept_state is None:
                value.masked_fill_(~self._rows(value), 0)
            else:
                torch.where(self._rows(value), value, kept_state, out=value)

    def _rows(self, tensor: Tensor) -> Tensor:
        """The active flags shaped to broadcast over ``tensor``'s client rows."""
        return self.active.view(self.size, *([1] * (tensor.dim() - 1)))

    def _state_tensors(self) -> list[tuple[tuple[int, str], Tensor]]:
        """The optimizer's per-client state tensors (shaped like their parameter), keyed by
        parameter and name; one-number states (Adam's step count) are the group's."""
        found = []
        for index, param in enumerate(p for g in self.optimizer.param_groups
                                      for p in g["params"]):
            for name, value in self.optimizer.state.get(param, {}).items():
                if isinstance(value, Tensor) and value.dim() and value.shape == param.shape:
                    found.append(((index, name), value))
        return found

    def _count(self, active: Sequence[int]) -> None:
        for name, count in self.step.counts.items():
            for k in active:
                self.log_counts[name][k] += count


__all__ = ["Workspace", "step_capture"]
