"""ResNet-18 for small images (CIFAR-style stem), built from torchvision's ResNet-18."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from torch import nn

from fedlight.models.backbone import Backbone, image_shape
from fedlight.models.zoo import register_backbone


@register_backbone
def resnet18(input_shape: Sequence[int], num_classes: int) -> Backbone:
    """ResNet-18 with a small-image stem, randomly initialized (no pretrained weights).

    torchvision's ``resnet18`` with its stem adapted for 32x32 inputs: a 3x3 stride-1 conv
    (taking any channel count ``C``, Kaiming-initialized like torchvision's convs) and no
    max-pool. The encoder is everything up to the globally average-pooled, flattened 512-d
    feature, with torchvision's submodule names (``encoder.conv1``, ``encoder.layer1.0.bn1``,
    ...); the head is torchvision's ``fc``, Linear(512, U). Any ``(C, H, W)`` is accepted.
    """
    from torchvision.models import resnet18 as tv_resnet18  # lazy: torchvision costs ~2 s

    shape = image_shape("resnet18", input_shape)
    net = tv_resnet18(weights=None, num_classes=num_classes)
    stem = nn.Conv2d(shape[0], 64, kernel_size=3, stride=1, padding=1, bias=False)
    nn.init.kaiming_normal_(stem.weight, mode="fan_out", nonlinearity="relu")
    encoder = nn.Sequential(
        OrderedDict(
            conv1=stem,
            bn1=net.bn1,
            relu=net.relu,
            layer1=net.layer1,
            layer2=net.layer2,
            layer3=net.layer3,
            layer4=net.layer4,
            avgpool=net.avgpool,
            flatten=nn.Flatten(),
        )
    )
    feature_dim = net.fc.in_features
    return Backbone(encoder, feature_dim, num_classes, shape, name="resnet18", head=net.fc)
