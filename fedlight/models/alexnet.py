"""AlexNet with BatchNorm after every convolution and hidden FC: FedBN's and FedPick's model for
Office-Caltech-10 and DomainNet."""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Sequence

from torch import nn

from fedlight.core.errors import ConfigError
from fedlight.models.backbone import Backbone, image_shape
from fedlight.models.conv_stack import fc_backbone
from fedlight.models.zoo import register_backbone

# (out_channels, kernel, stride, padding) of each convolution; a max-pool (3x3, stride 2)
# follows the ones marked True. torchvision's AlexNet widths, as FedBN's code.
ALEXNET_CONVS: tuple[tuple[int, int, int, int, bool], ...] = (
    (64, 11, 4, 2, True),
    (192, 5, 1, 2, True),
    (384, 3, 1, 1, False),
    (256, 3, 1, 1, False),
    (256, 3, 1, 1, True),
)
POOLED_SIZE = 6
"""Height and width of the adaptive average pool before the FC layers (torchvision's)."""


def _spatial_out(size: int) -> int:
    """Height (or width) after AlexNet's convolutions and pools; 0 if it collapses."""
    for _, kernel, stride, padding, pooled in ALEXNET_CONVS:
        size = (size + 2 * padding - kernel) // stride + 1
        if pooled and size >= 3:
            size = (size - 3) // 2 + 1
        elif pooled:
            return 0
        if size < 1:
            return 0
    return size


def _conv_stack(in_channels: int) -> nn.Sequential:
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    for i, (out, kernel, stride, padding, pooled) in enumerate(ALEXNET_CONVS, start=1):
        layers[f"conv{i}"] = nn.Conv2d(in_channels, out, kernel, stride=stride, padding=padding)
        layers[f"bn{i}"] = nn.BatchNorm2d(out)
        layers[f"relu{i}"] = nn.ReLU()
        if pooled:
            layers[f"pool{i}"] = nn.MaxPool2d(kernel_size=3, stride=2)
        in_channels = out
    return nn.Sequential(layers)


@register_backbone
def alexnet_bn(
    input_shape: Sequence[int],
    num_classes: int,
    fc_dims: Sequence[int] = (4096, 4096),
    all_fc_head: bool = False,
) -> Backbone:
    """AlexNet with BatchNorm, as FedBN (Li et al., ICLR 2021) and FedPick (Office-Caltech-10,
    DomainNet; "a BN layer after each convolutional and FC layer") use it.

    Five convolutions with torchvision's AlexNet widths, each followed by BatchNorm2d and ReLU:
    Conv(C, 64, 11, stride 4, pad 2) + MaxPool(3, 2), Conv(64, 192, 5, pad 2) + MaxPool,
    Conv(192, 384, 3, pad 1), Conv(384, 256, 3, pad 1), Conv(256, 256, 3, pad 1) + MaxPool;
    adaptive average pool to 6x6, flatten (9216), then Linear(9216, 4096) BN1d ReLU,
    Linear(4096, 4096) BN1d ReLU is the 4096-d feature (FedPick's feature size); head
    Linear(4096, U). No dropout (FedBN's code has none). Submodules: ``encoder.features``
    (``conv1``, ``bn1``, ...), ``encoder.avgpool``, ``encoder.flatten``, ``encoder.fc``.

    Inputs of 256x256 (FedPick) or 224x224 give a 7x7 or 6x6 map before the pool; any size of
    at least 63x63 is taken. Heavy: 57,063,498 parameters for 10 classes (37.8M in the first FC),
    about 0.7 GFLOPs per 224x224 image. All BatchNorm layers are modules FedBN finds by type.

    Args:
        fc_dims: the hidden FC sizes (default FedBN's two of 4096).
        all_fc_head: False (default): head = the last Linear on the 4096-d feature. True: the
            feature is the 9216-d pooled conv output and the head is the whole FC stack
            (``head.fc``, ``head.out``), the layout ``digit_cnn(all_fc_head=True)`` gives FedPick
            on Digits-Five.
    """
    shape = image_shape("alexnet_bn", input_shape)
    channels, height, width = shape
    if not (_spatial_out(height) and _spatial_out(width)):
        smallest = next(s for s in itertools.count(1) if _spatial_out(s))
        raise ConfigError(
            f"backbone 'alexnet_bn' cannot take input shape {shape}: its convolutions and "
            f"poolings need height and width of at least {smallest}"
        )
    parts: OrderedDict[str, nn.Module] = OrderedDict(
        features=_conv_stack(channels),
        avgpool=nn.AdaptiveAvgPool2d(POOLED_SIZE),
        flatten=nn.Flatten(),
    )
    flat_dim = ALEXNET_CONVS[-1][0] * POOLED_SIZE * POOLED_SIZE
    return fc_backbone("alexnet_bn", shape, num_classes, parts, flat_dim, tuple(fc_dims),
                       batch_norm=True, all_fc_head=all_fc_head)
