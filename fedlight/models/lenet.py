"""LeNet-5."""

from __future__ import annotations

from collections.abc import Sequence

from fedlight.models.backbone import Backbone, image_shape
from fedlight.models.conv_stack import POOL, Conv, conv_backbone
from fedlight.models.zoo import register_backbone


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
