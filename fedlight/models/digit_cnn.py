"""The digits CNN of FedBN, which FedPick runs on Digits-Five."""

from __future__ import annotations

from collections.abc import Sequence

from fedlight.models.backbone import Backbone
from fedlight.models.conv_stack import POOL, Conv, LayerSpec, conv_backbone
from fedlight.models.zoo import register_backbone

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
