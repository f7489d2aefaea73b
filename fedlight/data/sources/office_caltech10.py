"""``office_caltech10``: Office-Caltech-10 (the 10 classes shared by Office-31 and
Caltech-256, in four domains), one domain per client as in FedBN and FedPick.

``root`` holds the four domain folders of the usual distribution (e.g. the
``office_caltech_10`` folder FedBN's README links, https://github.com/med-air/FedBN, or the
Office + Caltech-256 images of Gong et al., https://people.eecs.berkeley.edu/~jhoffman/domainadapt/)::

    amazon/<class>/*.jpg  caltech/<class>/*.jpg  dslr/<class>/*.jpg  webcam/<class>/*.jpg

with the classes back_pack, bike, calculator, headphones, keyboard, laptop_computer, monitor,
mouse, mug, projector (labels 0..9 in this order). The dataset has no official test split: all
images form the train split, and the data module's ``train_fraction`` carves each domain's
local test set (FedPick: 256 x 256 colour, ``image_size: 256``; 125 training images per
domain, ``max_train_samples: 125``). The images differ in size, so ``image_size`` is required.
"""

from __future__ import annotations

import functools
from pathlib import Path

from fedlight.data.sources.base import SourceData
from fedlight.data.sources.files import require_root
from fedlight.data.sources.image_source import FileImageSource
from fedlight.data.sources.images import (
    class_folders,
    decode_images,
    domain_source,
    require_folder,
)

DOMAINS = ("amazon", "caltech", "dslr", "webcam")
CLASSES = ("back_pack", "bike", "calculator", "headphones", "keyboard", "laptop_computer",
           "monitor", "mouse", "mug", "projector")
LAYOUT = ("root/<domain>/<class>/*.jpg for the domains amazon, caltech, dslr, webcam and the "
          "classes back_pack, bike, ..., projector (Office-Caltech-10; get it from FedBN's "
          "README, https://github.com/med-air/FedBN)")


@functools.lru_cache(maxsize=1)
def _load(root: Path, image_size: int | None) -> SourceData:
    require_folder(root, "office_caltech10", LAYOUT)
    domains = []
    for domain in DOMAINS:
        files, labels, _ = class_folders(root / domain, "office_caltech10", LAYOUT, CLASSES)
        images = decode_images(f"office_caltech10-{domain}", files, image_size, LAYOUT)
        domains.append((images, labels, None, None))
    return domain_source(domains, DOMAINS, len(CLASSES))


class OfficeCaltech10(FileImageSource):
    """Office-Caltech-10 (10 classes in four domains: amazon, caltech, dslr, webcam), one
    domain id per image (the Domains partition gives one client per domain).

    root: the dataset's folder (see this module's LAYOUT).
    """

    name = "office_caltech10"

    def read(self, seed: int) -> SourceData:
        return _load(require_root(self.name, self.root, LAYOUT), self.image_size)
