"""A client's own ``training_step`` as a function of stacked per-client state, vmapped over
clients: the batched engine's step, derived from the method's code rather than written again.

:class:`TrainingStep` wraps the live client module so that ``torch.func.functional_call``
runs its ``training_step`` (not ``forward``) on parameters and buffers passed in; ``vmap``
maps that over the clients' rows. Everything that differs between clients must therefore
be a parameter or a buffer (``FederatedClient.batchable``): weights, BatchNorm statistics,
frozen teachers, the class prior, noise keys. In-place updates of buffers (running
statistics, noise counters) land in the stacked tensors. What the step logs with
``self.log`` is collected per call (``FederatedClient.step_logs``) and returned as outputs,
one value per client and name; how many values a name got per call is read at trace time
(the same for every client, the code path being the same). :class:`StackedOutputs` maps the
client's ``eval_outputs`` the same way, to score K clients at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor, nn
from torch.func import functional_call, vmap

from fedlight.clients.base import FederatedClient

Rows = Mapping[str, Tensor]
PREFIX = "client."


class TrainingStep(nn.Module):
    """``forward(x, y)`` = the client's ``training_step((x, y), 0)``: its loss and the sums of
    what it logged by name (``counts``: how many values per name, from the last trace);
    ``forward(x, y, weight)`` the same with ``weight`` (1 per real sample, 0 per padding) as
    the client's ``sample_weight`` for the duration."""

    def __init__(self, client: FederatedClient) -> None:
        super().__init__()
        self.client = client
        self.counts: dict[str, int] = {}

    def forward(self, x: Tensor, y: Tensor,
                weight: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
        self.client.sample_weight = weight
        try:
            with self.client.step_logs() as logged:
                output = self.client.training_step((x, y), 0)
        finally:
            self.client.sample_weight = None
        loss = output["loss"] if isinstance(output, dict) else output
        if not isinstance(loss, Tensor):
            raise TypeError(f"{type(self.client).__name__}.training_step returned "
                            f"{type(output).__name__}: a batched step needs a loss tensor")
        self.counts = {name: len(values) for name, values in logged.items()}
        sums = {name: sum(values[1:], values[0]) for name, values in logged.items()}
        return loss, sums


class ScoringOutputs(nn.Module):
    """``forward(x)`` = the client's ``eval_outputs(x)``: its named logits."""

    def __init__(self, client: FederatedClient) -> None:
        super().__init__()
        self.client = client

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        return self.client.eval_outputs(x)


class Stacked:
    """A wrapper module (:class:`TrainingStep`, :class:`ScoringOutputs`) over stacked state:
    ``call(state, *inputs)`` with ``state`` name -> ``[K, ...]`` (the client's parameters and
    buffers) and each input ``[K, ...]`` runs the wrapper for the K clients' rows. Random
    draws other than a NoiseSource's are an error (vmap's ``randomness="error"``): they would
    come from one stream for all clients."""

    def __init__(self, wrapper: nn.Module) -> None:
        self.wrapper = wrapper
        self.mapped = vmap(self._one, randomness="error")

    def _one(self, state: Rows, *inputs: Tensor) -> Any:
        named = {PREFIX + name: value for name, value in state.items()}
        return functional_call(self.wrapper, named, inputs)

    def call(self, state: Rows, *inputs: Tensor) -> Any:
        return self.mapped(dict(state), *inputs)


class StackedStep(Stacked):
    """The client's step over stacked state: ``step(state, inputs, labels, weights)`` with
    ``inputs`` ``[K, B, ...]``, ``labels`` ``[K, B]`` and ``weights`` ``[K, B]`` (or None:
    every sample real) returns the K losses and, per logged name, the K sums (``counts`` as
    in :class:`TrainingStep`)."""

    def __init__(self, client: FederatedClient) -> None:
        self.training_step = TrainingStep(client)
        super().__init__(self.training_step)

    @property
    def counts(self) -> dict[str, int]:
        return self.training_step.counts

    def __call__(self, state: Rows, inputs: Tensor, labels: Tensor,
                 weights: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
        extra = () if weights is None else (weights,)
        output: tuple[Tensor, dict[str, Tensor]] = self.call(state, inputs, labels, *extra)
        return output


class StackedOutputs(Stacked):
    """The client's ``eval_outputs`` over stacked state: ``outputs(state, inputs)`` with
    ``inputs`` ``[K, b, ...]`` gives each name's logits ``[K, b, C]``."""

    def __init__(self, client: FederatedClient) -> None:
        super().__init__(ScoringOutputs(client))

    def __call__(self, state: Rows, inputs: Tensor) -> dict[str, Tensor]:
        output: dict[str, Tensor] = self.call(state, inputs)
        return output


__all__ = ["ScoringOutputs", "Stacked", "StackedOutputs", "StackedStep", "TrainingStep"]
