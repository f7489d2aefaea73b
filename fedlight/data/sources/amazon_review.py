"""Amazon Review (Blitzer et al., ACL 2007) in the processed form GPFL's and PFLlib's
experiments use: the file ``amazon.npz``.

That file is what PFLlib's ``dataset/generate_AmazonReview.py`` downloads (Google Drive file
id :data:`DRIVE_ID`) and reads, the same way as KD3A's ``datasets/AmazonReview.py`` (the
loader PFLlib's script names as its origin): product reviews of four domains (books, DVDs,
electronics, kitchen appliances) as bag-of-words count features with a positive / negative
label. Its arrays:

* ``xx_data``, ``xx_row``, ``xx_col``, ``xx_shape``: a sparse ``features x samples`` matrix in
  coordinate form (``xx_row`` indexes features, ``xx_col`` samples);
* ``yy``: the label of each sample, -1 (negative) or 1 (positive);
* ``offset``: the five boundaries of the four domains' sample ranges, in the order books, dvd,
  electronics, kitchen.

``root`` holds ``amazon.npz``; ``download: true`` fetches it from Google Drive
(torchvision's Drive downloader). As a source, as those loaders read it: ``x`` float32
``(N, 5000)``, the first :data:`FEATURES` features' counts (not rescaled); ``y`` 0
(negative) or 1 (positive); ``domains_train`` the domain of each sample (``domain_names``
books, dvd, electronics, kitchen). There is no separate test split: GPFL's feature-shift
setting, one client per domain with its reviews split 75/25, is the ``Domains`` partition with
``num_clients: 4`` and ``train_fraction: 0.75``.

A missing array, arrays of disagreeing lengths, indices outside ``xx_shape``, a label other
than -1 / 1 or offsets that do not cover the samples in order is a one-line error naming
the file and the array.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch

from fedlight.core.errors import DownloadError
from fedlight.data.sources.base import DownloadableSource, SourceData
from fedlight.data.sources.files import DataFormatError, missing_files, require_root

NAME = "amazon_review"
FILE = "amazon.npz"
DRIVE_ID = "1QbXFENNyqor1IlCpRRFtOluI2_hMEd1W"
DOMAINS = ("books", "dvd", "electronics", "kitchen")
FEATURES = 5000
ARRAYS = ("xx_data", "xx_row", "xx_col", "xx_shape", "yy", "offset")


def read_amazon(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features ``(N, 5000)`` float32, labels 0/1 and domain ids 0-3 from ``amazon.npz``.

    Raises:
        DataFormatError: the file does not hold the arrays described in the module doc.
    """
    from scipy.sparse import coo_matrix

    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise DataFormatError(path, None, f"is not a readable .npz archive ({err})") from err
    with archive:
        absent = [a for a in ARRAYS if a not in archive.files]
        if absent:
            raise DataFormatError(path, f"array {absent[0]}", f"is missing; the file must hold "
                                  f"{', '.join(ARRAYS)}")
        arrays = {a: archive[a] for a in ARRAYS}
    values, rows, cols = (arrays[a].ravel() for a in ("xx_data", "xx_row", "xx_col"))
    if not len(values) == len(rows) == len(cols):
        raise DataFormatError(path, "array xx_data", f"xx_data, xx_row and xx_col have "
                              f"{len(values)}, {len(rows)} and {len(cols)} entries; they must "
                              "be equally long")
    shape = tuple(int(s) for s in arrays["xx_shape"].ravel())
    if len(shape) != 2:
        raise DataFormatError(path, "array xx_shape", f"is {shape}; expected (features, "
                              "samples)")
    features, samples = shape
    for name, index, size in (("xx_row", rows, features), ("xx_col", cols, samples)):
        if len(index) and (index.min() < 0 or index.max() >= size):
            raise DataFormatError(path, f"array {name}", f"holds an index outside 0..{size - 1}"
                                  f" (xx_shape is {shape})")
    labels = arrays["yy"].ravel()
    if len(labels) != samples or not np.isin(labels, (-1, 1)).all():
        raise DataFormatError(path, "array yy", f"must hold {samples} labels of -1 or 1, "
                              f"holds {len(labels)} with values {np.unique(labels)[:5].tolist()}")
    offset = arrays["offset"].ravel().astype(np.int64)
    if (len(offset) != len(DOMAINS) + 1 or offset[0] != 0 or offset[-1] != samples
            or np.any(np.diff(offset) <= 0)):
        raise DataFormatError(path, "array offset", f"is {offset.tolist()}; expected "
                              f"{len(DOMAINS) + 1} increasing boundaries from 0 to {samples}")
    matrix = coo_matrix((values, (cols, rows)), shape=(samples, features)).tocsr()
    x = matrix[:, :FEATURES].toarray().astype(np.float32)
    domains = np.repeat(np.arange(len(DOMAINS)), np.diff(offset))
    return x, ((labels + 1) // 2).astype(np.int64), domains


@functools.lru_cache(maxsize=1)
def _load(root: str | None, download: bool) -> SourceData:
    folder = require_root(NAME, root, FILE)
    if download and not (folder / FILE).is_file():
        from torchvision.datasets.utils import download_file_from_google_drive

        try:
            download_file_from_google_drive(DRIVE_ID, str(folder), FILE)
        except (OSError, RuntimeError) as err:
            (folder / FILE).unlink(missing_ok=True)
            raise DownloadError(f"could not download data source {NAME!r} (Google Drive file "
                                f"{DRIVE_ID}) into {str(folder)!r} ({err}); put {FILE} there "
                                "yourself") from err
    if not (folder / FILE).is_file():
        raise missing_files(NAME, folder, [FILE], "set `download: true` "
                            "(data.source.init_args.download) to "
                            f"fetch it, or download Google Drive file {DRIVE_ID} (the file "
                            "PFLlib's generate_AmazonReview.py uses) there")
    x, y, domains = read_amazon(folder / FILE)
    return SourceData(x_train=torch.from_numpy(x), y_train=torch.from_numpy(y), x_test=None,
                      y_test=None, num_classes=2, domains_train=domains,
                      domain_names=list(DOMAINS))


class AmazonReview(DownloadableSource):
    """Amazon Review: review features of four product categories (one domain each).

    root: the folder of the dataset's files (see the module doc).
    """

    name = NAME

    def read(self, seed: int) -> SourceData:
        return _load(self.root, bool(self.download))


__all__ = ["DOMAINS", "DRIVE_ID", "FEATURES", "AmazonReview", "read_amazon"]
