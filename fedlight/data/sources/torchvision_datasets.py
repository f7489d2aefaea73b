"""torchvision's datasets read from a ``root`` folder: ``MNIST``, ``FashionMNIST``, ``CIFAR10``,
``CIFAR100`` (downloaded into it only when asked to)."""

from __future__ import annotations

import functools
import os
from abc import abstractmethod
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedlight.core.errors import ConfigError, DownloadError, MissingFileError
from fedlight.data.sources.base import SourceData, from_arrays
from fedlight.data.sources.image_source import DownloadableImageSource

__all__ = ["CIFAR10", "CIFAR100", "FashionMNIST", "MNIST", "TorchvisionSource"]


def _images_to_tensor(data: object) -> torch.Tensor:
    """torchvision's `.data` array to float32 (N, C, H, W) in [0, 1]. MNIST-like data is a
    uint8 (N, H, W) tensor, CIFAR data a uint8 (N, H, W, C) numpy array."""
    if isinstance(data, torch.Tensor):
        images = data.unsqueeze(1) if data.ndim == 3 else data
    else:
        array = np.asarray(data)
        images = torch.from_numpy(np.ascontiguousarray(array.transpose(0, 3, 1, 2)))
    return images.to(torch.float32).div_(255.0)


def _expected_folder(dataset_cls: type, root: str) -> str:
    """Where torchvision looks for the files of `dataset_cls` under `root`."""
    base = getattr(dataset_cls, "base_folder", None)  # CIFAR
    return os.path.join(root, base) if base else os.path.join(root, dataset_cls.__name__, "raw")


def _open_split(name: str, dataset_cls: type, root: str, train: bool, download: bool) -> Any:
    """Construct the torchvision dataset, turning its errors into ones that say what to do."""
    try:
        return dataset_cls(root, train=train, download=download)
    except (RuntimeError, OSError) as err:
        if download:
            raise DownloadError(
                f"could not download data source '{name}' into {root}: {err}. Without network "
                f"access, put the files in {_expected_folder(dataset_cls, root)} yourself"
            ) from err
        raise MissingFileError(_missing_message(name, dataset_cls, root) + f" ({err})") from err


def _missing_message(name: str, dataset_cls: type, root: str) -> str:
    return (
        f"data source '{name}' not found (or its files failed torchvision's checks) in "
        f"{_expected_folder(dataset_cls, root)}; set `download: true` "
        f"(data.source.init_args.download) to fetch it into {root}, or put the files there"
    )


@functools.lru_cache(maxsize=2)
def _load_torchvision(name: str, class_name: str, num_classes: int, root: str,
                      download: bool) -> SourceData:
    import torchvision.datasets

    dataset_cls = getattr(torchvision.datasets, class_name)
    if not download and not os.path.isdir(_expected_folder(dataset_cls, root)):
        raise MissingFileError(_missing_message(name, dataset_cls, root))
    train = _open_split(name, dataset_cls, root, True, download)
    test = _open_split(name, dataset_cls, root, False, False)
    return from_arrays(
        _images_to_tensor(train.data),
        train.targets,
        num_classes,
        _images_to_tensor(test.data),
        test.targets,
    )


class TorchvisionSource(DownloadableImageSource):
    """A torchvision dataset read from ``root`` (its own train and test splits).

    root: the folder torchvision reads the dataset from (and downloads it into).
    """

    def read(self, seed: int) -> SourceData:
        if self.root is None:
            raise ConfigError(
                f"data source '{self.name}' is read from a folder but no root was given; set "
                "root (data.source.init_args.root) to a folder (and `download: true` to fetch "
                "the files into it)"
            )
        root = str(Path(self.root).expanduser().resolve())
        class_name, num_classes = self.dataset
        return _load_torchvision(self.name, class_name, num_classes, root, bool(self.download))

    @property
    @abstractmethod
    def dataset(self) -> tuple[str, int]:
        """The torchvision.datasets class name and the number of classes."""


class MNIST(TorchvisionSource):
    """torchvision's MNIST (60,000 + 10,000 digits, 1 x 28 x 28), read from root."""

    name = "mnist"
    dataset = ("MNIST", 10)


class FashionMNIST(TorchvisionSource):
    """torchvision's FashionMNIST (60,000 + 10,000 clothes, 1 x 28 x 28), read from root."""

    name = "fmnist"
    dataset = ("FashionMNIST", 10)


class CIFAR10(TorchvisionSource):
    """torchvision's CIFAR-10 (50,000 + 10,000 images, 3 x 32 x 32), read from root."""

    name = "cifar10"
    dataset = ("CIFAR10", 10)


class CIFAR100(TorchvisionSource):
    """torchvision's CIFAR-100 (50,000 + 10,000 images, 100 classes), read from root."""

    name = "cifar100"
    dataset = ("CIFAR100", 100)
