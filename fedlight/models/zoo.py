"""The backbone zoo: each backbone registers itself by name where it is defined.

A backbone is a constructor ``(input_shape, num_classes, **options) -> Backbone`` decorated
with :func:`register_backbone`; its function name is its name in configs
(``model.init_args.backbone: cnn``). Importing :mod:`fedlight.models` imports every module of
the package, so a new backbone is one new file there and nothing else; a constructor defined
anywhere else is usable by name once its module is imported.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from fedlight.core.errors import ConfigError
from fedlight.models.backbone import Backbone, check_num_classes

BackboneConstructor = Callable[..., Backbone]

#: Every registered backbone constructor by name (filled by :func:`register_backbone`).
BACKBONES: dict[str, BackboneConstructor] = {}


def register_backbone(constructor: BackboneConstructor) -> BackboneConstructor:
    """Register ``constructor`` under its function name and return it unchanged (a decorator).

    ``constructor(input_shape, num_classes, **options)`` must return a :class:`Backbone` whose
    state-dict names all start with ``encoder.`` or ``head.``; its keyword options are the
    config's ``backbone_kwargs``.

    Raises:
        ConfigError: another constructor already holds the name.
    """
    name = constructor.__name__
    held = BACKBONES.get(name)
    if held is not None and _origin(held) != _origin(constructor):
        raise ConfigError(f"backbone name {name!r} is taken by {_origin(held)}; "
                          f"rename {_origin(constructor)}")
    BACKBONES[name] = constructor
    return constructor


def build_backbone(
    name: str, input_shape: Sequence[int], num_classes: int, **kwargs: Any
) -> Backbone:
    """Build the backbone ``name`` for inputs of ``input_shape`` and ``num_classes`` classes.

    Args:
        name: a registered name (a key of ``BACKBONES``), e.g. ``"cnn"``, ``"resnet18"``.
        input_shape: shape of one sample without the batch, e.g. ``(1, 28, 28)``, ``(64,)``
            (features or token ids), ``(9, 128)`` (signals).
        num_classes: number of logits of the head.
        **kwargs: the backbone's own options (e.g. ``hidden`` for ``mlp``, ``all_fc_head``
            for ``vgg11``, ``vocab_size`` for the token backbones ``fasttext`` and
            ``char_lstm``, which token sources pass); see each constructor's docstring.

    Returns:
        A freshly initialized ``Backbone`` (seed with ``torch.manual_seed`` for repeatability).

    Raises:
        ConfigError: unknown ``name`` or keyword, or an ``input_shape`` the backbone cannot
            take; the message names the bad value and what is valid.
    """
    if name not in BACKBONES:
        raise ConfigError(f"unknown backbone {name!r}; valid names: {sorted(BACKBONES)}, "
                          "or an nn.Module")
    constructor = BACKBONES[name]
    _check_kwargs(name, constructor, kwargs)
    check_num_classes(num_classes)
    return constructor(input_shape, num_classes, **kwargs)


def _origin(constructor: BackboneConstructor) -> str:
    return f"{constructor.__module__}.{constructor.__qualname__}"


def _check_kwargs(name: str, constructor: BackboneConstructor, kwargs: dict[str, Any]) -> None:
    """Refuse keywords ``constructor`` does not take, naming the valid ones."""
    params = list(inspect.signature(constructor).parameters.values())[2:]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return
    valid = [p.name for p in params]
    unknown = sorted(set(kwargs) - set(valid))
    if unknown:
        raise ConfigError(
            f"backbone {name!r} got unknown argument(s) {unknown}; valid: {valid or 'none'}"
        )
