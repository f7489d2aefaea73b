"""The backbone zoo: classifiers cut as ``encoder`` + ``head`` (see ``Backbone``).

``build_backbone("cnn", (1, 28, 28), 10)`` builds one by name; ``BACKBONES`` maps each name
to its constructor ``(input_shape, num_classes, **kwargs) -> Backbone``. A new backbone is
one more entry in ``BACKBONES`` (its state-dict names must start with ``encoder.`` or ``head.``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from fedlight.core.errors import ConfigError
from fedlight.models.alexnet import alexnet_bn
from fedlight.models.backbone import CUTS, Backbone, check_num_classes
from fedlight.models.cnn import cnn, cnn_bn, digit_cnn, femnist_cnn, lenet, mlp, mlp3, tfcnn
from fedlight.models.resnet import resnet18
from fedlight.models.resnet_cifar import resnet20, resnet56
from fedlight.models.sensor import har_cnn
from fedlight.models.sequence import char_lstm, fasttext
from fedlight.models.vgg import vgg8, vgg8_bn, vgg11, vgg11_bn, vgg16_bn

__all__ = ["BACKBONES", "CUTS", "Backbone", "build_backbone"]

BACKBONES: dict[str, Callable[..., Backbone]] = {
    "cnn": cnn,
    "cnn_bn": cnn_bn,
    "digit_cnn": digit_cnn,
    "femnist_cnn": femnist_cnn,
    "lenet": lenet,
    "mlp": mlp,
    "mlp3": mlp3,
    "tfcnn": tfcnn,
    "alexnet_bn": alexnet_bn,
    "resnet18": resnet18,
    "resnet20": resnet20,
    "resnet56": resnet56,
    "vgg8": vgg8,
    "vgg8_bn": vgg8_bn,
    "vgg11": vgg11,
    "vgg11_bn": vgg11_bn,
    "vgg16_bn": vgg16_bn,
    "fasttext": fasttext,
    "char_lstm": char_lstm,
    "har_cnn": har_cnn,
}


def build_backbone(
    name: str, input_shape: Sequence[int], num_classes: int, **kwargs: Any
) -> Backbone:
    """Build the backbone ``name`` for inputs of ``input_shape`` and ``num_classes`` classes.

    Args:
        name: a key of ``BACKBONES``, e.g. ``"cnn"``, ``"resnet18"``, ``"vgg11"``.
        input_shape: shape of one sample without the batch, e.g. ``(1, 28, 28)``, ``(64,)``
            (features or token ids), ``(9, 128)`` (signals).
        num_classes: number of logits of the head.
        **kwargs: the backbone's own options (e.g. ``hidden`` for ``mlp``, ``all_fc_head``
            for ``vgg11``, ``vocab_size`` for the token backbones ``fasttext`` and
            ``char_lstm``, which token sources pass); see each constructor's docstring.

    Returns:
        A freshly initialized ``Backbone`` (seed with ``torch.manual_seed`` for repeatability).

    Raises:
        ValueError: unknown ``name`` or keyword, or an ``input_shape`` the backbone cannot take;
            the message names the bad value and what is valid.
    """
    if name not in BACKBONES:
        raise ConfigError(f"unknown backbone {name!r}; valid names: {sorted(BACKBONES)}")
    constructor = BACKBONES[name]
    _check_kwargs(name, constructor, kwargs)
    check_num_classes(num_classes)
    return constructor(input_shape, num_classes, **kwargs)


def _check_kwargs(name: str, constructor: Callable[..., Backbone], kwargs: dict) -> None:
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
