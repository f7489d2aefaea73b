"""``femnist``: LEAF's FEMNIST (62 classes of handwritten digits and letters, 28 x 28 grey,
grouped by writer) in the JSON files LEAF's scripts write.

Get it with LEAF (https://github.com/TalwalkarLab/leaf, ``data/femnist``:
``./preprocess.sh -s niid --sf 1.0 -k 0 -t sample`` for every writer and a per-writer
train/test split). ``root`` is LEAF's ``data/femnist/data`` folder (or ``data/femnist``)
with::

    train/*.json and test/*.json    LEAF's per-writer split (``-t sample``), or
    all_data/*.json                 every writer's samples, unsplit

Each file is ``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [[784
floats in 0..1], ...], "y": [class ids 0..61]}}}``. Every sample keeps its writer
(``groups_train`` / ``groups_test``, ``group_names``), so the ``Natural`` partition gives one
client per writer; ``num_clients`` below the number of writers samples them. The papers'
protocol (80 % / 20 % of each writer's samples for local train / test, the union of the local
tests as the global test set) is ``merge_test: true`` with ``train_fraction: 0.8``.

LEAF stores pixels as ``byte / 255``: the parsed files are cached as bytes under the user cache
folder (``fedlight.data.sources.cache``), so only the first load parses the JSON.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import numpy as np
import torch

from fedlight.core.errors import ConfigError, MissingFileError
from fedlight.data.sources.base import SourceData, from_arrays
from fedlight.data.sources.cache import cached, content_key
from fedlight.data.sources.files import require_root
from fedlight.data.sources.image_source import FileImageSource

NUM_CLASSES = 62
PIXELS = 28 * 28
LAYOUT = ("LEAF's femnist data folder with train/*.json and test/*.json (or all_data/*.json), "
          "each {'users': [...], 'num_samples': [...], 'user_data': {user: {'x': [[784 "
          "floats]], 'y': [...]}}} (LEAF, https://github.com/TalwalkarLab/leaf)")


def _split_folders(root: Path) -> dict[str, Path]:
    for base in (root, root / "data"):
        if (base / "train").is_dir() and (base / "test").is_dir():
            return {"train": base / "train", "test": base / "test"}
        if (base / "all_data").is_dir():
            return {"train": base / "all_data"}
    raise MissingFileError(f"data source 'femnist': no train/ and test/ (or all_data/) folder "
                            f"in {root}; expected {LAYOUT}")


def _read_file(path: Path) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """(users, x as uint8 (N, 784), y, user index per sample) of one LEAF JSON file."""
    def bad(what: str) -> ValueError:
        return ConfigError(f"data source 'femnist': {path}: {what}; expected {LAYOUT}")

    try:
        record = json.loads(path.read_text())
        users, counts, data = record["users"], record["num_samples"], record["user_data"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise bad(f"not a LEAF file ({type(err).__name__}: {err})") from None
    if len(users) != len(counts):
        raise bad(f"{len(users)} users but {len(counts)} num_samples entries")
    xs, ys, owners = [], [], []
    for i, (user, count) in enumerate(zip(users, counts, strict=True)):
        if user not in data:
            raise bad(f"user {user!r} has no user_data entry")
        try:
            x, y = np.asarray(data[user]["x"], np.float32), np.asarray(data[user]["y"])
        except (KeyError, TypeError, ValueError) as err:
            raise bad(f"user {user!r} has no x / y of equal-length rows ({err})") from None
        if len(x) != count or len(y) != count:
            raise bad(f"user {user!r} has num_samples {count} but {len(x)} x and {len(y)} y")
        if count and (x.shape[1:] != (PIXELS,) or not np.issubdtype(y.dtype, np.integer)
                      or y.min() < 0 or y.max() >= NUM_CLASSES):
            raise bad(f"user {user!r} has x of shape {x.shape} and y in {y.min()}..{y.max()}; "
                      f"need {PIXELS} pixels per sample and labels 0..{NUM_CLASSES - 1}")
        xs.append(np.rint(x * 255).clip(0, 255).astype(np.uint8).reshape(-1, PIXELS))
        ys.append(y.astype(np.int64))
        owners.append(np.full(count, i, np.int64))
    if not xs:
        raise bad("no users")
    return list(users), np.concatenate(xs), np.concatenate(ys), np.concatenate(owners)


def _read_split(folder: Path) -> dict[str, np.ndarray]:
    files = sorted(folder.glob("*.json"))
    if not files:
        raise MissingFileError(f"data source 'femnist': {folder} holds no .json file; "
                                f"expected {LAYOUT}")
    users, xs, ys, groups = [], [], [], []
    for path in files:
        names, x, y, owner = _read_file(path)
        groups.append(owner + len(users))
        users += names
        xs.append(x)
        ys.append(y)
    return {"x": np.concatenate(xs), "y": np.concatenate(ys), "group": np.concatenate(groups),
            "users": np.asarray(users)}


def _cached_split(folder: Path, name: str) -> dict[str, np.ndarray]:
    files = sorted(str(p) for p in folder.glob("*.json"))
    key = content_key(files, "femnist") if files else "none"
    return cached(f"femnist-{name}-{key}", lambda: _read_split(folder))


@functools.lru_cache(maxsize=1)
def _load(root: Path) -> SourceData:
    splits = {name: _cached_split(folder, name)
              for name, folder in _split_folders(root).items()}
    names = sorted(set().union(*(split["users"].tolist() for split in splits.values())))
    ids = {user: i for i, user in enumerate(names)}

    def images(split: dict[str, np.ndarray]) -> torch.Tensor:
        return torch.from_numpy(split["x"]).reshape(-1, 1, 28, 28).float().div_(255.0)

    def writers(split: dict[str, np.ndarray]) -> np.ndarray:
        index = np.asarray([ids[user] for user in split["users"].tolist()], np.int64)
        return index[split["group"]]

    train, test = splits["train"], splits.get("test")
    data = from_arrays(images(train), train["y"], NUM_CLASSES,
                        None if test is None else images(test),
                        None if test is None else test["y"])
    return dataclasses.replace(
        data, groups_train=writers(train), groups_test=None if test is None else writers(test),
        group_names=names,
    )


class FEMNIST(FileImageSource):
    """LEAF's FEMNIST (62 classes, 28 x 28 grey), one group per writer (the Natural
    partition gives one client per writer).

    root: LEAF's data/femnist/data folder (train/*.json and test/*.json, or all_data/*.json).
    """

    name = "femnist"

    def read(self, seed: int) -> SourceData:
        return _load(require_root(self.name, self.root, LAYOUT))
