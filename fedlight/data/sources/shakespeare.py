"""Shakespeare from LEAF (Caldas et al., 2018): next-character prediction, one user per role.

LEAF distributes scripts, not data files: its preprocessing downloads the complete works and
writes JSON files. Run, in a clone of https://github.com/TalwalkarLab/leaf::

    cd data/shakespeare && ./preprocess.sh -s niid --sf 1.0 -k 0 -t sample -tf 0.8

(all 1,129 roles, each role's samples split 80/20 into train and test), then set
``root`` to ``data/shakespeare/data``, the folder holding ``train/*.json`` and
``test/*.json``. Every JSON file has LEAF's layout: ``users`` (role names), ``num_samples``
(per user), ``user_data`` (per user ``x``: strings of 80 characters, ``y``: the next
character), optionally ``hierarchies``.

As a source: ``x`` is int64 ``(N, 80)``, character ``c`` coded as ``1 + LEAF_LETTERS.index(c)``
so that 0 stays the padding id (unused here: every input has 80 characters) and the
vocabulary is ``["<pad>", *LEAF_LETTERS]`` (81 entries); ``y`` is the next character's index
in :data:`LEAF_LETTERS` (80 classes). ``groups_train`` / ``groups_test`` are role ids over the
roles of both splits (sorted by name, ``group_names``), for the ``Natural`` partition. The
papers' protocol pools each role's train and test samples and splits them 80/20 again:
``merge_test: true`` with ``train_fraction: 0.8``.

A file whose counts disagree (``users`` vs ``num_samples`` vs the samples of a user, ``x`` vs
``y``), an input that is not 80 characters, or a character outside LEAF's alphabet is a
one-line error naming the file, the user and the sample.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import torch

from fedlight.core.errors import MissingFileError
from fedlight.core.paths import ConfigPath
from fedlight.data.sources.base import Source, SourceData
from fedlight.data.sources.files import DataFormatError, require_root

NAME = "shakespeare"
#: LEAF's 80-character alphabet (``ALL_LETTERS`` of its language utilities), in its order.
LEAF_LETTERS = ("\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]"
                "abcdefghijklmnopqrstuvwxyz}")
SEQUENCE_LENGTH = 80
PAD = "<pad>"
HOW = ("LEAF ships no data files; run its preprocessing (in a clone of "
       "https://github.com/TalwalkarLab/leaf: cd data/shakespeare && ./preprocess.sh -s niid "
       "--sf 1.0 -k 0 -t sample -tf 0.8) and set root (data.source.init_args.root) to "
       "data/shakespeare/data, which holds train/*.json and test/*.json")
_INPUT_CODE = np.zeros(max(map(ord, LEAF_LETTERS)) + 1, dtype=np.int64)  # code point -> id
_INPUT_CODE[[ord(c) for c in LEAF_LETTERS]] = np.arange(1, len(LEAF_LETTERS) + 1)


def read_leaf_file(path: Path) -> dict[str, tuple[list[str], list[str]]]:
    """``user -> (x strings, y characters)`` of one LEAF JSON file, every count checked.

    Raises:
        DataFormatError: not LEAF's layout, or counts that disagree.
    """
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise DataFormatError(path, err.lineno, f"not valid JSON ({err.msg})") from err
    if not isinstance(record, dict) or not {"users", "num_samples", "user_data"} <= set(record):
        raise DataFormatError(path, None, "expected LEAF's JSON object with users, "
                              "num_samples and user_data")
    users, counts, user_data = record["users"], record["num_samples"], record["user_data"]
    if len(users) != len(counts):
        raise DataFormatError(path, None, f"lists {len(users)} users but {len(counts)} "
                              "num_samples entries; they must be equally long")
    samples = {}
    for user, count in zip(users, counts, strict=True):
        data = user_data.get(user) if isinstance(user_data, dict) else None
        if not isinstance(data, dict) or "x" not in data or "y" not in data:
            raise DataFormatError(path, f"user {user!r}", "has no user_data entry with x and y")
        x, y = list(data["x"]), list(data["y"])
        if not len(x) == len(y) == count:
            raise DataFormatError(path, f"user {user!r}", f"num_samples says {count} but x "
                                  f"has {len(x)} and y has {len(y)} samples")
        samples[user] = (x, y)
    return samples


def _encode(path: Path, user: str, x: list[str], y: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Input codes ``(n, 80)`` (1 + alphabet index) and target classes ``(n,)`` of one user."""
    for i, (text, target) in enumerate(zip(x, y, strict=True)):
        if not isinstance(text, str) or len(text) != SEQUENCE_LENGTH:
            raise DataFormatError(path, f"user {user!r}, sample {i}", f"x must be a string of "
                                  f"{SEQUENCE_LENGTH} characters, got {text!r}")
        if not isinstance(target, str) or len(target) != 1:
            raise DataFormatError(path, f"user {user!r}, sample {i}",
                                  f"y must be one character, got {target!r}")
    inputs, inputs_ok = _codes("".join(x))
    targets, targets_ok = _codes("".join(y))
    for ok, width, field in ((inputs_ok, SEQUENCE_LENGTH, "x"), (targets_ok, 1, "y")):
        if not ok.all():
            first = int(np.argmin(ok))
            character = (x if field == "x" else y)[first // width][first % width]
            raise DataFormatError(path, f"user {user!r}, sample {first // width}",
                                  f"{field} holds character {character!r}, which is not in "
                                  f"LEAF's alphabet; valid: {LEAF_LETTERS!r}")
    return inputs.reshape(len(x), SEQUENCE_LENGTH), targets - 1


def _codes(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Input ids (1 + alphabet index, 0 where unknown) of ``text``'s characters, and which
    characters are in the alphabet."""
    code_points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
    known = code_points < len(_INPUT_CODE)
    ids = np.where(known, _INPUT_CODE[np.where(known, code_points, 0)], 0)
    return ids, ids > 0


def read_split(folder: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``user -> (inputs, targets)`` over every JSON file of one split folder."""
    files = sorted(folder.glob("*.json"))
    if not files:
        raise MissingFileError(f"data source {NAME!r}: no *.json file in {str(folder)!r}; "
                                f"{HOW}")
    split: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for path in files:
        for user, (x, y) in read_leaf_file(path).items():
            if user in split:
                raise DataFormatError(path, f"user {user!r}", "appears in two files of "
                                      f"{str(folder)!r}; each user belongs to one file")
            split[user] = _encode(path, user, x, y)
    return split


def _pack(split: dict[str, tuple[np.ndarray, np.ndarray]], group_of: dict[str, int]
          ) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    users = sorted(split)
    empty = (np.zeros((0, SEQUENCE_LENGTH), np.int64), np.zeros(0, np.int64))
    x = np.concatenate([split[u][0] for u in users] or [empty[0]])
    y = np.concatenate([split[u][1] for u in users] or [empty[1]])
    groups = np.concatenate([np.full(len(split[u][1]), group_of[u], np.int64) for u in users]
                            or [empty[1]])
    return torch.from_numpy(x), torch.from_numpy(y), groups


@functools.lru_cache(maxsize=1)
def _load(root: str | None) -> SourceData:
    folder = require_root(NAME, root, "LEAF's train/*.json and test/*.json")
    for split in ("train", "test"):
        if not (folder / split).is_dir():
            raise MissingFileError(f"data source {NAME!r}: no {split}/ folder in "
                                    f"{str(folder)!r}; {HOW}")
    train, test = read_split(folder / "train"), read_split(folder / "test")
    names = sorted(set(train) | set(test))
    group_of = {name: i for i, name in enumerate(names)}
    x_train, y_train, groups_train = _pack(train, group_of)
    x_test, y_test, groups_test = _pack(test, group_of)
    return SourceData(
        x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test,
        num_classes=len(LEAF_LETTERS), groups_train=groups_train, groups_test=groups_test,
        group_names=names, vocab=[PAD, *LEAF_LETTERS],
    )


class Shakespeare(Source):
    """LEAF's Shakespeare: next-character prediction, one group per role. It is not
    downloaded: LEAF publishes scripts, not files, and a missing file's error says how to make
    them.

    Args:
        root: the folder of the dataset's files (see the module doc). In a config file a
            relative path is relative to the file's folder.
    """

    name = NAME

    def __init__(self, root: ConfigPath | str | None = None) -> None:
        self.root = root

    def read(self, seed: int) -> SourceData:
        return _load(self.root)


__all__ = ["LEAF_LETTERS", "SEQUENCE_LENGTH", "Shakespeare", "read_leaf_file", "read_split"]
