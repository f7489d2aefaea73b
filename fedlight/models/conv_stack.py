"""Conv stacks and fully-connected stacks the zoo's plain CNNs (and VGG, AlexNet, HAR-CNN) are
built from, from one conv-stack description.

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
from fedlight.models.backbone import Backbone, image_shape


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
