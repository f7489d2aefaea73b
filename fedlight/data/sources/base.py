"""Data sources: whole datasets as in-memory tensors, one class per source.

A source is a class_path object of a config's ``data.source`` (``class_path: CIFAR10``); its
constructor takes the source's own options (a folder ``root``, ``download``, ...). Its
:meth:`Source.load` returns a `SourceData` holding the train split (and the dataset's own
test split where it has one) as float32 tensors, standardized per channel with the train
split's statistics. Partitioning into clients happens elsewhere
(``fedlight.data.partitions``).

A new source is one file in ``fedlight/data/sources/``: a subclass of `Source` (or of
``ImageSource`` for images) with a ``name`` and a ``read(seed)``; defining it registers it
(``SOURCES``) and makes its class name a short ``class_path``.

Loads are cached per argument set, so repeated calls return the *same* tensors: callers must
not modify a returned ``SourceData``'s tensors in place (use ``x.clone()`` or out-of-place
ops).
"""

from __future__ import annotations

import dataclasses
import functools
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from fedlight.core.errors import ConfigError
from fedlight.core.paths import ConfigPath
from fedlight.data.plugin import Plugin, from_record
from fedlight.data.sources.cache import cache_writes_on_success

__all__ = ["SOURCES", "STD_FLOOR", "DownloadableSource", "Source", "SourceData", "as_source",
           "from_arrays", "labels_tensor", "resized", "standardize"]

STD_FLOOR = 1e-6  # channels with a smaller std are left unscaled (constant features)


