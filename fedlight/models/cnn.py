"""The 4-layer CNN of FedAvg / GPFL, with and without BatchNorm."""

from __future__ import annotations

from collections.abc import Sequence

from fedlight.models.backbone import Backbone
from fedlight.models.conv_stack import POOL, Conv, LayerSpec, conv_backbone
from fedlight.models.zoo import register_backbone

FEDAVG_CNN: tuple[LayerSpec, ...] = (Conv(32, 5), POOL, Conv(64, 5), POOL)


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
