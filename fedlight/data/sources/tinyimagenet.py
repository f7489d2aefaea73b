"""``tinyimagenet``: Tiny-ImageNet (200 classes, 64 x 64 colour) in its official layout.

``root`` is the folder ``tiny-imagenet-200`` unpacked from the official archive
(http://cs231n.stanford.edu/tiny-imagenet-200.zip, fetched there with ``download: true``), or
the folder holding it::

    tiny-imagenet-200/wnids.txt                       the 200 class ids, one a line
    tiny-imagenet-200/train/<wnid>/images/*.JPEG      500 training images per class
    tiny-imagenet-200/val/images/*.JPEG               10,000 validation images
    tiny-imagenet-200/val/val_annotations.txt         "<file>\\t<wnid>\\t<box>" per image

The train images are the train split and the labelled validation images the test split (the
official test images carry no labels). Label ``i`` is the ``i``-th class id in sorted order
(as torchvision's ``ImageFolder`` over ``train/``). Some images are greyscale JPEGs: they are
replicated to three channels.
"""

from __future__ import annotations

import functools
from pathlib import Path

from fedlight.core.errors import ConfigError, MissingFileError
from fedlight.data.sources.base import SourceData
from fedlight.data.sources.files import require_root
from fedlight.data.sources.image_source import DownloadableImageSource
from fedlight.data.sources.images import (
    class_folders,
    decode_images,
    download_archive,
    require_folder,
    to_source,
)

URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
LAYOUT = ("tiny-imagenet-200/ with wnids.txt, train/<wnid>/images/*.JPEG, val/images/*.JPEG "
          f"and val/val_annotations.txt (from {URL})")


def _folder(root: Path, download: bool) -> Path:
    """The tiny-imagenet-200 folder: `root` itself or its child, downloaded when asked."""
    for candidate in (root, root / "tiny-imagenet-200"):
        if (candidate / "wnids.txt").is_file():
            return candidate
    if download:
        download_archive(URL, root, "tinyimagenet", LAYOUT)
        return _folder(root, False)
    require_folder(root, "tinyimagenet", LAYOUT, "set `download: true` to fetch it")
    raise MissingFileError(f"data source 'tinyimagenet': no wnids.txt in {root} or "
                            f"{root / 'tiny-imagenet-200'}; expected {LAYOUT}; set "
                            "`download: true` to fetch it")


def _val_split(folder: Path, classes: list[str]) -> tuple[list[str], list[int]]:
    annotations = folder / "val" / "val_annotations.txt"
    if not annotations.is_file():
        raise MissingFileError(f"data source 'tinyimagenet': {annotations} does not exist; "
                                f"expected {LAYOUT}")
    index = {wnid: i for i, wnid in enumerate(classes)}
    files, labels = [], []
    for number, line in enumerate(annotations.read_text().splitlines(), 1):
        fields = line.split("\t")
        if len(fields) < 2 or fields[1] not in index:
            raise ConfigError(f"data source 'tinyimagenet': {annotations} line {number} "
                             f"({line[:60]!r}) is not '<file>\\t<wnid from wnids.txt>\\t...'; "
                             f"expected {LAYOUT}")
        path = folder / "val" / "images" / fields[0]
        if not path.is_file():
            raise MissingFileError(f"data source 'tinyimagenet': {path}, listed in "
                                    f"{annotations}, does not exist; expected {LAYOUT}")
        files.append(str(path))
        labels.append(index[fields[1]])
    return files, labels


@functools.lru_cache(maxsize=1)
def _load(root: Path, download: bool, image_size: int | None) -> SourceData:
    folder = _folder(root, download)
    classes = sorted(set((folder / "wnids.txt").read_text().split()))
    train_files, y_train, _ = class_folders(folder / "train", "tinyimagenet", LAYOUT, classes,
                                            inner="images")
    test_files, y_test = _val_split(folder, classes)
    x_train = decode_images("tinyimagenet-train", train_files, image_size, LAYOUT)
    x_test = decode_images("tinyimagenet-val", test_files, image_size, LAYOUT)
    return to_source(x_train, y_train, len(classes), x_test, y_test)


class TinyImageNet(DownloadableImageSource):
    """Tiny ImageNet (200 classes, 64 x 64; its labelled val split as the test split).

    root: the dataset's folder (see this module's LAYOUT).
    """

    name = "tinyimagenet"

    def read(self, seed: int) -> SourceData:
        root = require_root(self.name, self.root, LAYOUT)
        return _load(root, bool(self.download), self.image_size)