@dataclass(frozen=True, eq=False)
class SourceData:
    """A whole dataset, normalized, in memory.

    Frozen because loads are cached and shared: replace fields with
    `dataclasses.replace`, never mutate the tensors in place.
    """

    x_train: torch.Tensor  # float32 (N, C, H, W) images, (N, C, T) signals or (N, D) vectors;
    # int64 (N, L) token ids for text and character sequences (never standardized)
    y_train: torch.Tensor  # int64, (N,)
    x_test: torch.Tensor | None  # the dataset's own test split, None where it has none
    y_test: torch.Tensor | None
    num_classes: int
    domains_train: np.ndarray | None = None  # int domain id per train sample
    domains_test: np.ndarray | None = None
    domain_names: list[str] | None = None
    # A source that comes already split into clients (``pfllib``): per-client (train, test)
    # index arrays into x_train; the data module then uses it instead of a partitioner.
    client_splits: tuple[tuple[np.ndarray, np.ndarray], ...] | None = None
    # Who made each sample (a LEAF writer, a play role, a subject): int64 ids in one id space
    # for train and test; the Natural partition gives each group its own client.
    groups_train: np.ndarray | None = None
    groups_test: np.ndarray | None = None
    group_names: list[str] | None = None
    # Token-sequence sources: x holds int64 token ids (0 = padding), vocab maps id -> token.
    vocab: list[str] | None = None
    # Per-channel (mean, std), each shaped (1, C, 1, 1), with which images whose pixels were
    # in [0, 1] became x (x = (pixels - mean) / std); None where the inputs are not such
    # images (synthetic features, token ids). an image source's ``domain_transforms`` need it.
    pixel_standardization: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample, e.g. ``(1, 28, 28)``."""
        return tuple(self.x_train.shape[1:])




#: Every source class by its name (``mnist5k``, ``cifar10``): filled as each is defined.
SOURCES: dict[str, type[Source]] = {}


class Source(Plugin, ABC):
    """A dataset a federation is built from: a config's ``data.source``.

    A subclass sets ``name`` (the short name of run folders and messages) and implements
    :meth:`read`; its constructor arguments are its options, each kept as the attribute of the
    same name (they are what :meth:`record` writes into a run's config.json).
    """

    #: The source's name in run names, messages and a run's partition.json (``cifar10``).
    name: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in vars(cls) and cls.name:  # intermediate bases set no name
            if SOURCES.get(cls.name, cls) is not cls:
                raise ValueError(f"data source {cls.name!r} is defined twice: "
                                 f"{SOURCES[cls.name].__qualname__} and {cls.__qualname__}")
            SOURCES[cls.name] = cls

    def load(self, seed: int = 0) -> SourceData:
        """The whole dataset, normalized; ``seed`` seeds what a source draws (``Synthetic``'s
        samples, ``domain_transforms``' domains), fixed data ignore it. A decoded-image cache
        file is written only when the whole source loaded: a bad file in one split leaves no
        cache of another.

        Returns:
            A `SourceData` shared with other callers that asked for the same thing: do not
            modify its tensors in place.
        """
        with cache_writes_on_success():
            return self.read(int(seed))

    @abstractmethod
    def read(self, seed: int) -> SourceData:
        """The dataset as :meth:`load` returns it (without the cache-write guard)."""


def as_source(value: Source | Mapping[str, Any]) -> Source:
    """A Source, or the one a ``{"class_path": ..., "init_args": {...}}`` mapping describes
    (class_path a class name such as ``CIFAR10`` or a full path)."""
    return from_record(value, Source, SOURCES, "source")


# ---------------------------------------------------------------------------- normalization


def standardize(
    x_train: torch.Tensor, x_test: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None, tuple[torch.Tensor, torch.Tensor]]:
    """Standardize in place per channel (dim 1) with the train split's mean and std; also
    returns that (mean, std)."""
    dims = [d for d in range(x_train.ndim) if d != 1]
    std, mean = torch.std_mean(x_train, dim=dims, keepdim=True)
    std = torch.where(std > STD_FLOOR, std, torch.ones_like(std))
    x_train.sub_(mean).div_(std)
    if x_test is not None:
        x_test.sub_(mean).div_(std)
    return x_train, x_test, (mean, std)


def labels_tensor(y: object) -> torch.Tensor:
    return torch.as_tensor(np.asarray(y), dtype=torch.int64)


def from_arrays(
    x_train: torch.Tensor,
    y_train: object,
    num_classes: int,
    x_test: torch.Tensor | None = None,
    y_test: object | None = None,
    pixels: bool = True,
) -> SourceData:
    """Standardize float32 inputs and pack them; `pixels` says they are images scaled to
    [0, 1] (the standardization is then recorded)."""
    x_train, x_test, standardization = standardize(x_train, x_test)
    return SourceData(
        x_train=x_train,
        y_train=labels_tensor(y_train),
        x_test=x_test,
        y_test=None if y_test is None else labels_tensor(y_test),
        num_classes=num_classes,
        pixel_standardization=standardization if pixels else None,
    )


@functools.lru_cache(maxsize=2)
def resized(data: SourceData, size: int, name: str) -> SourceData:
    """`data` with its images resized to size x size (the same object when they already have
    that size). Pixels are resized in [0, 1] and standardized again; inputs that are not
    pixels (a PFLlib folder's, normalized by its generator) are resized as they are."""
    if data.x_train.ndim != 4 or not data.x_train.is_floating_point():
        raise ConfigError(f"image_size applies to image sources; {name} gives inputs of "
                          f"shape {tuple(data.x_train.shape[1:])}")
    if tuple(data.x_train.shape[-2:]) == (size, size):
        return data
    mean, std = data.pixel_standardization or (0.0, 1.0)

    def resize(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x * std + mean, size=(size, size), mode="bilinear",
                             antialias=True, align_corners=False)

    x_test = None if data.x_test is None else resize(data.x_test)
    if data.pixel_standardization is None:
        return dataclasses.replace(data, x_train=resize(data.x_train), x_test=x_test)
    fresh = from_arrays(resize(data.x_train), data.y_train, data.num_classes, x_test,
                         data.y_test)
    return dataclasses.replace(data, x_train=fresh.x_train, x_test=fresh.x_test,
                               pixel_standardization=fresh.pixel_standardization)


class DownloadableSource(Source):
    """A source read from its publisher's files in the folder ``root`` (each source's
    description says which), which it can download there.

    Args:
        root: the folder of the source's files. In a config file a relative path is relative
            to the file's folder.
        download: download the files into root when they are missing.
    """

    def __init__(self, root: ConfigPath | str | None = None, download: bool = False) -> None:
        self.root = root
        self.download = download
