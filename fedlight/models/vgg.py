"""VGG backbones for 32x32 images: MAP's VGG8 / VGG8-BN, VGG11-BN and VGG16-BN, and the
privatization paper's VGG11.

All use 3x3 convolutions with padding 1 and 2x2 max-pools (torchvision's VGG layers without its
adaptive pooling, dropout or 4096-wide classifier). After the five pools a 32x32 input is a
512 x 1 x 1 map, so the flattened feature is 512-d; larger inputs give 512 x (H/32) x (W/32).
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

from torch import nn

from fedlight.models.backbone import Backbone, image_shape
from fedlight.models.conv_stack import (
    POOL,
    Conv,
    LayerSpec,
    conv_backbone,
    conv_layers,
    conv_output_shape,
    fc_layers,
)
from fedlight.models.zoo import register_backbone

VGG8_CFG: tuple[int | str, ...] = (64, POOL, 128, POOL, 256, POOL, 512, POOL, 512, POOL)
"""MAP's VGG8 (``VGG(8)`` in the authors' ``networks/basic_classify_nets.py``)."""

VGG11_STAGES: tuple[tuple[int | str, ...], ...] = (
    (64, POOL, 128, POOL),
    (256, 256, POOL),
    (512, 512, POOL),
    (512, 512, POOL),
)
"""torchvision's VGG11 config "A", grouped into the four conv blocks of the fine cut."""


VGG11_CFG: tuple[int | str, ...] = tuple(c for stage in VGG11_STAGES for c in stage)

VGG16_CFG: tuple[int | str, ...] = (64, 64, POOL, 128, 128, POOL, 256, 256, 256, POOL,
                                    512, 512, 512, POOL, 512, 512, 512, POOL)
"""torchvision's VGG16 config "D" (``VGG(16)`` in MAP's code)."""


def _vgg_spec(cfg: Sequence[int | str]) -> tuple[LayerSpec, ...]:
    """Layer specs of a torchvision-style VGG config: ints are 3x3 convs (padding 1)."""
    return tuple(POOL if c == POOL else Conv(c, 3, padding=1) for c in cfg)


@register_backbone
def vgg8(input_shape: Sequence[int], num_classes: int, fc_dims: Sequence[int] = ()) -> Backbone:
    """MAP's VGG8: five 3x3 conv layers 64, M, 128, M, 256, M, 512, M, 512, M, no BatchNorm.

    The MAP paper only cites VGG; this follows the authors' released code (lxcnju/MAP,
    ``networks/basic_classify_nets.py``): no hidden FC layer, the encoder ends at the
    flattened 512-d conv feature and the head is Linear(512, U). (Their head has no bias; ours
    keeps it, like every backbone here.)

    Args:
        fc_dims: hidden FC layers (Linear ReLU each) between the conv stack and the head;
            ``(512, 512)`` gives the "conv stack + 2 FC 512 + head" reading of VGG8.
    """
    return conv_backbone("vgg8", input_shape, num_classes, _vgg_spec(VGG8_CFG), tuple(fc_dims))


@register_backbone
def vgg8_bn(input_shape: Sequence[int], num_classes: int, fc_dims: Sequence[int] = ()) -> Backbone:
    """``vgg8`` with BatchNorm2d after every conv (and BatchNorm1d after any hidden FC)."""
    spec = _vgg_spec(VGG8_CFG)
    return conv_backbone("vgg8_bn", input_shape, num_classes, spec, tuple(fc_dims), True)


@register_backbone
def vgg11_bn(input_shape: Sequence[int], num_classes: int, fc_dims: Sequence[int] = ()
             ) -> Backbone:
    """VGG11 with BatchNorm after every conv, as MAP trains it on CIFAR-10 (Fig. 6).

    torchvision's config "A" (64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M), each
    conv followed by BatchNorm2d and ReLU; the encoder ends at the flattened 512-d conv
    feature and the head is Linear(512, U), as ``VGG(11, use_bn=True)`` in the authors' code
    (``networks/basic_classify_nets.py``; its head has no bias, ours keeps it).

    Args:
        fc_dims: hidden FC layers (Linear BatchNorm1d ReLU each) before the head; none in MAP.
    """
    spec = _vgg_spec(VGG11_CFG)
    return conv_backbone("vgg11_bn", input_shape, num_classes, spec, tuple(fc_dims), True)


