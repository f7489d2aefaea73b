"""``cinic10``: CINIC-10 (CIFAR-10's 10 classes, 32 x 32 colour, from CIFAR-10 and ImageNet)
in its official layout.

``root`` is the folder the official archive
(https://datashare.ed.ac.uk/bitstream/handle/10283/3192/CINIC-10.tar.gz, fetched with
``download: true``) unpacks into::

    train/<class>/*.png     90,000 images
    valid/<class>/*.png     90,000 images (not used, as in MAP's experiments)
    test/<class>/*.png      90,000 images

with the classes airplane, automobile, bird, cat, deer, dog, frog, horse, ship, truck
(labels 0..9 in this order, CIFAR-10's). ``train`` is the train split and ``test`` the test
split. ``first_per_class: [N, M]`` keeps the first N train and M test files of each class
in file-name order.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

from fedlight.core.paths import ConfigPath
from fedlight.data.sources.base import SourceData
from fedlight.data.sources.files import require_root
from fedlight.data.sources.image_source import ClassFolderImageSource
from fedlight.data.sources.images import (
    class_folders,
    decode_images,
    download_archive,
    require_folder,
    to_source,
)

URL = "https://datashare.ed.ac.uk/bitstream/handle/10283/3192/CINIC-10.tar.gz"
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
           "truck")
LAYOUT = f"root/train/<class>/*.png and root/test/<class>/*.png (CINIC-10, from {URL})"


@functools.lru_cache(maxsize=1)
def _load(root: Path, download: bool, image_size: int | None,
          first: tuple[int, int] | None) -> SourceData:
    if download and not (root / "train").is_dir():
        download_archive(URL, root, "cinic10", LAYOUT)
    require_folder(root / "train", "cinic10", LAYOUT, "set `download: true` to fetch it")
    splits = {}
    for split, count in zip(("train", "test"), first or (None, None), strict=True):
        files, labels, _ = class_folders(root / split, "cinic10", LAYOUT, CLASSES, first=count)
        splits[split] = decode_images(f"cinic10-{split}", files, image_size, LAYOUT), labels
    return to_source(*splits["train"], len(CLASSES), *splits["test"])


class CINIC10(ClassFolderImageSource):
    """CINIC-10 (ImageNet and CIFAR-10 images, 10 classes) in its published folders.

    Args:
        root: the dataset's folder (LAYOUT). In a config file a relative path is
            relative to the file's folder.
        download: download and unpack the dataset into root when it is missing.
        first_per_class: keep only the first N training and first M test files of each
            class in file-name order, [N, M] (one int: the same N for both), e.g. [500, 100]
            for a 5,000 / 1,000 image CIFAR-10 subset of its PNG folder; null = all.
        image_size: resize the images to this square side; null keeps their size.
        domain_transforms: one image transformation per domain, the source made
            cross-domain (identity, grey, invert, blur, rotate90, jitter; see ImageSource);
            null = off.
    """

    name = "cinic10"

    def __init__(self, root: ConfigPath | str | None = None,
                 download: bool = False,
                 first_per_class: int | Sequence[int] | None = None,
                 image_size: int | None = None,
                 domain_transforms: Sequence[str] | None = None) -> None:
        super().__init__(root, first_per_class, image_size, domain_transforms)
        self.download = download

    def read(self, seed: int) -> SourceData:
        return _load(require_root(self.name, self.root, LAYOUT), bool(self.download),
                     self.image_size, self.first_counts)
