"""``domainnet10``: DomainNet's six domains restricted to the 10 classes FedBN chose and
FedPick reuses, one domain per client.

The classes are bird, feather, headphones, ice_cream, teapot, tiger, whale, windmill,
wine_glass, zebra (labels 0..9 in this order): the list in FedBN's DomainNet preparation
(https://github.com/med-air/FedBN) and in PFLlib's ``generate_DomainNet.py``
(https://github.com/TsinghuaFL/PFLlib); FedPick's paper calls them "10 commonly used classes"
and follows FedBN's setting.

``root`` holds the official download (http://ai.bu.edu/M3SDA/: one zip per domain and
the split files)::

    <domain>/<class>/*.jpg                 for clipart infograph painting quickdraw real sketch
    <domain>_train.txt, <domain>_test.txt  "<domain>/<class>/<file>.jpg <label>" per line

The official train / test lists are the train / test splits (labels are remapped to the 10
classes). The images differ in size, so ``image_size`` is required (FedPick: 256).
"""

from __future__ import annotations

import functools
from pathlib import Path

from fedlight.core.errors import ConfigError, MissingFileError
from fedlight.data.sources.base import SourceData
from fedlight.data.sources.files import require_root
from fedlight.data.sources.image_source import FileImageSource
from fedlight.data.sources.images import decode_images, domain_source, require_folder

DOMAINS = ("clipart", "infograph", "painting", "quickdraw", "real", "sketch")
CLASSES = ("bird", "feather", "headphones", "ice_cream", "teapot", "tiger", "whale", "windmill",
           "wine_glass", "zebra")
LAYOUT = ("root/<domain>/<class>/*.jpg and root/<domain>_train.txt, <domain>_test.txt with "
          "'<domain>/<class>/<file> <label>' lines, for the domains clipart, infograph, "
          "painting, quickdraw, real, sketch (DomainNet, from http://ai.bu.edu/M3SDA/)")


def _split_list(root: Path, domain: str, split: str) -> tuple[list[str], list[int]]:
    listing = root / f"{domain}_{split}.txt"
    if not listing.is_file():
        raise MissingFileError(f"data source 'domainnet10': {listing} does not exist; "
                                f"expected {LAYOUT}")
    index = {name: i for i, name in enumerate(CLASSES)}
    files, labels = [], []
    for number, line in enumerate(listing.read_text().splitlines(), 1):
        fields = line.split()
        parts = fields[0].split("/") if fields else []
        if len(fields) != 2 or len(parts) < 3:
            raise ConfigError(f"data source 'domainnet10': {listing} line {number} ({line[:60]!r})"
                             f" is not '<domain>/<class>/<file> <label>'; expected {LAYOUT}")
        if parts[-2] in index:
            files.append(str(root / fields[0]))
            labels.append(index[parts[-2]])
    missing = sorted(set(CLASSES) - {CLASSES[label] for label in labels})
    if missing:
        raise ConfigError(f"data source 'domainnet10': {listing} lists no image of class "
                         f"{missing[0]!r}; expected {LAYOUT}")
    absent = next((f for f in files if not Path(f).is_file()), None)
    if absent is not None:
        raise MissingFileError(f"data source 'domainnet10': {absent}, listed in {listing}, "
                                f"does not exist; expected {LAYOUT}")
    return files, labels


@functools.lru_cache(maxsize=1)
def _load(root: Path, image_size: int | None) -> SourceData:
    require_folder(root, "domainnet10", LAYOUT)
    domains = []
    for domain in DOMAINS:
        parts = []
        for split in ("train", "test"):
            files, labels = _split_list(root, domain, split)
            parts += [decode_images(f"domainnet10-{domain}-{split}", files, image_size, LAYOUT),
                      labels]
        domains.append(tuple(parts))
    return domain_source(domains, DOMAINS, len(CLASSES))


class DomainNet10(FileImageSource):
    """DomainNet's ten-class subset in six domains (clipart, infograph, painting, quickdraw,
    real, sketch), one domain id per image.

    root: the dataset's folder (see this module's LAYOUT).
    """

    name = "domainnet10"

    def read(self, seed: int) -> SourceData:
        return _load(require_root(self.name, self.root, LAYOUT), self.image_size)