@register_backbone
def vgg16_bn(input_shape: Sequence[int], num_classes: int, fc_dims: Sequence[int] = ()
             ) -> Backbone:
    """VGG16 with BatchNorm after every conv, as MAP trains it on CIFAR-100 (Fig. 7).

    torchvision's config "D" (two convs of 64, two of 128, three of 256, three of 512, three
    of 512, a max-pool after each group), each conv followed by BatchNorm2d and ReLU; the
    feature is the flattened 512-d conv output at 32x32 and the head Linear(512, U), as
    ``VGG(16, use_bn=True)`` in MAP's code.

    Args:
        fc_dims: hidden FC layers (Linear BatchNorm1d ReLU each) before the head; none in MAP.
    """
    spec = _vgg_spec(VGG16_CFG)
    return conv_backbone("vgg16_bn", input_shape, num_classes, spec, tuple(fc_dims), True)


@register_backbone
def vgg11(
    input_shape: Sequence[int],
    num_classes: int,
    fc_dims: Sequence[int] = (256,),
    all_fc_head: bool = False,
) -> Backbone:
    """VGG11 without BatchNorm as in "Aggregate or Not?" (paper 002, Fig. 4), for CIFAR.

    The conv stack is torchvision's config "A"; the classifier is Linear(512, 256) ReLU
    Linear(256, U) without dropout. The paper draws both in Fig. 4, which its text does not
    carry; the FC sizes and the six block boundaries below are those of the authors' code
    (lxcnju/FedPS-AggregateOrNot: ``basic_nets.py`` ``VGG11``, ``ps_nets.py`` ``LayeredVGG11``,
    both marked "Figure.4").

    Fine cut (``blocks("fine")``): the paper's six blocks of Fig. 4 (right), bottom first:

    - A ``encoder.0``: Conv(C, 64) ReLU MaxPool, Conv(64, 128) ReLU MaxPool
    - B ``encoder.1``: Conv(128, 256) ReLU, Conv(256, 256) ReLU, MaxPool
    - C ``encoder.2``: Conv(256, 512) ReLU, Conv(512, 512) ReLU, MaxPool
    - D ``encoder.3``: Conv(512, 512) ReLU, Conv(512, 512) ReLU, MaxPool, flatten
    - E ``encoder.4``: Linear(512, 256) ReLU (the 256-d feature)
    - F ``head``: Linear(256, U)

    Coarse cut (``blocks()``): ``[encoder, head]``. By default the head is the last Linear
    only, as FedPer / FedRep / GPFL / FedRoD need. The paper's coarse cut (Fig. 4, left) puts
    *all* FC layers in the classifier: pass ``all_fc_head=True`` for it. Then ``encoder`` is the
    conv stack (blocks A-D, ``feature_dim`` 512) and ``head`` is an ``nn.Sequential`` of the
    FC blocks (``head.0`` = E, ``head.1`` = F), so it is *not* a single Linear; the fine cut
    is the same six blocks under the prefixes ``encoder.0``-``encoder.3``, ``head.0``,
    ``head.1``.

    Args:
        fc_dims: hidden FC sizes before the last Linear, one fine block each. ``()`` gives the
            VGG11 of MAP's code (head directly on the 512-d conv feature; five fine blocks).
        all_fc_head: put every FC layer in ``head`` (the paper's coarse cut), see above.
    """
    shape = image_shape("vgg11", input_shape)
    stages = [_vgg_spec(stage) for stage in VGG11_STAGES]
    flat_dim = prod(conv_output_shape("vgg11", shape, [s for stage in stages for s in stage]))
    conv_blocks = _conv_blocks(shape[0], stages)
    fc_dims = tuple(fc_dims)
    # each hidden FC takes the previous one's output (the first the conv feature)
    fc_blocks = [
        fc_layers(i, (o,)) for i, o in zip((flat_dim, *fc_dims), fc_dims, strict=False)
    ]
    last = nn.Linear(fc_dims[-1] if fc_dims else flat_dim, num_classes)
    if all_fc_head and fc_blocks:
        head: nn.Module = nn.Sequential(*fc_blocks, last)
        encoder, feature_dim = nn.Sequential(*conv_blocks), flat_dim
        head_names = [f"head.{i}" for i in range(len(head))]
    else:
        head, encoder, head_names = last, nn.Sequential(*conv_blocks, *fc_blocks), ["head"]
        feature_dim = last.in_features
    fine = [f"encoder.{i}" for i in range(len(encoder))] + head_names
    # channels_last: 1.23x per sample on a CPU (one thread, batch 64; cpu_speed.md section 3)
    return Backbone(encoder, feature_dim, num_classes, shape, name="vgg11", head=head,
                    fine_blocks=fine, channels_last=True)


def _conv_blocks(in_channels: int, stages: Sequence[Sequence[LayerSpec]]) -> list[nn.Sequential]:
    """One ``nn.Sequential`` per stage, channels chained; the last one ends with a flatten."""
    blocks = []
    for stage in stages:
        blocks.append(conv_layers(in_channels, stage))
        in_channels = [s.out_channels for s in stage if isinstance(s, Conv)][-1]
    blocks[-1].append(nn.Flatten())
    return blocks
