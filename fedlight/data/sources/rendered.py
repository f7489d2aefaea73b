"""Printed digits rendered offline from the fonts matplotlib ships: the SynthDigits-like and
SVHN-like domains of the ``digits5`` stand-in (:mod:`fedlight.data.sources.crossdomain`).

Glyphs come from the 21 fonts of ``matplotlib/mpl-data/fonts/ttf`` that have digits (DejaVu
Sans / Sans Mono / Serif and STIXGeneral in four weights each, Computer Modern roman, bold,
sans, typewriter and italic), rasterized once with matplotlib's own FreeType build, so the
images depend on the matplotlib version only, never on the fonts a machine has installed.
Each image is a labelled digit near the centre of a ``32 x 32`` canvas with, as in
house-number crops, parts of neighbouring digits at the sides; size, rotation, shear,
position, colours, background, blur and noise are drawn per image from a :class:`Style`.
:func:`texture_patches` cuts the photo crops both the SVHN-like backgrounds and the MNIST-M-like
blends use.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["FONT_FILES", "SVHN_LIKE", "SYNTH_LIKE", "Style", "glyph_bank", "render_digits",
           "texture_patches"]

FONT_FILES: tuple[str, ...] = (
    "DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSans-Oblique.ttf",
    "DejaVuSans-BoldOblique.ttf", "DejaVuSansMono.ttf", "DejaVuSansMono-Bold.ttf",
    "DejaVuSansMono-Oblique.ttf", "DejaVuSansMono-BoldOblique.ttf", "DejaVuSerif.ttf",
    "DejaVuSerif-Bold.ttf", "DejaVuSerif-Italic.ttf", "DejaVuSerif-BoldItalic.ttf",
    "STIXGeneral.ttf", "STIXGeneralBol.ttf", "STIXGeneralItalic.ttf", "STIXGeneralBolIta.ttf",
    "cmr10.ttf", "cmb10.ttf", "cmss10.ttf", "cmtt10.ttf", "cmti10.ttf",
)
CANVAS = 48  # glyph bank resolution (square)
GLYPH_HEIGHT = 40  # every glyph is scaled to this height in the bank
SIZE = 32


@dataclass(frozen=True)
class Style:
    """How one rendered domain draws its images (ranges are uniform, per image).

    Attributes:
        height: digit height in pixels of the 32 x 32 image.
        rotation: maximum absolute rotation in degrees.
        shear: maximum absolute horizontal shear (fraction of the height).
        shift: maximum absolute shift of the centre digit in pixels.
        neighbour_probability: chance of a partly visible digit at each side.
        photo_background: backgrounds cut from the sample photographs (else flat colour with
            a linear gradient).
        contrast: minimum and maximum foreground-background distance per channel.
        blur: maximum Gaussian blur sigma in pixels (0 = sharp).
        noise: standard deviation of the pixel noise.
    """

    height: tuple[float, float]
    rotation: float
    shear: float
    shift: float
    neighbour_probability: float
    photo_background: bool
    contrast: tuple[float, float]
    blur: float
    noise: float


#: SynthDigits-like: clean printed digits on flat, shaded colour, mild blur
SYNTH_LIKE = Style(height=(18, 26), rotation=12, shear=0.15, shift=2,
                   neighbour_probability=0.5, photo_background=False, contrast=(0.35, 0.65),
                   blur=0.8, noise=0.02)
#: SVHN-like: house-number crops, photo backgrounds, neighbours, lower contrast, blur, noise
SVHN_LIKE = Style(height=(16, 28), rotation=8, shear=0.1, shift=3,
                  neighbour_probability=0.8, photo_background=True, contrast=(0.25, 0.55),
                  blur=1.2, noise=0.04)


def _font_path(name: str) -> str:
    import matplotlib

    return os.path.join(matplotlib.get_data_path(), "fonts", "ttf", name)


def _rasterize(name: str, digit: int) -> Tensor:
    """One glyph, tight bitmap in [0, 1]."""
    from matplotlib import ft2font

    font = ft2font.FT2Font(_font_path(name))
    font.set_size(64, 72)
    font.set_text(str(digit), 0.0)
    font.draw_glyphs_to_bitmap(antialiased=True)
    bitmap = np.asarray(font.get_image(), dtype=np.float32) / 255.0
    rows, cols = np.flatnonzero(bitmap.any(1)), np.flatnonzero(bitmap.any(0))
    return torch.from_numpy(bitmap[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1].copy())


@functools.lru_cache(maxsize=1)
def glyph_bank() -> Tensor:
    """``(fonts, 10, 1, 48, 48)``: every digit of every font, scaled to a height of 40 pixels
    (aspect kept, at most 44 wide) and centred."""
    bank = torch.zeros(len(FONT_FILES), 10, 1, CANVAS, CANVAS)
    for f, name in enumerate(FONT_FILES):
        for digit in range(10):
            glyph = _rasterize(name, digit)
            height, width = glyph.shape
            scale = min(GLYPH_HEIGHT / height, (CANVAS - 4) / width)
            new = (max(1, round(height * scale)), max(1, round(width * scale)))
            glyph = F.interpolate(glyph[None, None], size=new, mode="area")[0, 0]
            top, left = (CANVAS - new[0]) // 2, (CANVAS - new[1]) // 2
            bank[f, digit, 0, top:top + new[0], left:left + new[1]] = glyph.clamp(0, 1)
    return bank


def _uniform(rng: np.random.Generator, low: float, high: float, n: int) -> Tensor:
    return torch.from_numpy(rng.uniform(low, high, n)).float()


def _place(glyphs: Tensor, height: Tensor, angle: Tensor, shear: Tensor, dx: Tensor,
           dy: Tensor) -> Tensor:
    """Sample ``(N, 1, 48, 48)`` bank glyphs into ``(N, 1, 32, 32)`` with the given height
    (pixels), rotation (radians), shear and centre offset (pixels)."""
    # grid_sample maps output coordinates to input ones: input = A @ (output - offset)
    zoom = (GLYPH_HEIGHT / CANVAS) / (height / SIZE)
    cos, sin = torch.cos(angle), torch.sin(angle)
    a = torch.stack([torch.stack([cos, -sin + shear], -1), torch.stack([sin, cos], -1)], -2)
    a = a * zoom[:, None, None]
    offset = torch.stack([dx, dy], -1) * (2 / SIZE)
    theta = torch.cat([a, -(a @ offset[:, :, None])], -1)
    grid = F.affine_grid(theta, [len(glyphs), 1, SIZE, SIZE], align_corners=False)
    return F.grid_sample(glyphs, grid, mode="bilinear", padding_mode="zeros",
                         align_corners=False)


def _masks(labels: np.ndarray, style: Style, rng: np.random.Generator) -> Tensor:
    """Stroke coverage in [0, 1]: the labelled digit plus partial neighbours."""
    n = len(labels)
    bank = glyph_bank()
    fonts = torch.from_numpy(rng.integers(len(FONT_FILES), size=n))
    height = _uniform(rng, *style.height, n)
    angle = _uniform(rng, -style.rotation, style.rotation, n) * (np.pi / 180)
    shear = _uniform(rng, -style.shear, style.shear, n)
    dx, dy = (_uniform(rng, -style.shift, style.shift, n) for _ in range(2))
    mask = _place(bank[fonts, torch.from_numpy(labels)], height, angle, shear, dx, dy)
    for side in (-1.0, 1.0):  # the same font, size and slant, one digit pitch away
        present = torch.from_numpy(rng.random(n) < style.neighbour_probability).float()
        other = torch.from_numpy(rng.integers(10, size=n))
        pitch = height * _uniform(rng, 0.62, 0.8, n)
        neighbour = _place(bank[fonts, other], height, angle, shear, dx + side * pitch, dy)
        mask = torch.maximum(mask, neighbour * present[:, None, None, None])
    return mask


@functools.lru_cache(maxsize=1)
def _photos() -> tuple[Tensor, ...]:
    """scikit-learn's two sample photographs at scales 1, 1/2 and 1/4, each ``(3, H, W)``."""
    from sklearn.datasets import load_sample_image

    pyramids = []
    for name in ("china.jpg", "flower.jpg"):
        pixels = np.array(load_sample_image(name))  # (H, W, 3) uint8, copied: writable
        photo = torch.from_numpy(pixels).permute(2, 0, 1).float().div(255.0).contiguous()
        for factor in (1, 2, 4):
            pyramids.append(F.avg_pool2d(photo[None], factor)[0] if factor > 1 else photo)
    return tuple(pyramids)


