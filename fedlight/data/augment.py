"""Random augmentation of training batches, on the device and in the dtype of the batch.

``data.augment`` names the operations (torchvision's training transforms, in their usual
order): a random crop with padding, a horizontal flip, a rotation and a colour jitter. The
data module turns them into a :class:`BatchAugmentation`, a callable ``(x, generator) -> x``
that the local loop applies to each training batch of images ``(..., C, H, W)``.

Every random number is drawn from the ``torch.Generator`` the caller passes (the loop's
per-client, per-round generator), as one tensor per parameter for the whole batch, so a round
is reproduced exactly on resume and clients and rounds see different draws. The images are
then transformed together: the three geometric operations are one affine sampling grid per
image and one ``grid_sample`` call for the batch; the jitter is a few tensor operations with a
factor per image. torchvision's ``transforms.v2`` applies one parameter draw to a whole batch,
so per-image parameters are written here with its formulas.

The batch holds standardized pixels (``(pixels - mean) / std``, see ``fedlight.data.sources``);
the fill of the crop and rotation is a black pixel and the jitter works on the pixels in
[0, 1], as torchvision's transforms on the image files would.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from fedlight.core.errors import ConfigError

__all__ = ["Augment", "BatchAugmentation", "affine_resample", "jitter_pixels"]

#: torchvision's ``rgb_to_grayscale`` weights (ITU-R 601-2 luma).
_LUMA = (0.2989, 0.587, 0.114)


@dataclass(frozen=True)
class Augment:
    """Random augmentation of every training batch (evaluation data are never augmented).

    Each image of a batch gets its own draw; every option left at its default is off.
    Example: ``{crop_padding: 4, hflip: true}`` (CIFAR's usual training transform),
    ``{hflip: true, rotation: 30}`` (FedBN's Office-Caltech-10 transform).

    Args:
        crop_padding: pad by this many (black) pixels on each side and crop back to the image
            size at a random place (torchvision's ``RandomCrop(size, padding)``); 0 = off.
        hflip: flip horizontally with probability 0.5 (``RandomHorizontalFlip``).
        rotation: rotate by an angle drawn uniformly from [-rotation, rotation] degrees about
            the centre, nearest pixel, black fill (``RandomRotation(rotation)``); 0 = off.
        color_jitter: ``[brightness, contrast, saturation]``: each factor drawn uniformly from
            [max(0, 1 - v), 1 + v] and applied in this order (``ColorJitter(b, c, s)``, whose
            order is random; hue is not offered); null = off.
    """

    crop_padding: int = 0
    hflip: bool = False
    rotation: float = 0.0
    color_jitter: Sequence[float] | None = None

    def __post_init__(self) -> None:
        if int(self.crop_padding) != self.crop_padding or self.crop_padding < 0:
            raise ConfigError(f"data.augment.crop_padding={self.crop_padding!r} is invalid; "
                              "use an integer >= 0 (0 = off)")
        if not 0 <= self.rotation <= 180:
            raise ConfigError(f"data.augment.rotation={self.rotation!r} is invalid; use "
                              "degrees in [0, 180] (0 = off)")
        jitter = self.color_jitter
        if jitter is not None and (len(jitter) != 3 or min(jitter) < 0):
            raise ConfigError(f"data.augment.color_jitter={list(jitter)!r} is invalid; use "
                              "[brightness, contrast, saturation], each >= 0")

    @property
    def active(self) -> bool:
        """Whether any operation is on."""
        return bool(self.crop_padding or self.hflip or self.rotation or self.color_jitter)

    def record(self) -> dict[str, Any]:
        """The options as plain values (for a run's recorded hyper-parameters)."""
        record = asdict(self)
        if self.color_jitter is not None:
            record["color_jitter"] = [float(v) for v in self.color_jitter]
        return record


def as_augment(value: Augment | dict[str, Any] | None) -> Augment | None:
    """``data.augment`` as given in Python or YAML: an :class:`Augment`, a mapping of its
    fields, or None."""
    if value is None or isinstance(value, Augment):
        return value
    if not isinstance(value, dict):
        raise ConfigError(f"data.augment={value!r} is invalid; give a mapping of "
                          "crop_padding, hflip, rotation, color_jitter, or null")
    unknown = sorted(set(value) - set(Augment.__dataclass_fields__))
    if unknown:
        raise ConfigError(f"data.augment has unknown option {unknown[0]!r}; valid: "
                          f"{', '.join(Augment.__dataclass_fields__)}")
    return Augment(**value)


class BatchAugmentation:
    """``augmentation(x, generator) -> x``: a random augmentation of a batch of images.

    Args:
        options: which operations, see :class:`Augment`.
        input_shape: ``(C, H, W)`` of one image.
        pixel_standardization: the source's per-channel ``(mean, std)`` (each ``(1, C, 1,
            1)``) with which the batch was standardized, or None when the inputs are not
            pixels in [0, 1] (then the fill is 0 and ``color_jitter`` is refused).
    """

    def __init__(self, options: Augment, input_shape: Sequence[int],
                 pixel_standardization: tuple[Tensor, Tensor] | None) -> None:
        if len(input_shape) != 3:
            raise ConfigError(f"data.augment needs image inputs (C, H, W); this source gives "
                              f"inputs of shape {tuple(input_shape)}")
        if options.color_jitter and pixel_standardization is None:
            raise ConfigError("data.augment.color_jitter needs a source of image pixels in "
                              "[0, 1]; this source's inputs are not pixels (use the geometric "
                              "options only)")
        self.options = options
        channels = input_shape[0]
        mean, std = pixel_standardization or (torch.zeros(1, channels, 1, 1),
                                              torch.ones(1, channels, 1, 1))
        self._mean, self._std = mean.detach().cpu(), std.detach().cpu()
        self._moved: dict[tuple[torch.device, torch.dtype], tuple[Tensor, Tensor]] = {}

    def __repr__(self) -> str:
        return f"BatchAugmentation({self.options})"

    def _standardization(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(mean, std) on x's device and in its dtype (moved once per device and dtype)."""
        key = (x.device, x.dtype)
        if key not in self._moved:
            self._moved[key] = (self._mean.to(x.device, x.dtype), self._std.to(x.device, x.dtype))
        return self._moved[key]

    def __call__(self, x: Tensor, generator: torch.Generator) -> Tensor:
        """The batch ``x`` (``(..., C, H, W)``), each image transformed with its own random
        parameters drawn from ``generator``; same shape, dtype, device and memory format."""
        options, shape = self.options, x.shape
        images = x.reshape(-1, *shape[-3:])
        n = images.shape[0]

        def uniform(*size: int) -> Tensor:
            return torch.rand(size, generator=generator, device=generator.device).to(x.device)

        mean, std = self._standardization(x)
        black = -mean / std
        flip = uniform(n) < 0.5 if options.hflip else None
        if options.crop_padding or options.rotation:
            p = options.crop_padding
            shift = (torch.randint(-p, p + 1, (n, 2), generator=generator,
                                   device=generator.device).to(x.device) if p else None)
            angle = (uniform(n) * 2 - 1) * options.rotation if options.rotation else None
            images = affine_resample(images, black, angle, flip, shift)
        elif flip is not None:
            images = torch.where(flip.view(-1, 1, 1, 1), images.flip(-1), images)
        if options.color_jitter:
            low = torch.tensor([max(0.0, 1.0 - v) for v in options.color_jitter])
            high = torch.tensor([1.0 + v for v in options.color_jitter])
            factors = low.to(x.device) + uniform(n, 3) * (high - low).to(x.device)
            images = (jitter_pixels(images * std + mean, factors.to(x.dtype)) - mean) / std
        out = images.reshape(shape)
        if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
            out = out.contiguous(memory_format=torch.channels_last)
        return out


def affine_resample(images: Tensor, fill: Tensor, angle: Tensor | None = None,
                    flip: Tensor | None = None, shift: Tensor | None = None) -> Tensor:
    """Shift, then flip, then rotate each image of ``(N, C, H, W)``, in one sampling grid.

    Args:
        images: the batch.
        fill: the value of pixels from outside the image, per channel (``(1, C, 1, 1)``).
        angle: ``(N,)`` degrees, counter-clockwise as torchvision's ``rotate``; None = 0.
        flip: ``(N,)`` bool, flip horizontally; None = none.
        shift: ``(N, 2)`` whole pixels ``(dx, dy)``: output pixel (i, j) shows input pixel
            (i + dy, j + dx), as a crop at offset (p + dy, p + dx) of the image padded by p;
            None = none.

    Nearest-pixel sampling: whole-pixel shifts, flips and quarter turns move pixels exactly.
    """
    n, _, height, width = images.shape
    dtype, device = images.dtype, images.device
    # grid coordinates are normalized to [-1, 1] per axis; rotations are made in pixel units
    to_pixels = torch.tensor([width / 2, height / 2], dtype=dtype, device=device)
    matrix = torch.eye(2, dtype=dtype, device=device).expand(n, 2, 2).clone()
    if angle is not None:
        radians = angle.to(dtype) * (math.pi / 180)
        cos, sin = torch.cos(radians), torch.sin(radians)
        # output pixel u shows input pixel R u (y pointing down): a counter-clockwise turn
        matrix = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2)
    if flip is not None:
        sign = 1 - 2 * flip.to(dtype)
        matrix = matrix * torch.stack([sign, torch.ones_like(sign)], -1).unsqueeze(-1)
    matrix = matrix * to_pixels.view(1, 1, 2) / to_pixels.view(1, 2, 1)
    offset = (torch.zeros(n, 2, dtype=dtype, device=device) if shift is None
              else shift.to(dtype) / to_pixels)
    theta = torch.cat([matrix, offset.unsqueeze(-1)], -1)
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    # a channel of ones, sampled with the images, marks the pixels that came from inside
    ones = torch.ones_like(images[:, :1])
    sampled = F.grid_sample(torch.cat([images, ones], 1), grid, mode="nearest",
                            padding_mode="zeros", align_corners=False)
    return torch.where(sampled[:, -1:] > 0, sampled[:, :-1], fill)


def jitter_pixels(pixels: Tensor, factors: Tensor) -> Tensor:
    """Brightness, contrast and saturation of each image of ``(N, C, H, W)`` pixels in [0, 1]
    with its own ``factors[i] = (b, c, s)``, by torchvision's ``adjust_brightness``,
    ``adjust_contrast`` and ``adjust_saturation`` formulas (saturation leaves grey images
    unchanged, as torchvision does)."""
    def blend(image: Tensor, other: Tensor, factor: Tensor) -> Tensor:
        ratio = factor.view(-1, 1, 1, 1)
        return (ratio * image + (1 - ratio) * other).clamp_(0, 1)

    def grey(image: Tensor) -> Tensor:
        if image.shape[1] == 1:
            return image
        weights = torch.tensor(_LUMA, dtype=image.dtype, device=image.device).view(1, 3, 1, 1)
        return (image * weights).sum(1, keepdim=True)

    pixels = blend(pixels, torch.zeros_like(pixels), factors[:, 0])
    pixels = blend(pixels, grey(pixels).mean((1, 2, 3), keepdim=True), factors[:, 1])
    if pixels.shape[1] == 3:
        pixels = blend(pixels, grey(pixels), factors[:, 2])
    return pixels
