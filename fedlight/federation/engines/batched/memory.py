"""How many clients a group holds: an estimate of one more client's device memory."""

from __future__ import annotations

from itertools import chain
from typing import Any

import torch
from torch import Tensor, nn


def group_size_for(per_client: int, free: int, participants: int) -> int:
    """Clients per group: as many as half the ``free`` bytes hold at ``per_client`` bytes
    each (the rest is the allocator's slack and the evaluation's), between 1 and the
    ``participants``."""
    return max(1, min(participants, free // (2 * max(per_client, 1))))


def client_bytes(client: nn.Module, batch: Tensor, data_bytes: int) -> int:
    """Device memory one more client of a group needs, estimated: its parameters and buffers
    seven times (stacked, gradient, two optimizer moments, state before and after a phase,
    the copy a masked step keeps), three times the activations of one batch (kept for
    backward, and their gradients; the outputs of every leaf module in a forward pass,
    margin for what a method adds) and its batches (``data_bytes``)."""
    state = sum(t.numel() * t.element_size()
                for t in chain(client.parameters(), client.buffers()))
    return 7 * state + 3 * activation_bytes(client, batch) + data_bytes


def activation_bytes(client: nn.Module, batch: Tensor) -> int:
    """Bytes of the outputs of every leaf module in one forward pass of ``batch`` (eval mode,
    no gradient: nothing of the client changes)."""
    total = 0

    def count(module: nn.Module, inputs: Any, output: Any) -> None:
        nonlocal total
        if isinstance(output, Tensor):
            total += output.numel() * output.element_size()

    leaves = [m for m in client.modules() if not any(True for _ in m.children())]
    handles = [m.register_forward_hook(count) for m in leaves]
    training = client.training
    try:
        client.eval()
        with torch.no_grad():
            client(batch)
    finally:
        for handle in handles:
            handle.remove()
        client.train(training)
    return total


__all__ = ["activation_bytes", "client_bytes", "group_size_for"]
