"""``cinic10``: CINIC-10 (CIFAR-10's 10 classes, 32 x 32 colour, from CIFAR-10 and ImageNet)
in its official layout.

``data.root`` is the folder the official archive
(https://datashare.ed.ac.uk/bitstream/handle/10283/3192/CINIC-10.tar.gz, fetched with
``download: true``) unpacks into::

    train/<class>/*.png     90,000 images
    valid/<class>/*.png     90,000 images (not used, as in MAP's experiments)
    test/<class>/*.png      90,000 images

with the classes airplane, automobile, bird, cat, deer, dog, frog, horse, ship, truck
(labels 0..9 in this order, CIFAR-10's). ``train`` is the train split and ``test`` the test
split. ``data.first_per_class: [N, M]`` keeps the first N train and M test files of each class
in file-name order.
"""

from __future__ import annotations

import functools
from pathlib import Path

from fedlight.data.images import (
    class_folders,
    decode_images,
    download_archive,
    require_folder,
    require_root,
    to_source,
)
from fedlight.data.sources import SourceData, SourceRequest, register_source

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


@register_source("cinic10", options=("first_per_class",))
def load_cinic10(request: SourceRequest) -> SourceData:
    return _load(require_root(request, "cinic10", LAYOUT), request.download, request.image_size,
                 request.first_per_class)
