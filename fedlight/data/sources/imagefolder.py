"""``imagefolder``: any image dataset laid out as ``root/train/<class>/*`` and
``root/test/<class>/*`` (torchvision's ``ImageFolder`` layout, as most Kaggle and users' own
datasets come).

Classes are the sorted names of the train class folders (as ``ImageFolder``): label ``i`` is
the ``i``-th name, and the test folder's classes must be among them. ``root/test`` is optional
(without it the data module carves the local test splits from the train images). Images are
grey (one channel) when every file is, colour otherwise; ``image_size`` resizes them to a
square, and ``first_per_class: [N, M]`` keeps the first N train and M test files of each
class in file-name order. Decoded images are cached (see ``fedlight.data.sources.images``):
the second load of the 60,000 CIFAR-10 PNGs takes about a second.
"""

from __future__ import annotations

import functools
from pathlib import Path

from fedlight.core.errors import ConfigError
from fedlight.data.sources.base import SourceData
from fedlight.data.sources.files import require_root
from fedlight.data.sources.image_source import ClassFolderImageSource
from fedlight.data.sources.images import (
    class_folders,
    decode_images,
    require_folder,
    to_source,
)

LAYOUT = "root/train/<class>/*.png (or .jpg, ...) and optionally root/test/<class>/*"


@functools.lru_cache(maxsize=2)
def _load(root: Path, image_size: int | None, first: tuple[int, int] | None) -> SourceData:
    require_folder(root, "imagefolder", LAYOUT)
    first_train, first_test = first or (None, None)
    train_files, y_train, classes = class_folders(root / "train", "imagefolder", LAYOUT,
                                                  first=first_train)
    x_train = decode_images("imagefolder-train", train_files, image_size, LAYOUT)
    if not (root / "test").is_dir():
        return to_source(x_train, y_train, len(classes))
    test_classes = class_folders(root / "test", "imagefolder", LAYOUT)[2]
    unknown = sorted(set(test_classes) - set(classes))
    if unknown:
        raise ConfigError(f"data source 'imagefolder': {root / 'test'} has class folder "
                         f"{unknown[0]!r} that {root / 'train'} lacks; expected {LAYOUT} with "
                         "the same classes")
    test_files, y_test, _ = class_folders(root / "test", "imagefolder", LAYOUT,
                                          [c for c in classes if c in test_classes],
                                          first=first_test)
    y_test = [classes.index(test_classes[i]) for i in y_test]
    x_test = decode_images("imagefolder-test", test_files, image_size, LAYOUT)
    return to_source(x_train, y_train, len(classes), x_test, y_test)


class ImageFolder(ClassFolderImageSource):
    """A dataset in torchvision's ImageFolder layout: root/train/<class>/* (and optionally
    root/test/<class>/*), classes in sorted order.

    root: the dataset's folder (LAYOUT).
    """

    name = "imagefolder"

    def read(self, seed: int) -> SourceData:
        return _load(require_root(self.name, self.root, LAYOUT), self.image_size, self.first_counts)
