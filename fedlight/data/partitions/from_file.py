"""``FromFile``: each client's train / test indices read from a JSON file (a run's
``partition.json`` is one)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedlight.core.errors import ConfigError, MissingFileError
from fedlight.core.paths import ConfigPath
from fedlight.data.partitions.base import Partition

__all__ = ["FromFile", "read_partition_file"]


class FromFile(Partition):
    """Per-client index lists over any source, read from a JSON file:
    ``{"clients": [{"train": [...], "test": [...]}, ...]}``, indices into the source's train
    split followed by its test split when data.merge_test is set (a run's partition.json is
    one). num_clients is then the file's, and the file's test lists replace the
    train_fraction cut.

    Args:
        path: the JSON file. In a config file a relative path is relative to the file's folder.
    """

    name = "file"

    def __init__(self, path: ConfigPath | str) -> None:
        self.path = path

    def fixed_splits(self, pool_size: int) -> list[tuple[np.ndarray, np.ndarray]]:
        return read_partition_file(self.path, pool_size)

    def assign(self, labels: np.ndarray, k: int, rng: np.random.Generator,
               ids: np.ndarray | None) -> list[np.ndarray]:
        raise ConfigError(f"the {self.name} partition reads each client's train and test "
                          f"indices from {str(self.path)!r}; it does not split labels")


def read_partition_file(path: str | Path, pool_size: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per-client ``(train, test)`` index arrays from a partition JSON file, validated: every
    index in ``0..pool_size-1``, no sample in two places, no client without training data."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"partition file {str(path)!r} does not exist")
    record = json.loads(path.read_text())
    clients = record.get("clients") if isinstance(record, dict) else None
    if not isinstance(clients, list) or not clients:
        raise ConfigError(f"{str(path)!r} must hold {{\"clients\": [{{\"train\": [...], "
                         "\"test\": [...]}, ...]}} with at least one client")
    owner: dict[int, str] = {}
    splits = []
    for client_id, client in enumerate(clients):
        train = np.asarray(client.get("train", []), dtype=np.int64)
        test = np.asarray(client.get("test", []), dtype=np.int64)
        if len(train) == 0:
            raise ConfigError(f"{str(path)!r}: client {client_id} has no training sample")
        for name, index in (("train", train), ("test", test)):
            bad = index[(index < 0) | (index >= pool_size)]
            if len(bad):
                raise ConfigError(f"{str(path)!r}: client {client_id} {name} index {int(bad[0])} "
                                 f"is out of range 0..{pool_size - 1}")
            for i in index.tolist():
                where = f"client {client_id} {name}"
                if i in owner:
                    raise ConfigError(f"{str(path)!r}: sample {i} is in {owner[i]} and in {where}")
                owner[i] = where
        splits.append((train, test))
    return splits


