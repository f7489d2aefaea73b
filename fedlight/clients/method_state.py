"""State several methods keep, in pieces they share (not a client: this module defines no
method).

* parameter_mirror: a module of zero buffers shaped like a client's parameters, under the same
  names (SCAFFOLD's control variate, FedDyn's gradient state), so a method keeps per-parameter
  private state in its state dict without copying the model;
* received_parameters: detached copies of the shared parameters just received (the anchor of
  proximal and dynamic regularizers, the start point of a round's update);
* StepCounter: the optimizer steps and summed learning rates of a round, recorded from
  on_before_optimizer_step (SCAFFOLD option II, FedNova);
* frozen_copy: a deep copy with no gradient, in eval mode (MOON's previous model).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor, nn


def parameter_mirror(module: nn.Module, persistent: bool = True) -> nn.Module:
    """A module whose buffers are zeros shaped like module's parameters, with the same
    dotted names (buffer model.head.weight mirrors parameter model.head.weight); in the
    state dict unless ``persistent`` is False."""
    mirror = nn.Module()
    for name, param in module.named_parameters():
        *path, leaf = name.split(".")
        node = mirror
        for part in path:
            if not hasattr(node, part):
                node.add_module(part, nn.Module())
            node = getattr(node, part)
        node.register_buffer(leaf, torch.zeros_like(param, requires_grad=False),
                             persistent=persistent)
    return mirror


def received_parameters(client: Any) -> dict[str, tuple[nn.Parameter, Tensor]]:
    """Each shared parameter of client with a detached copy of its current value (call at
    round start: the weights just received). Private parameters are left out."""
    shared = set(client.partition.shared)
    return {name: (param, param.detach().clone()) for name, param in client.named_parameters()
            if name in shared}


class StepCounter:
    """Optimizer steps of a round and the sum of their learning rates (first parameter group).
    record is meant to be called from on_before_optimizer_step."""

    def __init__(self) -> None:
        self.steps = 0
        self.lr_sum = 0.0

    def reset(self) -> None:
        self.steps = 0
        self.lr_sum = 0.0

    def record(self, optimizer: Any) -> None:
        self.steps += 1
        self.lr_sum += float(optimizer.param_groups[0]["lr"])


def frozen_copy(module: nn.Module) -> nn.Module:
    """A deep copy of module with requires_grad=False everywhere, in eval mode."""
    frozen = copy.deepcopy(module)
    frozen.requires_grad_(False)
    return frozen.eval()


__all__ = ["StepCounter", "frozen_copy", "parameter_mirror", "received_parameters"]
