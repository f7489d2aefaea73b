"""Backbones on sensor signals ``(C, T)``: the HAR-CNN of GPFL's HAR experiments."""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Sequence

from torch import nn

from fedlight.core.errors import ConfigError
from fedlight.models.backbone import Backbone, check_shape
from fedlight.models.conv_stack import POOL, Conv, LayerSpec, fc_backbone, spatial_size
from fedlight.models.zoo import register_backbone

HAR_CNN: tuple[LayerSpec, ...] = (Conv(32, 9), POOL, Conv(64, 9), POOL)


def _temporal_layers(in_channels: int, spec: Sequence[LayerSpec]) -> nn.Sequential:
    """Conv1d ReLU for each ``Conv`` of ``spec`` and MaxPool1d(2) for each ``POOL``."""
    layers: list[nn.Module] = []
    for item in spec:
        if item == POOL:
            layers.append(nn.MaxPool1d(2))
            continue
        layers += [nn.Conv1d(in_channels, item.out_channels, item.kernel_size,
                             padding=item.padding), nn.ReLU()]
        in_channels = item.out_channels
    return nn.Sequential(*layers)


@register_backbone
def har_cnn(
    input_shape: Sequence[int],
    num_classes: int,
    fc_dims: Sequence[int] = (1024, 512),
    all_fc_head: bool = False,
) -> Backbone:
    """HAR-CNN as GPFL (Zhang et al., ICCV 2023, Table 3) and PFLlib run it on UCI-HAR.

    Input: ``(C, T)`` inertial signals, UCI-HAR's 9 channels x 128 steps. Conv1d(C, 32, 9)
    ReLU MaxPool(2), Conv1d(32, 64, 9) ReLU MaxPool(2), flatten (64 x 26 = 1664 for T = 128),
    Linear(1664, 1024) ReLU, Linear(1024, 512) ReLU is the 512-d feature; head Linear(512, U).
    PFLlib writes the convolutions as Conv2d with (1, 9) kernels over a (C, 1, T) input; the
    Conv1d here is the same computation. 2,253,958 parameters for 9 x 128 and 6 classes.

    Args:
        fc_dims: the hidden FC sizes (default PFLlib's 1024 and 512).
        all_fc_head: False (default): head = the last Linear on the 512-d feature. True: the
            head is the whole FC stack on the 1664-d conv feature (``head.fc``, ``head.out``),
            the cut GPFL's released code makes (it takes the model's ``fc`` stack as the head).
    """
    shape = check_shape("har_cnn", input_shape)
    if len(shape) != 2:
        raise ConfigError(
            f"backbone 'har_cnn' takes signals of shape (C, T), e.g. (9, 128), got input shape "
            f"{shape}"
        )
    channels, steps = shape
    out_steps = spatial_size(steps, HAR_CNN)
    if not out_steps:
        smallest = next(s for s in itertools.count(1) if spatial_size(s, HAR_CNN))
        raise ConfigError(f"backbone 'har_cnn' cannot take input shape {shape}: its "
                         f"convolutions and poolings need at least {smallest} time steps")
    parts: OrderedDict[str, nn.Module] = OrderedDict(
        features=_temporal_layers(channels, HAR_CNN), flatten=nn.Flatten()
    )
    flat_dim = HAR_CNN[-2].out_channels * out_steps
    return fc_backbone("har_cnn", shape, num_classes, parts, flat_dim, tuple(fc_dims),
                       all_fc_head=all_fc_head)
