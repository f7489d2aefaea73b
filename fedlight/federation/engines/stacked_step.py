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
(the same for every client, the code path being the same).
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor, nn
from torch.func import functional_call, vmap

from fedlight.clients.base import FederatedClient

Rows = Mapping[str, Tensor]
PREFIX = "client."


class TrainingStep(nn.Module):
    """``forward(x, y)`` = the client's ``training_step((x, y), 0)``: its loss and the sums of
    what it logged by name (``counts``: how many values per name, from the last trace)."""

    def __init__(self, client: FederatedClient) -> None:
        super().__init__()
        self.client = client
        self.counts: dict[str, int] = {}

    def forward(self, x: Tensor, y: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        with self.client.step_logs() as logged:
            output = self.client.training_step((x, y), 0)
        loss = output["loss"] if isinstance(output, dict) else output
        if not isinstance(loss, Tensor):
            raise TypeError(f"{type(self.client).__name__}.training_step returned "
                            f"{type(output).__name__}: a batched step needs a loss tensor")
        self.counts = {name: len(values) for name, values in logged.items()}
        sums = {name: sum(values[1:], values[0]) for name, values in logged.items()}
        return loss, sums


class StackedStep:
    """The client's step over stacked state: ``step(state, inputs, labels)`` with ``state``
    name -> ``[K, ...]`` (parameters and buffers), ``inputs`` ``[K, B, ...]`` and ``labels``
    ``[K, B]`` returns the K losses and, per logged name, the K sums (``counts`` as in
    :class:`TrainingStep`). Random draws other than a NoiseSource's are an error (vmap's
    ``randomness="error"``): they would come from one stream for all clients."""

    def __init__(self, client: FederatedClient) -> None:
        self.wrapper = TrainingStep(client)
        self.mapped = vmap(self._one, randomness="error")

    @property
    def counts(self) -> dict[str, int]:
        return self.wrapper.counts

    def _one(self, state: Rows, x: Tensor, y: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        named = {PREFIX + name: value for name, value in state.items()}
        output: tuple[Tensor, dict[str, Tensor]] = functional_call(self.wrapper, named, (x, y))
        return output

    def __call__(self, state: Rows, inputs: Tensor,
                 labels: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        output: tuple[Tensor, dict[str, Tensor]] = self.mapped(dict(state), inputs, labels)
        return output


__all__ = ["StackedStep", "TrainingStep"]
