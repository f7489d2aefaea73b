"""The TensorFlow-tutorial CNN MAP runs on CIFAR-10."""

from __future__ import annotations

from collections.abc import Sequence

from fedlight.models.backbone import Backbone
from fedlight.models.conv_stack import POOL, Conv, LayerSpec, conv_backbone
from fedlight.models.zoo import register_backbone

TF_CNN: tuple[LayerSpec, ...] = (Conv(32, 3), POOL, Conv(64, 3), POOL, Conv(64, 3))


@register_backbone
def tfcnn(input_shape: Sequence[int], num_classes: int) -> Backbone:
    """The TensorFlow-tutorial CNN MAP runs on CIFAR-10 ("TFCNN").

    Conv(C, 32, 3) ReLU MaxPool, Conv(32, 64, 3) ReLU MaxPool, Conv(64, 64, 3) ReLU, flatten
    (64 x 4 x 4 = 1024 for 32x32), Linear(-, 64) ReLU is the 64-d feature; head Linear(64, U).
    No padding; inputs under 18x18 are refused. (MAP's released code instead pads every conv,
    pools after the third and puts the head on the 1024-d flattened map.)
    """
    return conv_backbone("tfcnn", input_shape, num_classes, TF_CNN, fc_dims=(64,))
