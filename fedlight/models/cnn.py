"""Small plain CNNs and the MLP of the pFL papers, built from one conv-stack description.

A conv stack is written as a list of layer specs, bottom first: ``Conv(out, kernel, padding)``
(a stride-1 convolution, optionally BatchNorm2d, then ReLU) or ``POOL`` (2x2 max-pool, stride 2).
The same list builds the layers and computes the flattened size for a given input shape, so a
too-small input is refused up front with the smallest size that works.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from math import prod

from torch import nn

from fedlight.core.errors import ConfigError
from fedlight.models.backbone import Backbone, check_shape, image_shape
from fedlight.models.zoo import register_backbone


@dataclass(frozen=True)
class Conv:
    """A stride-1 convolution with ``out_channels`` filters of ``kernel_size``, then ReLU."""

    out_channels: int
    kernel_size: int
    padding: int = 0


POOL = "M"
"""A 2x2 max-pool with stride 2 (the letter torchvision's VGG configs use)."""

LayerSpec = Conv | str


def conv_layers(
    in_channels: int, spec: Sequence[LayerSpec], batch_norm: bool = False
) -> nn.Sequential:
    """The layers of ``spec``: each ``Conv`` is Conv2d [BatchNorm2d] ReLU, ``POOL`` MaxPool2d."""
    layers: list[nn.Module] = []
    channels = in_channels
    for item in spec:
        if item == POOL:
            layers.append(nn.MaxPool2d(2))
            continue
        layers.append(
            nn.Conv2d(channels, item.out_channels, item.kernel_size, padding=item.padding)
        )
        if batch_norm:
            layers.append(nn.BatchNorm2d(item.out_channels))
        layers.append(nn.ReLU())
        channels = item.out_channels
    return nn.Sequential(*layers)


def fc_layers(in_features: int, dims: Sequence[int], batch_norm: bool = False) -> nn.Sequential:
    """Hidden fully-connected layers: Linear [BatchNorm1d] ReLU for each size in ``dims``."""
    layers: list[nn.Module] = []
    for dim in dims:
        layers.append(nn.Linear(in_features, dim))
        if batch_norm:
            layers.append(nn.BatchNorm1d(dim))
        layers.append(nn.ReLU())
        in_features = dim
    return nn.Sequential(*layers)


def spatial_size(size: int, spec: Sequence[LayerSpec]) -> int:
    """Height (or width) after ``spec`` for an input of ``size``; 0 if it collapses on the way."""
    for item in spec:
        size = size // 2 if item == POOL else size + 2 * item.padding - item.kernel_size + 1
        if size < 1:
            return 0
    return size


def conv_output_shape(
    name: str, input_shape: Sequence[int], spec: Sequence[LayerSpec]
) -> tuple[int, int, int]:
    """``(C, H, W)`` after the conv stack ``spec`` on one input of ``input_shape``.

    Raises:
        ValueError: ``input_shape`` is not ``(C, H, W)``, or is too small for ``spec``; the
            message names backbone ``name``, the shape and the smallest height/width that fits.
    """
    channels, height, width = image_shape(name, input_shape)
    out_h, out_w = spatial_size(height, spec), spatial_size(width, spec)
    if not (out_h and out_w):
        smallest = next(s for s in itertools.count(1) if spatial_size(s, spec))
        raise ConfigError(
            f"backbone {name!r} cannot take input shape {tuple(input_shape)}: its convolutions "
            f"and poolings need height and width of at least {smallest}"
        )
    out_channels = [item.out_channels for item in spec if isinstance(item, Conv)]
    return (out_channels[-1] if out_channels else channels), out_h, out_w


def conv_backbone(
    name: str,
    input_shape: Sequence[int],
    num_classes: int,
    spec: Sequence[LayerSpec],
    fc_dims: Sequence[int],
    batch_norm: bool = False,
    all_fc_head: bool = False,
) -> Backbone:
    """A backbone whose encoder is conv stack ``spec``, flatten, then hidden FC ``fc_dims``.

    The encoder's submodules are ``features`` (the conv stack), ``flatten`` and, when
    ``fc_dims`` is non-empty, ``fc``; the feature is the last hidden FC's output after its ReLU
    (or the flattened conv output when ``fc_dims`` is empty). ``batch_norm`` adds BatchNorm after
    every convolution and hidden FC, before the ReLU. The head is ``Linear(feature_dim, U)``;
    with ``all_fc_head`` the hidden FC layers move to the head instead (``head.fc``, then
    ``head.out`` = the last Linear) and the feature is the flattened conv output.

    These plain conv stacks train 1.1-1.3x faster per sample on a CPU in the ``channels_last``
    memory format (cnn, cnn_bn, lenet, tfcnn, digit_cnn, femnist_cnn, vgg8_bn, vgg11 measured
    with one thread; vgg8 1.02x), so they say so (``Backbone.channels_last``).
    """
    shape = image_shape(name, input_shape)
    flat_dim = prod(conv_output_shape(name, shape, spec))
    parts: OrderedDict[str, nn.Module] = OrderedDict(
        features=conv_layers(shape[0], spec, batch_norm), flatten=nn.Flatten()
    )
    return fc_backbone(name, shape, num_classes, parts, flat_dim, fc_dims, batch_norm,
                       all_fc_head, channels_last=True)


def fc_backbone(
    name: str,
    input_shape: Sequence[int],
    num_classes: int,
    parts: OrderedDict[str, nn.Module],
    flat_dim: int,
    fc_dims: Sequence[int],
    batch_norm: bool = False,
    all_fc_head: bool = False,
    channels_last: bool = False,
) -> Backbone:
    """A backbone from ``parts`` (named modules giving a ``flat_dim`` vector), hidden FC
    ``fc_dims`` and a last Linear; the cut follows ``all_fc_head`` as in ``conv_backbone``;
    ``channels_last`` as in ``Backbone``."""
    fc = fc_layers(flat_dim, fc_dims, batch_norm) if fc_dims else None
    last = nn.Linear(fc_dims[-1] if fc_dims else flat_dim, num_classes)
    if all_fc_head and fc is not None:
        head: nn.Module = nn.Sequential(OrderedDict(fc=fc, out=last))
        return Backbone(nn.Sequential(parts), flat_dim, num_classes, input_shape, name=name,
                        head=head, channels_last=channels_last)
    if fc is not None:
        parts["fc"] = fc
    return Backbone(nn.Sequential(parts), last.in_features, num_classes, input_shape,
                    name=name, head=last, channels_last=channels_last)


FEDAVG_CNN: tuple[LayerSpec, ...] = (Conv(32, 5), POOL, Conv(64, 5), POOL)
TF_CNN: tuple[LayerSpec, ...] = (Conv(32, 3), POOL, Conv(64, 3), POOL, Conv(64, 3))


@register_backbone
def cnn(input_shape: Sequence[int], num_classes: int) -> Backbone:
    """The 4-layer CNN of FedAvg / GPFL ("FedAvgCNN"), no padding, no BatchNorm.

    Conv(C, 32, 5) ReLU MaxPool2, Conv(32, 64, 5) ReLU MaxPool2, flatten, Linear(-, 512) ReLU
    is the 512-d feature; head Linear(512, U). The flattened size follows ``input_shape``:
    1024 for 28x28, 1600 for 32x32; inputs under 16x16 are refused.
    """
    return conv_backbone("cnn", input_shape, num_classes, FEDAVG_CNN, fc_dims=(512,))


@register_backbone
def cnn_bn(input_shape: Sequence[int], num_classes: int) -> Backbone:
    """``cnn`` with BatchNorm: BN2d after each conv, BN1d after the FC, each before its ReLU.

    It is the FedAvg CNN with BatchNorm added, not FedBN's digits model (that is
    ``digit_cnn``: 8192 conv features at 32x32, the feature size FedPick's paper reports on
    Digits-Five).

    Its running statistics are buffers under ``encoder.``, so FedBN keeps them private by name
    like any other tensor.
    """
    return conv_backbone(
        "cnn_bn", input_shape, num_classes, FEDAVG_CNN, fc_dims=(512,), batch_norm=True
    )


DIGIT_CNN: tuple[LayerSpec, ...] = (Conv(64, 5, 2), POOL, Conv(64, 5, 2), POOL, Conv(128, 5, 2))


@register_backbone
def digit_cnn(input_shape: Sequence[int], num_classes: int, all_fc_head: bool = False
              ) -> Backbone:
    """The digits CNN of FedBN (Li et al., ICLR 2021), which FedPick runs on Digits-Five.

    Conv(C, 64, 5, pad 2) BN ReLU MaxPool2, Conv(64, 64, 5, pad 2) BN ReLU MaxPool2,
    Conv(64, 128, 5, pad 2) BN ReLU, flatten (128 x 8 x 8 = 8192 at 32x32), then the
    fully-connected stack Linear(8192, 2048) BN1d ReLU, Linear(2048, 512) BN1d ReLU,
    Linear(512, U).

    Args:
        all_fc_head: False (default, the zoo's contract): the encoder ends with the FC stack's
            512-d output, the head is Linear(512, U). True: the feature is the 8192-d conv
            output and the head is the whole FC stack, FedPick's layout on Digits-Five (its
            mask acts on the conv features); methods that need a linear head (FedAwS, GPFL,
            FedRoD...) need the default.

    Heavy next to ``cnn_bn``: 18.2M parameters (16.8M in the first FC) and ~8x the
    multiply-adds per 32x32 sample. The FC stack holds BatchNorm1d layers: FedBN (by module
    type) keeps them private.
    """
    return conv_backbone("digit_cnn", input_shape, num_classes, DIGIT_CNN, fc_dims=(2048, 512),
                         batch_norm=True, all_fc_head=all_fc_head)


@register_backbone
def lenet(input_shape: Sequence[int], num_classes: int, hidden: Sequence[int] = (120, 84),
          feature_relu: bool = True) -> Backbone:
    """LeNet-5: Conv(C, 6, 5) ReLU MaxPool, Conv(6, 16, 5) ReLU MaxPool, FC 120, FC 84, head.

    Inputs smaller than 32x32 (MNIST's 28x28) get padding 2 on the first conv, as LeNet-5
    padded MNIST to 32x32; the flattened size is then 16 x 5 x 5 = 400 for both. The feature
    is the 84-d output of the second FC after its ReLU; the head is Linear(84, U).

    Args:
        hidden: the FC sizes after the conv stack (Linear ReLU each); the last is the
            feature. MAP's feature plots (Figs. 5 and 8) set "the final hidden dimension as
            2": ``hidden: [120, 2]``.
        feature_relu: False drops the ReLU after the last hidden FC, so the feature can be
            negative (MAP's Figs. 5 and 8 show LeNet with and without it).
    """
    _, height, width = image_shape("lenet", input_shape)
    padding = 2 if min(height, width) < 32 else 0
    spec = (Conv(6, 5, padding), POOL, Conv(16, 5), POOL)
    backbone = conv_backbone("lenet", input_shape, num_classes, spec, fc_dims=tuple(hidden))
    if hidden and not feature_relu:
        del backbone.encoder.fc[-1]
    return backbone


@register_backbone
def tfcnn(input_shape: Sequence[int], num_classes: int) -> Backbone:
    """The TensorFlow-tutorial CNN MAP runs on CIFAR-10 ("TFCNN").

    Conv(C, 32, 3) ReLU MaxPool, Conv(32, 64, 3) ReLU MaxPool, Conv(64, 64, 3) ReLU, flatten
    (64 x 4 x 4 = 1024 for 32x32), Linear(-, 64) ReLU is the 64-d feature; head Linear(64, U).
    No padding; inputs under 18x18 are refused. (MAP's released code instead pads every conv,
    pools after the third and puts the head on the 1024-d flattened map.)
    """
    return conv_backbone("tfcnn", input_shape, num_classes, TF_CNN, fc_dims=(64,))


FEMNIST_CNN: tuple[LayerSpec, ...] = (Conv(32, 5, 2), POOL, Conv(64, 5, 2), POOL)


@register_backbone
def femnist_cnn(input_shape: Sequence[int], num_classes: int, all_fc_head: bool = False,
                fc_dims: Sequence[int] = (512,)) -> Backbone:
    """FeMnistNet, the FEMNIST CNN of "Aggregate or Not?" (Li et al., arXiv:2107.11954, Fig. 4).

    LEAF's FEMNIST CNN with its first FC narrowed from 2048 to 512 (the paper, Sec. 5.3):
    Conv(C, 32, 5, pad 2) ReLU MaxPool2, Conv(32, 64, 5, pad 2) ReLU MaxPool2, flatten
    (64 x 7 x 7 = 3136 at 28x28), Linear(3136, 512) ReLU, Linear(512, U). No BatchNorm, no
    dropout. 1,690,046 parameters for 1x28x28 and 62 classes.

    Args:
        all_fc_head: False (default, the zoo's contract): the feature is the 512-d output of
            the first FC after its ReLU and the head is Linear(512, U), as FedPer / FedRep /
            GPFL need. True: the paper's coarse cut ("the fully-connected layers as the
            classifier"): the feature is the 3136-d conv output and the head is both FC layers
            (``head.fc``, ``head.out``); use it for the paper's block strings ("AaB", ...).
        fc_dims: the hidden FC sizes before the last Linear. ``[]`` gives two conv layers and
            one FC layer, the network MAP describes for FEMNIST (Sec. 5.3; its code's
            FeMnistNet also average-pools the map to 4 x 4 first).
    """
    return conv_backbone("femnist_cnn", input_shape, num_classes, FEMNIST_CNN,
                         fc_dims=tuple(fc_dims), all_fc_head=all_fc_head)


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