def texture_patches(count: int, rng: np.random.Generator) -> Tensor:
    """``count`` random ``3 x 32 x 32`` crops of the sample photographs, each flipped and its
    colour channels permuted at random (12 colourings of each crop)."""
    photos = _photos()
    which = rng.integers(len(photos), size=count)
    flips = rng.random((count, 2)) < 0.5
    orders = [rng.permutation(3) for _ in range(count)]
    patches = torch.empty(count, 3, SIZE, SIZE)
    for i, p in enumerate(which):
        photo = photos[p]
        top = int(rng.integers(photo.shape[1] - SIZE + 1))
        left = int(rng.integers(photo.shape[2] - SIZE + 1))
        # index_select, not advanced indexing: the latter cost ms per call in some measurements
        patch = photo[:, top:top + SIZE, left:left + SIZE].index_select(
            0, torch.from_numpy(orders[i]))
        dims = [d for d, flip in zip((1, 2), flips[i], strict=True) if flip]
        patches[i] = patch.flip(dims) if dims else patch
    return patches


def _backgrounds(n: int, style: Style, rng: np.random.Generator) -> Tensor:
    if style.photo_background:
        return texture_patches(n, rng)
    colour = torch.from_numpy(rng.random((n, 3, 1, 1))).float()
    ramp = torch.linspace(-0.5, 0.5, SIZE)
    direction = _uniform(rng, 0, 2 * np.pi, n)
    gradient = (torch.cos(direction)[:, None, None] * ramp[None, None, :]
                + torch.sin(direction)[:, None, None] * ramp[None, :, None])
    strength = _uniform(rng, 0, 0.3, n)[:, None, None, None]
    return (colour + strength * gradient[:, None]).clamp(0, 1)


