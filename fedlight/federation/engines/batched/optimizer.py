"""The optimizer of a group: the client's own optimizer class, groups and hyper-parameters
over the stacked tensors, reset in place from round to round.

``torch.optim``'s SGD (momentum, weight decay), Adam and AdamW update element by element, so
one optimizer over ``[K, ...]`` tensors updates each client's rows exactly as the client's
own optimizer would update its tensors. On a GPU the update runs ``foreach``, and where a
step is captured in a CUDA graph Adam and AdamW run ``capturable`` (their step counts on
the device): both are set on every parameter group, which is what ``step`` reads (an
optimizer built from copied groups keeps the groups' own values, not its defaults).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import Tensor

from fedlight.clients.base import FederatedClient
from fedlight.core.client import Phase
from fedlight.core.errors import ConfigError
from fedlight.federation.training_loop import parse_optimizers, scale_lr

Rows = dict[str, Tensor]


def resettable(optimizer: torch.optim.Optimizer) -> bool:
    """Whether zeroing the optimizer's state tensors makes it a fresh one exactly: SGD
    without dampening (momentum 0 x 0 + g = g, its first step), Adam and AdamW."""
    if type(optimizer) is torch.optim.SGD:
        return all(group["dampening"] == 0 for group in optimizer.param_groups)
    return type(optimizer) in (torch.optim.Adam, torch.optim.AdamW)


def reset_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """Make ``optimizer`` fresh: its state zeroed in place where :func:`resettable` (the
    tensors keep their addresses), dropped otherwise."""
    if not resettable(optimizer):
        optimizer.state.clear()
        return
    with torch.no_grad():
        for state in optimizer.state.values():
            for value in state.values():
                if isinstance(value, Tensor):
                    value.zero_()


def device_settings(optimizer: torch.optim.Optimizer, device: torch.device,
                    capturable: bool) -> dict[str, Any]:
    """The settings a stacked optimizer adds on ``device``: ``foreach`` on a GPU, and
    ``capturable`` where its step is to run in a CUDA graph (a GPU only: a capturable
    optimizer refuses parameters on a CPU); only those the optimizer class knows."""
    settings: dict[str, Any] = {}
    if device.type != "cuda":
        return settings
    if "foreach" in optimizer.defaults:
        settings["foreach"] = True
    if capturable and "capturable" in optimizer.defaults:
        settings["capturable"] = True
    return settings


def stacked_optimizer(client: FederatedClient, phase: Phase, stacked: Rows,
                      device: torch.device, capturable: bool) -> torch.optim.Optimizer:
    """The optimizer the client builds for ``phase``, over the stacked tensors instead of its
    own parameters (same class, groups and hyper-parameters), with :func:`device_settings`
    on every group."""
    client.phase = phase.name
    optimizer, schedulers = parse_optimizers(client.configure_optimizers(),
                                             type(client).__name__)
    if schedulers:
        raise ConfigError(f"{type(client).__name__}: batched clients train without "
                          "learning-rate schedulers; set trainer.batched_clients: 1")
    scale_lr(optimizer, schedulers, phase.lr_scale)
    settings = device_settings(optimizer, device, capturable)
    names = {id(p): n for n, p in client.named_parameters()}
    groups = [{**group, **settings, "params": [stacked[names[id(p)]] for p in group["params"]]}
              for group in optimizer.param_groups]
    return type(optimizer)(groups, **constructor_arguments(optimizer, settings))


def constructor_arguments(optimizer: torch.optim.Optimizer,
                          settings: dict[str, Any]) -> dict[str, Any]:
    """The optimizer's defaults with ``settings``, those its constructor takes (AdamW keeps
    ``decoupled_weight_decay`` in its defaults but does not take it)."""
    accepted = inspect.signature(type(optimizer)).parameters
    return {k: v for k, v in {**optimizer.defaults, **settings}.items() if k in accepted}


__all__ = ["constructor_arguments", "device_settings", "reset_optimizer", "resettable",
           "stacked_optimizer"]
