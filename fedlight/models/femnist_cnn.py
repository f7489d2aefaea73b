"""FeMnistNet, the FEMNIST CNN of "Aggregate or Not?"."""

from __future__ import annotations

from collections.abc import Sequence

from fedlight.models.backbone import Backbone
from fedlight.models.conv_stack import POOL, Conv, LayerSpec, conv_backbone
from fedlight.models.zoo import register_backbone

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