def _blur(images: Tensor, sigma: Tensor) -> Tensor:
    """Per-image Gaussian blur (separable, 5-tap), sigma in pixels (0 = unchanged)."""
    taps = torch.arange(-2, 3, dtype=torch.float32)
    weights = torch.exp(-taps[None] ** 2 / (2 * sigma.clamp(min=1e-3)[:, None] ** 2))
    weights = weights / weights.sum(1, keepdim=True)  # (N, 5); sigma -> 0 gives [0,0,1,0,0]
    n, c = images.shape[:2]
    flat = images.reshape(1, n * c, SIZE, SIZE)
    kernel = weights.repeat_interleave(c, 0)
    flat = F.conv2d(F.pad(flat, (2, 2, 0, 0), mode="replicate"), kernel[:, None, None, :],
                    groups=n * c)
    flat = F.conv2d(F.pad(flat, (0, 0, 2, 2), mode="replicate"), kernel[:, None, :, None],
                    groups=n * c)
    return flat.reshape(n, c, SIZE, SIZE)


def render_digits(labels: np.ndarray, style: Style, rng: np.random.Generator
                  ) -> tuple[Tensor, Tensor]:
    """Images ``(N, 3, 32, 32)`` in [0, 1] of the digits ``labels`` drawn in ``style``, and
    their stroke masks ``(N, 1, 32, 32)`` (the labelled digit and its neighbours)."""
    labels = np.asarray(labels, dtype=np.int64)
    n = len(labels)
    mask = _masks(labels, style, rng)
    background = _backgrounds(n, style, rng)
    offset = torch.from_numpy(rng.uniform(*style.contrast, (n, 3, 1, 1))).float()
    sign = torch.from_numpy(rng.choice([-1.0, 1.0], (n, 3, 1, 1))).float()
    # the foreground moves away from the background's mean colour: visible on any backdrop
    base = background.mean((2, 3), keepdim=True)
    foreground = torch.where(base + sign * offset > 1, base - offset,
                             torch.where(base + sign * offset < 0, base + offset,
                                         base + sign * offset)).clamp(0, 1)
    images = background * (1 - mask) + foreground * mask
    images = _blur(images, _uniform(rng, 0, style.blur, n))
    noise = torch.from_numpy(rng.standard_normal((n, 3, SIZE, SIZE))).float() * style.noise
    return (images + noise).clamp(0, 1), mask
