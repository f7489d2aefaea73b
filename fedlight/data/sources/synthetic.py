"""``Synthetic``: seeded Gaussian classes of any shape, offline."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from fedlight.core.errors import ConfigError
from fedlight.data.sources.base import Source, SourceData, from_arrays

__all__ = ["Synthetic"]


def _class_means(rng: np.random.Generator, classes: int, shape: tuple[int, ...]) -> np.ndarray:
    """One random mean per class. Images get smooth (low-resolution, upsampled) means so
    that convolutional models can learn them as well as MLPs. Every mean has norm 3, so the
    difficulty does not depend on the shape."""
    if len(shape) == 3 and min(shape[1:]) >= 4:
        channels, height, width = shape
        coarse = rng.standard_normal((classes, channels, max(2, height // 7), max(2, width // 7)))
        means = F.interpolate(
            torch.from_numpy(coarse), size=(height, width), mode="bilinear", align_corners=False
        ).numpy()
    else:
        means = rng.standard_normal((classes, *shape))
    norms = np.linalg.norm(means.reshape(classes, -1), axis=1)
    return means * (3.0 / norms).reshape(classes, *([1] * len(shape)))


@functools.lru_cache(maxsize=8)
def _load_synthetic(seed: int, samples: int, shape: tuple[int, ...], classes: int) -> SourceData:
    if classes < 2:
        raise ConfigError(f"classes={classes} is invalid; need at least 2 classes")
    if samples < classes:
        raise ConfigError(
            f"samples={samples} is smaller than classes={classes}; "
            "need at least one sample per class"
        )
    if not shape or any(int(s) < 1 for s in shape):
        raise ConfigError(
            f"shape={shape} is invalid; give positive sizes, e.g. (1, 28, 28) or (20,)"
        )
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(samples) % classes)  # balanced: counts differ by <= 1
    means = _class_means(rng, classes, shape)
    x = means[labels] + rng.standard_normal((samples, *shape))
    return from_arrays(torch.as_tensor(x, dtype=torch.float32), labels, num_classes=classes,
                        pixels=False)


class Synthetic(Source):
    """Seeded Gaussian classes (one smooth random mean per class, unit noise), drawn with
    data.seed; no test split of their own.

    Args:
        samples: number of samples.
        shape: shape of one sample, e.g. [1, 28, 28] (images) or [20] (vectors).
        classes: number of classes (balanced: counts differ by at most one).
    """

    name = "synthetic"

    def __init__(self, samples: int = 2000, shape: Sequence[int] = (1, 28, 28),
                 classes: int = 10) -> None:
        self.samples = samples
        self.shape = tuple(int(s) for s in shape)
        self.classes = classes

    def read(self, seed: int) -> SourceData:
        return _load_synthetic(seed, int(self.samples), self.shape, int(self.classes))
