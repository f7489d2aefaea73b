"""UCI Human Activity Recognition Using Smartphones (Anguita et al., ESANN 2013), read from
the ``UCI HAR Dataset`` folder as distributed.

``root`` is the ``UCI HAR Dataset`` folder, or a folder containing it; ``download: true``
fetches and unpacks :data:`URL` into ``root``. Read per split (``train``, ``test``):

* ``<split>/Inertial Signals/<signal>_<split>.txt`` for the nine signals of
  :data:`SIGNALS` (body acceleration x/y/z, body angular velocity x/y/z, total acceleration
  x/y/z), each ``N`` lines of 128 numbers (2.56 s windows at 50 Hz);
* ``<split>/y_<split>.txt``: the activity 1-6 of each window (walking, walking upstairs,
  walking downstairs, sitting, standing, laying);
* ``<split>/subject_<split>.txt``: the volunteer 1-30 who wore the phone.

As a source: ``x`` is float32 ``(N, 9, 128)`` (channels in :data:`SIGNALS` order), the values
as distributed (the signals are in g and rad/s; GPFL's and PFLlib's experiments do not
rescale them either); ``y`` the activity 0-5; ``groups_train`` / ``groups_test`` number the
subjects present 0, 1, ... (all 30 in the real data; ``group_names`` ``"1"``..``"30"``).
The dataset's own split is by subject (21 train, 9 test); GPFL's setting, one client per
subject with that subject's windows split 75/25, is the ``Natural`` partition with
``merge_test: true`` and ``train_fraction: 0.75``.

A file with a line of another number of columns, a value that is not a number, labels
outside their range, or files of one split with different line counts is a one-line error
naming the file and line.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch

from fedlight.core.errors import DownloadError
from fedlight.data.sources.base import DownloadableSource, SourceData
from fedlight.data.sources.files import DataFormatError, missing_files, require_root

NAME = "har"
FOLDER = "UCI HAR Dataset"
URL = ("https://archive.ics.uci.edu/ml/machine-learning-databases/00240/"
       "UCI%20HAR%20Dataset.zip")
SIGNALS = ("body_acc_x", "body_acc_y", "body_acc_z", "body_gyro_x", "body_gyro_y",
           "body_gyro_z", "total_acc_x", "total_acc_y", "total_acc_z")
ACTIVITIES = ("walking", "walking_upstairs", "walking_downstairs", "sitting", "standing",
              "laying")
WINDOW = 128
SUBJECTS = 30


def read_table(path: Path, columns: int) -> np.ndarray:
    """A whitespace-separated text table of ``columns`` numbers per line as float64
    ``(lines, columns)``.

    Raises:
        DataFormatError: a line with another number of columns or a value that is not a
            number, naming the line.
    """
    lines = path.read_text(encoding="ascii", errors="replace").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    try:
        values = np.array(" ".join(lines).split(), dtype=np.float64)
    except ValueError:
        values = None
    if values is None or values.size != len(lines) * columns:
        for number, line in enumerate(lines, start=1):
            fields = line.split()
            if len(fields) != columns:
                raise DataFormatError(path, number, f"has {len(fields)} columns; expected "
                                      f"{columns}")
            try:
                np.array(fields, dtype=np.float64)
            except ValueError as err:
                raise DataFormatError(path, number, f"holds a value that is not a number "
                                      f"({err})") from err
    if not lines:
        raise DataFormatError(path, None, f"is empty; expected lines of {columns} numbers")
    return values.reshape(len(lines), columns)


def _read_ids(path: Path, low: int, high: int, what: str) -> np.ndarray:
    ids = read_table(path, 1)[:, 0]
    bad = np.flatnonzero((ids != np.round(ids)) | (ids < low) | (ids > high))
    if len(bad):
        raise DataFormatError(path, int(bad[0]) + 1, f"{what} {ids[bad[0]]:g} is invalid; "
                              f"valid: {low}-{high}")
    return ids.astype(np.int64)


def read_split(folder: Path, split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Signals ``(N, 9, 128)``, activities 0-5 and subjects 0-29 of one split."""
    part = folder / split
    files = [part / "Inertial Signals" / f"{s}_{split}.txt" for s in SIGNALS]
    labels_file, subjects_file = part / f"y_{split}.txt", part / f"subject_{split}.txt"
    expected = [*files, labels_file, subjects_file]
    if not all(f.is_file() for f in expected):
        raise missing_files(NAME, folder, [str(f.relative_to(folder)) for f in expected],
                            "set `download: true` (data.source.init_args.download) to fetch "
                            f"the UCI HAR Dataset, or unpack it from {URL}")
    signals = [read_table(f, WINDOW) for f in files]
    labels = _read_ids(labels_file, 1, len(ACTIVITIES), "activity")
    subjects = _read_ids(subjects_file, 1, SUBJECTS, "subject")
    for path, rows in [*zip(files, signals, strict=True), (subjects_file, subjects)]:
        if len(rows) != len(labels):
            raise DataFormatError(path, None, f"has {len(rows)} lines but {labels_file} has "
                                  f"{len(labels)}; every file of a split has one line per "
                                  "window")
    x = np.stack(signals, axis=1).astype(np.float32)
    return x, labels - 1, subjects - 1


def _dataset_folder(root: Path) -> Path:
    return root / FOLDER if (root / FOLDER).is_dir() else root


@functools.lru_cache(maxsize=1)
def _load(root: str | None, download: bool) -> SourceData:
    base = require_root(NAME, root, f"the {FOLDER!r} folder")
    if download and not (base / FOLDER / "train").is_dir() and not (base / "train").is_dir():
        from torchvision.datasets.utils import download_and_extract_archive

        try:
            download_and_extract_archive(URL, str(base), filename=f"{FOLDER}.zip")
        except (OSError, RuntimeError) as err:
            raise DownloadError(f"could not download data source {NAME!r} from {URL} into "
                                f"{str(base)!r} ({err}); without network access, unpack the "
                                "zip there yourself") from err
    folder = _dataset_folder(base)
    x_train, y_train, subjects_train = read_split(folder, "train")
    x_test, y_test, subjects_test = read_split(folder, "test")
    subjects = np.union1d(subjects_train, subjects_test)  # group ids: the subjects present
    return SourceData(
        x_train=torch.from_numpy(x_train), y_train=torch.from_numpy(y_train),
        x_test=torch.from_numpy(x_test), y_test=torch.from_numpy(y_test),
        num_classes=len(ACTIVITIES), groups_train=np.searchsorted(subjects, subjects_train),
        groups_test=np.searchsorted(subjects, subjects_test),
        group_names=[str(s + 1) for s in subjects.tolist()],
    )


class HAR(DownloadableSource):
    """UCI HAR: smartphone sensor signals of six activities, one group per subject.

    root: the folder of the dataset's files (see the module doc).
    """

    name = NAME

    def read(self, seed: int) -> SourceData:
        return _load(self.root, bool(self.download))


__all__ = ["ACTIVITIES", "SIGNALS", "URL", "HAR", "read_split", "read_table"]
