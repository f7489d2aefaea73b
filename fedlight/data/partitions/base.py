"""Partitions: seeded splits of a source's samples among clients, one class per scheme.

A partition is a class_path object of a config's ``data.partition`` (``class_path: Dirichlet``,
its options under ``init_args``). :meth:`Partition.split` returns one sorted int64 array of
indices into the labels per client: every sample goes to at most one client, the same seed
gives the same arrays, and impossible settings raise a ConfigError naming the bad value and
what would be valid. `split_client` then cuts one client's indices into train and test.

A new scheme is one file in ``fedlight/data/partitions/``: a subclass of `Partition` with a
``name`` and an ``assign``; defining it registers it (``PARTITIONS``) and makes its class name
a short ``class_path``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from fedlight.core.errors import ConfigError
from fedlight.data.plugin import Plugin, from_record

__all__ = ["PARTITIONS", "Partition", "as_partition", "by_class", "cut", "gather",
           "proportional_counts", "require_min_client_size", "require_positive_int",
           "required_ids", "sized_limit", "split_client", "validated_labels"]

#: Every partition class by its name (``dirichlet``): filled as each is defined.
PARTITIONS: dict[str, type[Partition]] = {}


class Partition(Plugin, ABC):
    """How a source's samples are split among clients: a config's ``data.partition``.

    A subclass sets ``name`` (the short name of run folders and partition.json) and implements
    :meth:`assign`; its constructor arguments are its options, each kept as the attribute of
    the same name (what a run's config.json records).
    """

    #: The scheme's name in run names and partition.json (``dirichlet``).
    name: ClassVar[str] = ""
    #: What the source must record per sample for this scheme, one client per value:
    #: ``"domain"`` or ``"group"``; None for schemes that read the labels only.
    ids: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in vars(cls) and cls.name:
            if PARTITIONS.get(cls.name, cls) is not cls:
                raise ValueError(f"partition {cls.name!r} is defined twice: "
                                 f"{PARTITIONS[cls.name].__qualname__} and {cls.__qualname__}")
            PARTITIONS[cls.name] = cls

    def split(self, labels: np.ndarray, num_clients: int, seed: int, *,
              domains: np.ndarray | None = None,
              groups: np.ndarray | None = None) -> list[np.ndarray]:
        """Split the samples behind `labels` among `num_clients` clients.

        Args:
            labels: class id of every sample, shape (N,).
            num_clients: how many index arrays to return.
            seed: seeds everything random; the same seed gives the same result.
            domains: domain id of every sample, shape (N,) (schemes with ``ids = "domain"``).
            groups: group (writer, user) id of every sample, shape (N,) (``ids = "group"``).

        Returns:
            `num_clients` sorted int64 arrays of indices into `labels`, pairwise disjoint and
            none empty.

        Raises:
            ConfigError: a setting the labels cannot satisfy; the message names the value and
                what would be valid.
        """
        labels = validated_labels(labels)
        require_positive_int("num_clients", num_clients)
        if num_clients > len(labels):
            raise ConfigError(
                f"num_clients={num_clients} exceeds the {len(labels)} samples; use at most "
                + self.client_limit(len(labels))
            )
        ids = {"domain": domains, "group": groups}.get(self.ids or "")
        parts = self.assign(labels, int(num_clients), np.random.default_rng(seed), ids)
        empty = [i for i, p in enumerate(parts) if len(p) == 0]
        if empty:
            raise ConfigError(
                f"the {self.name} partition left client {empty[0]} with no samples "
                f"({len(empty)} empty of num_clients={num_clients}); lower num_clients"
            )
        return [np.sort(p).astype(np.int64) for p in parts]

    @abstractmethod
    def assign(self, labels: np.ndarray, k: int, rng: np.random.Generator,
               ids: np.ndarray | None) -> list[np.ndarray]:
        """`k` arrays of indices into `labels` (checked: 1-D non-negative integers, at least `k`
        of them), drawn with `rng`; `ids` are the source's per-sample domain or group ids
        where the scheme has ``ids`` set (None where the source has none)."""

    def client_limit(self, samples: int) -> str:
        """The most clients `samples` samples allow, as the error of too many says it."""
        return f"{samples} clients"

    def fixed_splits(self, pool_size: int) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """Each client's (train, test) indices into a pool of `pool_size` samples for a scheme
        that fixes them itself (``FromFile``); None (the default) for schemes that split the
        labels (the data module then cuts each client's samples into train and test)."""
        return None


def as_partition(value: Partition | Mapping[str, Any]) -> Partition:
    """A Partition, or the one a ``{"class_path": ..., "init_args": {...}}`` mapping describes
    (class_path a class name such as ``Dirichlet`` or a full path)."""
    return from_record(value, Partition, PARTITIONS, "partition")


# ---------------------------------------------------------------------------- helpers


def by_class(labels: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled indices of each class present in `labels`, in class order."""
    return [rng.permutation(np.flatnonzero(labels == c)) for c in np.unique(labels)]


def cut(indices: np.ndarray, counts: np.ndarray) -> list[np.ndarray]:
    """Consecutive pieces of `indices` with the given sizes (which sum to its length)."""
    return np.split(indices, np.cumsum(counts)[:-1])


def proportional_counts(total: int, weights: np.ndarray) -> np.ndarray:
    """Integers proportional to `weights` that sum to `total` (largest remainder)."""
    exact = total * weights / weights.sum()
    counts = np.floor(exact).astype(np.int64)
    remainder = total - int(counts.sum())
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[:remainder]] += 1
    return counts


def gather(pieces: list[tuple[int, np.ndarray]], num_clients: int) -> list[np.ndarray]:
    """Concatenate (client, indices) pieces into one array per client."""
    per_client: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for client, indices in pieces:
        per_client[client].append(indices)
    return [np.concatenate(p) if p else np.empty(0, np.int64) for p in per_client]


def require_positive_int(name: str, value: int) -> None:
    if int(value) != value or value < 1:
        raise ConfigError(f"{name}={value!r} is invalid; it must be a positive integer")


def sized_limit(samples: int, min_client_size: int) -> str:
    """:meth:`Partition.client_limit` of a scheme that gives every client at least
    `min_client_size` samples."""
    if min_client_size > 1:
        return f"{samples // int(min_client_size)} clients (min_client_size={min_client_size})"
    return f"{samples} clients"


def require_min_client_size(min_client_size: int) -> None:
    if int(min_client_size) != min_client_size or min_client_size < 0:
        raise ConfigError(f"min_client_size={min_client_size!r} is invalid; use an integer >= 0")


def required_ids(partition: str, what: str, kind: str, ids: np.ndarray | None,
                 labels: np.ndarray) -> np.ndarray:
    """The source's per-sample ids (domains, groups) a partition needs; one-line errors where
    the source has none or their shape is not the labels'."""
    if ids is None:
        others = ", ".join(name for name, cls in PARTITIONS.items() if cls.ids is None)
        raise ConfigError(
            f"the {partition} partition needs {what} per sample, but this source has no "
            f"{kind}; valid partitions for it: {others}"
        )
    ids = np.asarray(ids)
    if ids.shape != labels.shape:
        raise ConfigError(
            f"{kind} has shape {ids.shape} but labels have shape {labels.shape}; "
            f"give one {kind[:-1]} id per sample"
        )
    return ids


def validated_labels(labels: np.ndarray) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ConfigError(
            f"labels must be a 1-D integer array, got shape {labels.shape} and dtype {labels.dtype}"
        )
    if len(labels) and labels.min() < 0:
        raise ConfigError(f"labels must be non-negative class ids, got {labels.min()}")
    return labels


def split_client(
    indices: np.ndarray, train_fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Cut one client's indices into (train, test), both sorted int64.

    The indices are shuffled with `rng`, then ``round(train_fraction * n)`` of them (at
    least one when there is any) go to train and the rest to test; ``train_fraction == 1``
    gives an empty test array.
    """
    if not 0 < train_fraction <= 1:
        raise ConfigError(f"train_fraction={train_fraction} is invalid; use "
                          "0 < train_fraction <= 1")
    indices = np.asarray(indices, dtype=np.int64)
    shuffled = rng.permutation(indices)
    n_train = math.floor(train_fraction * len(indices) + 0.5)
    n_train = min(len(indices), max(1, n_train)) if len(indices) else 0
    return np.sort(shuffled[:n_train]), np.sort(shuffled[n_train:])
