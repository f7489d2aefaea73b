"""Image files to uint8 arrays, decoded once and cached: the shared part of the image sources.

Every image source (``imagefolder``, ``tinyimagenet``, ``cinic10``, ``office_caltech10``,
``domainnet10``, ``digits5_real``) lists its files with labels in its publisher's layout and
hands them to `decode_images`, which returns one uint8 ``(N, C, H, W)`` array: ``C`` is 1 when
every file is greyscale and 3 otherwise (grey files are then replicated), and all images are
resized to ``image_size x image_size`` (bilinear, as torchvision's ``Resize``) when it is given
(otherwise they must all have the same size).

Decoding runs once per set of files: the array is saved under the user cache folder,
``$FEDLIGHT_CACHE`` when set, else ``$XDG_CACHE_HOME/fedlight`` or ``~/.cache/fedlight``, in
``images/<name>-<key>.npz``, where the key is a hash of the file list with each file's size and
modification time, and of ``image_size``: adding, removing or touching a file decodes again,
and the data folder itself may be read-only. Clearing the cache is deleting that folder (or
one of its files); nothing else refers to it. A cache file is written under a temporary name
and renamed when complete, so an interrupted run leaves no half file, and inside
`cache_writes_on_success` (every ``Source.load``) only once the whole source has loaded,
so a bad file in one split leaves no cache of another.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import torch

from fedlight.core.errors import ConfigError, DamagedFileError, DownloadError, MissingFileError
from fedlight.core.host import cpu_cores
from fedlight.data.sources.base import STD_FLOOR, SourceData
from fedlight.data.sources.cache import cached, content_key

__all__ = [
    "IMAGE_EXTENSIONS", "class_folders", "decode_images", "download_archive", "domain_source",
    "first_per_class_counts", "image_files", "require_folder", "to_source",
]

#: File endings read as images (torchvision's ``ImageFolder`` list).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
_GREY_MODES = {"1", "L", "LA", "I", "I;16", "F"}
_FILES_PER_TASK = 500
_POOL_FROM = 2000  # fewer files are decoded in this process: starting workers costs more


def image_files(folder: Path) -> list[str]:
    """The paths of the image files directly inside `folder`, sorted by name (as
    ``ImageFolder``); strings, since a Path per file costs seconds on large datasets."""
    return sorted(
        entry.path for entry in os.scandir(folder)
        if entry.is_file() and entry.name.lower().endswith(IMAGE_EXTENSIONS)
    )


def require_folder(folder: Path, source: str, layout: str, hint: str = "") -> Path:
    """`folder`, or a one-line FileNotFoundError naming it and the expected layout."""
    if not folder.is_dir():
        raise MissingFileError(
            f"data source '{source}': folder {folder} does not exist; expected {layout}"
            + (f"; {hint}" if hint else "")
        )
    return folder


def first_per_class_counts(first: int | Sequence[int] | None) -> tuple[int, int] | None:
    """A folder source's ``first_per_class`` option as (train, test) counts (one int: the same
    for both), checked; None = all files."""
    if first is None:
        return None
    counts = (first, first) if isinstance(first, int) else tuple(first)
    if len(counts) != 2 or any(int(c) != c or c < 1 for c in counts):
        raise ConfigError(f"first_per_class={first!r} is invalid; use a positive integer "
                          "or [train, test] positive integers")
    return int(counts[0]), int(counts[1])


def class_folders(
    split: Path, source: str, layout: str, classes: Sequence[str] | None = None,
    inner: str = "", first: int | None = None,
) -> tuple[list[str], np.ndarray, list[str]]:
    """The images of ``split/<class>/<inner>/*`` as (file paths, labels, class names).

    Classes are the sub-folders of `split` in sorted order (as ``ImageFolder``), or `classes`
    when given (then every one must be there, and other folders are ignored). A class folder
    with no image file is an error naming it. `first` keeps the first that many files of each
    class in file-name order (``first_per_class``).
    """
    require_folder(split, source, layout)
    found = sorted(entry.name for entry in os.scandir(split) if entry.is_dir())
    if classes is None:
        if not found:
            raise ConfigError(f"data source '{source}': {split} has no class folders; "
                             f"expected {layout}")
        classes = found
    missing = [c for c in classes if c not in found]
    if missing:
        raise ConfigError(f"data source '{source}': {split} has no class folder {missing[0]!r} "
                         f"({len(missing)} of {len(classes)} missing); expected {layout}")
    files: list[str] = []
    labels: list[np.ndarray] = []
    for label, name in enumerate(classes):
        folder = split / name / inner
        images = image_files(folder) if folder.is_dir() else []
        if not images:
            raise ConfigError(f"data source '{source}': class folder {folder} holds no image "
                             f"files ({', '.join(IMAGE_EXTENSIONS[:3])}, ...); expected {layout}")
        images = images[:first]
        files += images
        labels.append(np.full(len(images), label, dtype=np.int64))
    return files, np.concatenate(labels), list(classes)


# ---------------------------------------------------------------------------- decoding


def _decode_one(path: str, image_size: int | None, layout: str) -> np.ndarray:
    """One file as uint8 (H, W, 1) grey or (H, W, 3) colour."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            grey = image.mode in _GREY_MODES or (image.mode == "P" and _grey_palette(image))
            image = image.convert("L" if grey else "RGB")
            if image_size is not None and image.size != (image_size, image_size):
                image = image.resize((image_size, image_size), Image.Resampling.BILINEAR)
            array = np.asarray(image, dtype=np.uint8)
    except (OSError, ValueError, SyntaxError) as err:
        raise DamagedFileError(f"cannot read image {path}: {err}; expected {layout}") from None
    return array[:, :, None] if array.ndim == 2 else array


def _grey_palette(image: object) -> bool:
    palette = np.asarray(image.getpalette() or [0, 0, 0]).reshape(-1, 3)  # type: ignore[attr-defined]
    return bool(np.all(palette == palette[:, :1]))


def _decode_chunk(paths: Sequence[str], image_size: int | None, layout: str) -> list[np.ndarray]:
    return [_decode_one(p, image_size, layout) for p in paths]


def _stack(images: list[np.ndarray], paths: Sequence[str], layout: str) -> np.ndarray:
    """(N, C, H, W) uint8; grey images are replicated when any image is in colour."""
    first = images[0].shape[:2]
    for image, path in zip(images, paths, strict=True):
        if image.shape[:2] != first:
            raise ConfigError(
                f"image {path} is {image.shape[1]}x{image.shape[0]} but "
                f"{paths[0]} is {first[1]}x{first[0]}; set image_size "
                f"(data.source.init_args.image_size) to resize them all (expected {layout})"
            )
    channels = max(image.shape[2] for image in images)
    out = np.empty((len(images), channels, *first), dtype=np.uint8)
    for i, image in enumerate(images):
        out[i] = image.transpose(2, 0, 1)  # broadcasts a grey image over 3 channels
    return out


def _decode_all(paths: list[str], image_size: int | None, layout: str) -> np.ndarray:
    workers = min(cpu_cores(), max(1, len(paths) // _FILES_PER_TASK))
    if len(paths) < _POOL_FROM or workers == 1:
        return _stack(_decode_chunk(paths, image_size, layout), paths, layout)
    chunks = [paths[i:i + _FILES_PER_TASK] for i in range(0, len(paths), _FILES_PER_TASK)]
    # fork: the workers need only PIL and numpy, and spawning would re-import torch in each
    context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        parts = pool.map(_decode_chunk, chunks, [image_size] * len(chunks),
                         [layout] * len(chunks))
        images = [image for part in parts for image in part]
    return _stack(images, paths, layout)


# ---------------------------------------------------------------------------- cache


def decode_images(name: str, files: Sequence[Path | str], image_size: int | None,
                  layout: str) -> np.ndarray:
    """Decode `files` into one uint8 ``(N, C, H, W)`` array, from the cache when it holds them.

    Args:
        name: the source and split (``"imagefolder-train"``), the start of the cache file name.
        files: image paths, in the order of the returned rows.
        image_size: side of the square the images are resized to; None keeps their size
            (they must then all have the same one).
        layout: the expected layout, for error messages (``"root/train/<class>/*.png"``).

    Raises:
        ValueError: an unreadable image or images of different sizes without image_size; the
            message names the file. Nothing is cached then.
    """
    paths = [os.fspath(f) for f in files]
    if not paths:
        raise ConfigError(f"no image files found; expected {layout}")
    key = content_key(paths, f"images:{image_size}")
    return cached(f"{name}-{key}", lambda: {"images": _decode_all(paths, image_size, layout)}
                  )["images"]


def download_archive(url: str, root: Path, source: str, layout: str) -> None:
    """Fetch and unpack the dataset's official archive into `root` (torchvision's helper)."""
    from torchvision.datasets.utils import download_and_extract_archive

    try:
        download_and_extract_archive(url, download_root=os.fspath(root))
    except (OSError, RuntimeError, ValueError) as err:
        raise DownloadError(f"data source '{source}': could not download {url} into {root}: "
                            f"{err}; without network access download it yourself and unpack "
                            f"it as {layout}") from err


# ---------------------------------------------------------------------------- packing


def to_source(
    x_train: np.ndarray, y_train: object, num_classes: int,
    x_test: np.ndarray | None = None, y_test: object | None = None,
) -> SourceData:
    """uint8 images to a `SourceData`: scaled to [0, 1] and standardized per channel with the
    train split's mean and (unbiased) std, as every source is.

    The statistics come from per-channel histograms of the 256 byte values and the scaling is
    one multiply-add per pixel: on 50,000 CIFAR images this is several times faster than
    computing them on the float tensor.
    """
    scale, shift = _channel_affine(x_train)
    std = 1.0 / (255.0 * scale)  # byte * scale + shift == (byte / 255 - mean) / std
    return SourceData(
        x_train=_affine(x_train, scale, shift),
        y_train=torch.as_tensor(np.asarray(y_train), dtype=torch.int64),
        x_test=None if x_test is None else _affine(x_test, scale, shift),
        y_test=None if y_test is None else torch.as_tensor(np.asarray(y_test), dtype=torch.int64),
        num_classes=num_classes,
        pixel_standardization=(-shift * std, std),
    )


def _channel_affine(images: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel (scale, shift) with ``byte * scale + shift == (byte / 255 - mean) / std``."""
    values = torch.arange(256, dtype=torch.float64) / 255.0
    tensor = torch.from_numpy(images)
    scales, shifts = [], []
    for channel in range(images.shape[1]):
        counts = torch.bincount(tensor[:, channel].flatten(), minlength=256).double()
        n = counts.sum()
        mean = (counts * values).sum() / n
        var = (counts * (values - mean) ** 2).sum() / max(n - 1, 1)
        std = float(var.sqrt())
        std = std if std > STD_FLOOR else 1.0
        scales.append(1.0 / (255.0 * std))
        shifts.append(-float(mean) / std)
    shape = (1, -1) + (1,) * (images.ndim - 2)
    return (torch.tensor(scales, dtype=torch.float32).view(shape),
            torch.tensor(shifts, dtype=torch.float32).view(shape))


def _affine(images: np.ndarray, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(images).to(torch.float32).mul_(scale).add_(shift)


def domain_source(
    domains: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]],
    names: Sequence[str], num_classes: int,
) -> SourceData:
    """A cross-domain `SourceData` from per-domain uint8 ``(x_train, y_train, x_test, y_test)``
    (``x_test`` None where a domain has no test split): grey domains are replicated to three
    channels when any domain is in colour, and ``domains_train`` / ``domains_test`` record
    each image's domain (its index in `names`)."""
    channels = max(x.shape[1] for x, _, _, _ in domains)

    def joined(part: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        blocks = [(d[part], d[part + 1], i) for i, d in enumerate(domains) if d[part] is not None]
        if not blocks:
            return None
        return (np.concatenate([np.broadcast_to(x, (len(x), channels, *x.shape[2:]))
                                for x, _, _ in blocks]),
                np.concatenate([np.asarray(y, np.int64) for _, y, _ in blocks]),
                np.concatenate([np.full(len(y), i, np.int64) for _, y, i in blocks]))

    train, test = joined(0), joined(2)
    assert train is not None
    data = to_source(train[0], train[1], num_classes,
                     None if test is None else test[0], None if test is None else test[1])
    return dataclasses.replace(data, domains_train=train[2],
                               domains_test=None if test is None else test[2],
                               domain_names=list(names))
