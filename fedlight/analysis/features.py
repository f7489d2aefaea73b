"""Features of a model: what a named submodule receives while the model predicts; FedPick's
feature masks.

The features a figure shows are named by the module that reads them, so one rule serves every
method without knowing it: ``model.head`` (the default) is what the prediction head reads:
the encoder's output for FedAvg / FedPer / FedBN, GPFL's personalized feature ``f_P`` (its
head reads ``f_P``), FedPick's universal feature ``z_g``; FedPick's ``pfsm.relevant_head`` and
``pfsm.irrelevant_head`` read its task-relevant and task-irrelevant features ``z_p`` and
``z_u`` (Fig. 8).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from fedlight.core.errors import ConfigError

#: The features most figures show: the input of the prediction head.
HEAD_INPUT = "model.head"


def feature_module(model: nn.Module, name: str) -> nn.Module:
    """The submodule ``name`` of ``model`` (ConfigError naming the candidates if none)."""
    try:
        return model.get_submodule(name)
    except AttributeError:
        candidates = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
        raise ConfigError(f"{type(model).__name__} has no module {name!r}; valid (its linear "
                          f"layers, whose input is a feature vector): {', '.join(candidates)}"
                          ) from None


@torch.inference_mode()
def module_inputs(model: nn.Module, names: Sequence[str], predict: Callable[[Tensor], Any],
                  x: Tensor, batch_size: int = 512) -> dict[str, Tensor]:
    """The first input each named submodule receives while ``predict`` runs on ``x``, batch
    by batch, flattened to ``(len(x), d)`` on the CPU.

    Raises:
        ConfigError: a name is not a submodule, or ``predict`` does not call it.
    """
    captured: dict[str, list[Tensor]] = {name: [] for name in names}

    def keeper(name: str) -> Callable[[nn.Module, tuple[Any, ...]], None]:
        def keep(module: nn.Module, inputs: tuple[Any, ...]) -> None:
            captured[name].append(inputs[0].detach().flatten(1).float().cpu())
        return keep

    handles = [feature_module(model, name).register_forward_pre_hook(keeper(name))
               for name in names]
    try:
        for start in range(0, len(x), batch_size):
            seen = {name: len(parts) for name, parts in captured.items()}
            predict(x[start:start + batch_size])
            unused = [name for name in names if len(captured[name]) == seen[name]]
            if unused:
                raise ConfigError(f"{type(model).__name__} does not use {', '.join(unused)} "
                                  "when it predicts; name a module its prediction calls")
            for name in names:  # a module called twice in one batch: keep its first input
                del captured[name][seen[name] + 1:]
    finally:
        for handle in handles:
            handle.remove()
    return {name: torch.cat(parts) if parts else torch.empty(0, 0)
            for name, parts in captured.items()}


def client_features(model: nn.Module, names: Sequence[str], x: Tensor,
                    predict: Callable[[Tensor], Any] | None = None) -> dict[str, Tensor]:
    """:func:`module_inputs` of ``model`` predicting ``x`` on the model's device (``predict``
    defaults to the personalized prediction, ``model(x)``)."""
    device = next(model.parameters()).device
    call = predict or model
    return module_inputs(model, names, lambda xb: call(xb.to(device)), x)


def has_masks(model: nn.Module) -> bool:
    """Whether ``model`` selects features with a mask: FedPick with its PFSM."""
    from fedlight.clients.fedpick import FedPick

    return isinstance(model, FedPick) and model.pfsm is not None


def check_masks(model: nn.Module, analysis: str) -> None:
    """Refuse a model without feature masks for a mask analysis (one line)."""
    if not has_masks(model):
        raise ConfigError(f"{analysis} reads feature masks, which {type(model).__name__} does "
                          "not have; valid: a FedPick run with pfsm: true")


@torch.inference_mode()
def selection_masks(model: nn.Module, x: Tensor, batch_size: int = 512) -> Tensor:
    """FedPick's inference mask ``1[l >= 0]`` (no noise, eval mode) of every sample of ``x``:
    a boolean ``(len(x), d)`` tensor on the CPU (features kept are True)."""
    check_masks(model, "the selection mask")
    device = next(model.parameters()).device
    parts = []
    for start in range(0, len(x), batch_size):
        logits = model.outputs(x[start:start + batch_size].to(device)).mask_logits
        parts.append((logits >= 0).cpu())
    return torch.cat(parts)


__all__ = ["HEAD_INPUT", "check_masks", "client_features", "feature_module", "has_masks",
           "module_inputs", "selection_masks"]
