"""``digits5_real``: the real Digits-Five (MNIST, SVHN, USPS, SynthDigits, MNIST-M), one
domain per client, in the layout FedBN's data loaders read.

``root`` is FedBN's ``data`` folder, as FedBN's ``utils/data_preprocess.py`` writes it
(it downloads the five datasets and splits each 80 / 20, stratified; FedBN's own loader is
``DigitsDataset`` in ``utils/data_utils.py``, https://github.com/med-air/FedBN)::

    MNIST/train.pkl                                the train split
    MNIST/partitions/train_part0.pkl ... part9     ten 743-image slices of it (used when
                                                   train.pkl is absent)
    MNIST/test.pkl                                 the test split
    SVHN/...  USPS/...  SynthDigits/...  MNIST_M/...   the same files per domain

Each ``.pkl`` is a pickled ``(images, labels)`` pair of numpy arrays: uint8 images of shape
``(N, H, W)`` (grey) or ``(N, H, W, 3)`` (colour) and labels 0..9. These are pickle files:
read only ones you trust. ``train.pkl`` (else all train slices) is a domain's train split,
``test.pkl`` its test split. As in FedPick, every image becomes 3 x 32 x 32 colour (grey
replicated, resized bilinearly; ``image_size`` changes the side).
"""

from __future__ import annotations

import functools
import pickle
import re
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from fedlight.core.errors import ConfigError, MissingFileError
from fedlight.data.sources.base import SourceData
from fedlight.data.sources.files import require_root
from fedlight.data.sources.image_source import FileImageSource
from fedlight.data.sources.images import domain_source, require_folder

DOMAINS = ("MNIST", "SVHN", "USPS", "SynthDigits", "MNIST_M")
DEFAULT_SIZE = 32
LAYOUT = ("root/<domain>/train.pkl (or partitions/train_part<k>.pkl) and "
          "root/<domain>/test.pkl, pickled (images uint8 (N, H, W[, 3]), labels 0..9) pairs, "
          "for the domains MNIST, SVHN, USPS, SynthDigits, MNIST_M (written by FedBN's "
          "utils/data_preprocess.py, https://github.com/med-air/FedBN)")


def _read_pair(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        with path.open("rb") as stream:
            images, labels = pickle.load(stream)
        images, labels = np.asarray(images), np.asarray(labels).astype(np.int64).reshape(-1)
    except (OSError, ValueError, TypeError, pickle.UnpicklingError, EOFError) as err:
        raise ConfigError(f"data source 'digits5_real': cannot read {path} as an (images, "
                         f"labels) pair ({type(err).__name__}: {err}); expected {LAYOUT}") from None
    if images.ndim == 4 and images.shape[-1] == 1:
        images = images[..., 0]
    if (images.dtype != np.uint8 or images.ndim not in (3, 4) or len(images) != len(labels)
            or (images.ndim == 4 and images.shape[-1] != 3) or labels.min(initial=0) < 0
            or labels.max(initial=0) > 9):
        raise ConfigError(f"data source 'digits5_real': {path} holds images {images.dtype} "
                         f"{images.shape} and {len(labels)} labels; expected {LAYOUT}")
    return images, labels


def _resized(images: np.ndarray, size: int) -> np.ndarray:
    """(N, H, W[, 3]) uint8 -> (N, 3, size, size) uint8 (grey replicated, bilinear)."""
    tensor = torch.from_numpy(images)
    tensor = tensor[:, None] if tensor.ndim == 3 else tensor.permute(0, 3, 1, 2)
    tensor = tensor.expand(-1, 3, -1, -1)
    if tensor.shape[-2:] != (size, size):
        tensor = F.interpolate(tensor.float(), size=(size, size), mode="bilinear",
                               align_corners=False).round_().clamp_(0, 255).to(torch.uint8)
    return tensor.contiguous().numpy()


def _domain(root: Path, name: str, size: int) -> tuple[np.ndarray, ...]:
    folder = require_folder(root / name, "digits5_real", LAYOUT)
    parts = [folder / "train.pkl"] if (folder / "train.pkl").is_file() else sorted(
        (folder / "partitions").glob("train_part*.pkl"),
        key=lambda p: int(re.sub(r"\D", "", p.stem) or 0))
    if not parts:
        raise MissingFileError(f"data source 'digits5_real': no train.pkl in {folder} and no "
                                f"train_part*.pkl in {folder / 'partitions'}; expected {LAYOUT}")
    if not (folder / "test.pkl").is_file():
        raise MissingFileError(f"data source 'digits5_real': {folder / 'test.pkl'} does not "
                                f"exist; expected {LAYOUT}")
    train = [_read_pair(p) for p in parts]
    x_test, y_test = _read_pair(folder / "test.pkl")
    return (np.concatenate([_resized(x, size) for x, _ in train]),
            np.concatenate([y for _, y in train]), _resized(x_test, size), y_test)


@functools.lru_cache(maxsize=1)
def _load(root: Path, image_size: int | None) -> SourceData:
    require_folder(root, "digits5_real", LAYOUT)
    size = image_size or DEFAULT_SIZE
    return domain_source([_domain(root, name, size) for name in DOMAINS], DOMAINS, 10)


class Digits5Real(FileImageSource):
    """The real Digits-Five files FedBN distributes (MNIST, SVHN, USPS, SynthDigits,
    MNIST-M), one domain id per image.

    root: the dataset's folder (see this module's LAYOUT).
    """

    name = "digits5_real"

    def read(self, seed: int) -> SourceData:
        return _load(require_root(self.name, self.root, LAYOUT), self.image_size)
