"""Multilayer perceptrons on the flattened input: FedAvg's 2NN and GPFL's 3-layer MLP."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from math import prod

from torch import nn

from fedlight.models.backbone import Backbone, check_shape
from fedlight.models.conv_stack import fc_layers
from fedlight.models.zoo import register_backbone


@register_backbone
def mlp(
    input_shape: Sequence[int], num_classes: int, hidden: Sequence[int] = (200, 200)
) -> Backbone:
    """A multilayer perceptron on the flattened input (any ``input_shape``).

    The default is FedAvg's 2NN (two hidden layers of 200). MAP's MLPNet for FaMnist is
    ``hidden: [512, 512]`` (its paper: "two hidden layers with each hidden layer containing 512
    neurons"; 669,706 parameters for 1x28x28 and 10 classes); the authors' released code
    instead uses ``hidden: [1024, 1024, 128]`` and a bias-free last layer (ours has a bias).

    Args:
        hidden: sizes of the hidden layers, each Linear then ReLU; the last is the feature
            (``feature_dim``). Empty gives a linear classifier on the raw input.
    """
    return _perceptron("mlp", input_shape, num_classes, hidden)


@register_backbone
def mlp3(
    input_shape: Sequence[int], num_classes: int, hidden: Sequence[int] = (1000, 500, 100)
) -> Backbone:
    """The 3-layer MLP of GPFL's Amazon Review experiments (Zhang et al., ICCV 2023, Table 3).

    PFLlib's ``AmazonMLP`` (after KD3A): Linear(D, 1000) ReLU, Linear(1000, 500) ReLU,
    Linear(500, 100) ReLU is the 100-d feature; head Linear(100, U). On Amazon Review's
    5000-d features and 2 classes: 5,551,802 parameters. Takes flat features ``(D,)``.

    Args:
        hidden: sizes of the hidden layers (the default is the paper's).
    """
    return _perceptron("mlp3", input_shape, num_classes, hidden)


def _perceptron(
    name: str, input_shape: Sequence[int], num_classes: int, hidden: Sequence[int]
) -> Backbone:
    """Flatten, then Linear ReLU for each size in ``hidden``; head Linear(last, U)."""
    shape = check_shape(name, input_shape)
    flat_dim, hidden = prod(shape), tuple(hidden)
    encoder = nn.Sequential(OrderedDict(flatten=nn.Flatten(), fc=fc_layers(flat_dim, hidden)))
    feature_dim = hidden[-1] if hidden else flat_dim
    return Backbone(encoder, feature_dim, num_classes, shape, name=name)
