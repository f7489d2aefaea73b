"""``Digits``: scikit-learn's 1797 8 x 8 digits, offline."""

from __future__ import annotations

import functools

import torch

from fedlight.data.sources.base import SourceData, from_arrays
from fedlight.data.sources.image_source import ImageSource

__all__ = ["Digits"]


@functools.lru_cache(maxsize=1)
def _load_digits() -> SourceData:
    from sklearn.datasets import load_digits

    bunch = load_digits()  # (1797, 64) values in 0..16
    images = torch.as_tensor(bunch.data, dtype=torch.float32).reshape(-1, 1, 8, 8).div_(16.0)
    return from_arrays(images, bunch.target, num_classes=10)


class Digits(ImageSource):
    """scikit-learn's 1797 handwritten digits (1 x 8 x 8, no test split of their own); offline."""

    name = "digits"

    def read(self, seed: int) -> SourceData:
        return _load_digits()
