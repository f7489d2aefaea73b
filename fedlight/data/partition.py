"""Partitions: pure, seeded functions from labels (and domains) to per-client index arrays.

`partition_labels(name, labels, num_clients, seed, ...)` returns one sorted int64 array of
indices into `labels` per client. Every sample goes to at most one client, the same seed
gives the same arrays, and impossible settings raise `ValueError` naming the bad value and
what would be valid. `split_client` then cuts one client's indices into train and test.

Schemes (``PARTITIONS``):
- ``iid``: shuffle and deal out evenly.
- ``dirichlet``: per class, shares over clients ~ Dir(beta) (Hsu et al. 2019, as in
  NIID-Bench and PFLlib, including their cap that stops a client already holding N/K
  samples from taking more), redrawn until every client has `min_client_size` samples.
- ``pathological``: `classes_per_client` classes per client, each class used by as many
  clients as the others (within one), its samples split evenly among them (FedAvg; PFLlib's
  ``balance=True``), or with ``balanced=False`` in random shares as PFLlib's generators do
  by default (``separate_data``, ``balance=False``): each holder but the last of a class gets
  a uniform random integer in [max(n / h / 10, least / C), n / h) of its n samples (h
  holders, C classes, least = min(40, N / K / 2), PFLlib's at least one test batch of 10 at
  a 75 / 25 split), the last holder the rest.
- ``shards``: sort by label, cut into `num_clients * shards_per_client` shards, deal
  `shards_per_client` random shards to each client (McMahan et al. 2017).
- ``incomplete``: each client holds a random k in {2..C} classes and a LogNormal(0,
  size_sigma) size factor; each class is split among its holders in proportion to their
  size factors (MAP).
- ``domains``: one domain per client; with more clients than domains, each domain is split
  IID among `num_clients / num_domains` clients (FedPick's natural partition).
- ``natural``: one client per group of a source that records who made each sample (the writer
  of a LEAF FEMNIST character; later a play role or a subject): every sample of a group goes
  to its client. With fewer clients than groups, `num_clients` groups are drawn at random
  (the papers' sampling of writers); the local train/test cut is the data module's
  `train_fraction` (0.8 for the papers' 80/20).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fedlight.core.errors import ConfigError

__all__ = ["PARTITIONS", "partition_labels", "split_client"]

_MAX_DIRICHLET_ATTEMPTS = 1000


@dataclass(frozen=True)
class _Options:
    beta: float
    classes_per_client: int
    shards_per_client: int
    min_client_size: int
    size_sigma: float
    balanced: bool
    domains: np.ndarray | None
    groups: np.ndarray | None


Partitioner = Callable[[np.ndarray, int, np.random.Generator, _Options], list[np.ndarray]]


# ---------------------------------------------------------------------------- helpers


def _by_class(labels: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled indices of each class present in `labels`, in class order."""
    return [rng.permutation(np.flatnonzero(labels == c)) for c in np.unique(labels)]


def _cut(indices: np.ndarray, counts: np.ndarray) -> list[np.ndarray]:
    """Consecutive pieces of `indices` with the given sizes (which sum to its length)."""
    return np.split(indices, np.cumsum(counts)[:-1])


def _proportional_counts(total: int, weights: np.ndarray) -> np.ndarray:
    """Integers proportional to `weights` that sum to `total` (largest remainder)."""
    exact = total * weights / weights.sum()
    counts = np.floor(exact).astype(np.int64)
    remainder = total - int(counts.sum())
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[:remainder]] += 1
    return counts


def _gather(pieces: list[tuple[int, np.ndarray]], num_clients: int) -> list[np.ndarray]:
    """Concatenate (client, indices) pieces into one array per client."""
    per_client: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for client, indices in pieces:
        per_client[client].append(indices)
    return [np.concatenate(p) if p else np.empty(0, np.int64) for p in per_client]


def _require_positive_int(name: str, value: int) -> None:
    if int(value) != value or value < 1:
        raise ConfigError(f"{name}={value!r} is invalid; it must be a positive integer")


# ---------------------------------------------------------------------------- schemes


def _iid(labels: np.ndarray, k: int, rng: np.random.Generator, o: _Options) -> list[np.ndarray]:
    return np.array_split(rng.permutation(len(labels)), k)


def _dirichlet(
    labels: np.ndarray, k: int, rng: np.random.Generator, o: _Options
) -> list[np.ndarray]:
    if not (math.isfinite(o.beta) and o.beta > 0):
        raise ConfigError(f"beta={o.beta} is invalid for the dirichlet partition; use beta > 0")
    n = len(labels)
    if o.min_client_size * k > n:
        raise ConfigError(
            f"min_client_size={o.min_client_size} x num_clients={k} needs more than the {n} "
            f"samples; use at most {n // o.min_client_size} clients or lower min_client_size"
        )
    classes = _by_class(labels, rng)
    for _ in range(_MAX_DIRICHLET_ATTEMPTS):
        counts = _dirichlet_counts([len(c) for c in classes], k, o.beta, rng)
        if counts.sum(axis=0).min() >= o.min_client_size:
            pieces = [
                (client, piece)
                for idx, row in zip(classes, counts, strict=True)
                for client, piece in enumerate(_cut(idx, row))
            ]
            return _gather(pieces, k)
    raise ConfigError(
        f"the dirichlet partition found no draw giving every client at least "
        f"min_client_size={o.min_client_size} samples in {_MAX_DIRICHLET_ATTEMPTS} tries "
        f"(beta={o.beta}, num_clients={k}, {n} samples); raise beta, lower num_clients "
        "or lower min_client_size"
    )


def _dirichlet_counts(
    class_sizes: list[int], k: int, beta: float, rng: np.random.Generator
) -> np.ndarray:
    """(classes, clients) sample counts: each class's shares ~ Dir(beta) over the clients
    still holding fewer than N/K samples."""
    n = sum(class_sizes)
    held = np.zeros(k, np.int64)
    rows = []
    for size in class_sizes:
        shares = rng.dirichlet(np.full(k, beta)) * (held < n / k)
        if not shares.sum() > 0:  # every open client drew ~0: share among them evenly
            shares = (held < n / k).astype(float)
        cuts = (np.cumsum(shares / shares.sum()) * size).astype(np.int64)
        cuts[-1] = size
        row = np.diff(cuts, prepend=0)
        held += row
        rows.append(row)
    return np.stack(rows)


def _pathological(
    labels: np.ndarray, k: int, rng: np.random.Generator, o: _Options
) -> list[np.ndarray]:
    classes = _by_class(labels, rng)
    m = o.classes_per_client
    if int(m) != m or not 1 <= m <= len(classes):
        raise ConfigError(
            f"classes_per_client={m} is invalid; the labels hold {len(classes)} classes, "
            f"so use 1..{len(classes)}"
        )
    holders = _assign_classes(len(classes), k, m, rng)
    pieces = []
    for c, (idx, owners) in enumerate(zip(classes, holders, strict=True)):
        if len(idx) < len(owners):
            raise ConfigError(
                f"class {c} has {len(idx)} samples but {len(owners)} clients must hold it "
                f"(classes_per_client={m}, num_clients={k}); lower num_clients or "
                "classes_per_client"
            )
        if not owners:  # with num_clients * classes_per_client < C some classes go unused
            continue
        if o.balanced:
            pieces += zip(owners, np.array_split(idx, len(owners)), strict=True)
        else:
            least = int(min(_PFLLIB_LEAST_SAMPLES, len(labels) / k / 2)) / len(classes)
            pieces += zip(owners, _cut(idx, _random_shares(len(idx), len(owners), least, rng)),
                          strict=True)
    return _gather(pieces, k)


#: PFLlib's ``least_samples`` bound: one test batch of 10 at its 75 / 25 split (10 / 0.25)
_PFLLIB_LEAST_SAMPLES = 40


def _random_shares(n: int, holders: int, least: float, rng: np.random.Generator) -> np.ndarray:
    """PFLlib's unequal shares of a class's `n` samples among `holders` clients: each but the
    last draws an integer in [max(n / holders / 10, least), n / holders) (bounds truncated to
    integers as ``np.random.randint`` does, and at least 1), the last takes the rest; a class
    too small for that range is split evenly."""
    mean = n / holders
    low, high = max(1, int(max(mean / 10, least))), int(mean)
    if holders == 1 or low >= high:
        return np.array([len(p) for p in np.array_split(np.arange(n), holders)])
    drawn = rng.integers(low, high, holders - 1)
    return np.append(drawn, n - drawn.sum())


def _assign_classes(num_classes: int, k: int, m: int, rng: np.random.Generator) -> list[list[int]]:
    """Give each client `m` distinct classes, always among the least used so far (random
    ties), so class usage differs by at most one. Returns the holders of each class."""
    used = np.zeros(num_classes, np.int64)
    holders: list[list[int]] = [[] for _ in range(num_classes)]
    for client in range(k):
        chosen = np.lexsort((rng.random(num_classes), used))[:m]
        used[chosen] += 1
        for c in chosen:
            holders[c].append(client)
    return holders


def _shards(labels: np.ndarray, k: int, rng: np.random.Generator, o: _Options) -> list[np.ndarray]:
    _require_positive_int("shards_per_client", o.shards_per_client)
    num_shards = k * o.shards_per_client
    if num_shards > len(labels):
        raise ConfigError(
            f"num_clients={k} x shards_per_client={o.shards_per_client} = {num_shards} shards "
            f"exceeds the {len(labels)} samples; lower shards_per_client or num_clients"
        )
    shuffled = rng.permutation(len(labels))  # random order inside each label
    by_label = shuffled[np.argsort(labels[shuffled], kind="stable")]
    shards = np.array_split(by_label, num_shards)  # sizes differ by at most one
    dealt = rng.permutation(num_shards).reshape(k, o.shards_per_client)
    return [np.concatenate([shards[s] for s in row]) for row in dealt]


def _incomplete(
    labels: np.ndarray, k: int, rng: np.random.Generator, o: _Options
) -> list[np.ndarray]:
    classes = _by_class(labels, rng)
    if len(classes) < 2:
        raise ConfigError(
            f"the incomplete partition needs at least 2 classes; the labels hold {len(classes)}"
        )
    if not (math.isfinite(o.size_sigma) and o.size_sigma >= 0):
        raise ConfigError(f"size_sigma={o.size_sigma} is invalid; use size_sigma >= 0")
    holders = _random_class_sets(len(classes), k, rng)
    size = rng.lognormal(0.0, o.size_sigma, k)
    pieces = []
    for c, (idx, owners) in enumerate(zip(classes, holders, strict=True)):
        if len(idx) < len(owners):
            raise ConfigError(
                f"class {c} has {len(idx)} samples but {len(owners)} clients hold it in the "
                f"incomplete partition (num_clients={k}); lower num_clients"
            )
        counts = 1 + _proportional_counts(len(idx) - len(owners), size[owners])
        pieces += zip(owners, _cut(idx, counts), strict=True)
    parts = _gather(pieces, k)
    _check_min_size(parts, o.min_client_size)
    return parts


def _random_class_sets(num_classes: int, k: int, rng: np.random.Generator) -> list[list[int]]:
    """Each client takes a random k in {2..C} classes; a class nobody took goes to a random
    client (who then holds k + 1 <= C). Returns the holders of each class."""
    holders: list[list[int]] = [[] for _ in range(num_classes)]
    for client in range(k):
        count = rng.integers(2, num_classes + 1)
        for c in rng.choice(num_classes, size=count, replace=False):
            holders[c].append(client)
    for owners in holders:
        if not owners:
            owners.append(int(rng.integers(k)))
    return [sorted(owners) for owners in holders]


def _check_min_size(parts: list[np.ndarray], minimum: int) -> None:
    sizes = [len(p) for p in parts]
    smallest = int(np.argmin(sizes))
    if sizes[smallest] < minimum:
        raise ConfigError(
            f"the incomplete partition gave client {smallest} only {sizes[smallest]} samples, "
            f"fewer than min_client_size={minimum}; lower num_clients={len(parts)}, "
            "min_client_size or size_sigma, or try another seed"
        )


def _domains(labels: np.ndarray, k: int, rng: np.random.Generator, o: _Options) -> list[np.ndarray]:
    domains = _required_ids("domains", "a domain id", "domains", o.domains, labels)
    ids = np.unique(domains)
    if k % len(ids):
        raise ConfigError(
            f"num_clients={k} is invalid for the domains partition: the data has {len(ids)} "
            f"domains, so use a multiple of {len(ids)} (one or more clients per domain)"
        )
    per_domain = k // len(ids)
    parts = []
    for d in ids:
        idx = rng.permutation(np.flatnonzero(domains == d))
        if len(idx) < per_domain:
            raise ConfigError(
                f"domain {d} has {len(idx)} samples, fewer than its {per_domain} clients "
                f"(num_clients={k}); lower num_clients"
            )
        parts += np.array_split(idx, per_domain)
    return parts


def _required_ids(partition: str, what: str, kind: str, ids: np.ndarray | None,
                  labels: np.ndarray) -> np.ndarray:
    """The source's per-sample ids (domains, groups) a partition needs; one-line errors where
    the source has none or their shape is not the labels'."""
    if ids is None:
        others = ", ".join(p for p in PARTITIONS if p not in _NEED_IDS)
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


def _natural(labels: np.ndarray, k: int, rng: np.random.Generator, o: _Options) -> list[np.ndarray]:
    groups = _required_ids("natural", "a group (writer, user) id", "groups", o.groups, labels)
    ids = np.unique(groups)
    if k > len(ids):
        raise ConfigError(
            f"num_clients={k} exceeds the {len(ids)} groups (writers / users) of the data; "
            f"the natural partition has one client per group, so use at most {len(ids)}"
        )
    chosen = ids if k == len(ids) else np.sort(rng.choice(ids, size=k, replace=False))
    order = np.argsort(groups, kind="stable")
    starts = np.searchsorted(groups[order], chosen)
    ends = np.searchsorted(groups[order], chosen, side="right")
    return [order[a:b] for a, b in zip(starts, ends, strict=True)]


# ---------------------------------------------------------------------------- public API

_PARTITIONERS: dict[str, Partitioner] = {
    "iid": _iid,
    "dirichlet": _dirichlet,
    "pathological": _pathological,
    "shards": _shards,
    "incomplete": _incomplete,
    "domains": _domains,
    "natural": _natural,
}

PARTITIONS: tuple[str, ...] = tuple(_PARTITIONERS)
_NEED_IDS = ("domains", "natural")  # schemes that need per-sample ids from the source


def _validated_labels(labels: np.ndarray) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ConfigError(
            f"labels must be a 1-D integer array, got shape {labels.shape} and dtype {labels.dtype}"
        )
    if len(labels) and labels.min() < 0:
        raise ConfigError(f"labels must be non-negative class ids, got {labels.min()}")
    return labels


def partition_labels(
    name: str,
    labels: np.ndarray,
    num_clients: int,
    seed: int,
    *,
    beta: float = 0.1,
    classes_per_client: int = 2,
    shards_per_client: int = 2,
    min_client_size: int = 10,
    size_sigma: float = 0.3,
    balanced: bool = True,
    domains: np.ndarray | None = None,
    groups: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Split the samples behind `labels` among `num_clients` clients.

    Args:
        name: the scheme, one of `PARTITIONS`.
        labels: class id of every sample, shape (N,).
        num_clients: how many index arrays to return.
        seed: seeds everything random; the same seed gives the same result.
        beta: Dirichlet concentration (``dirichlet``); smaller is more skewed.
        classes_per_client: classes each client holds (``pathological``).
        shards_per_client: label-sorted shards each client gets (``shards``).
        min_client_size: least samples per client (``dirichlet``, ``incomplete``).
        size_sigma: sigma of the LogNormal client size factors (``incomplete``).
        balanced: split each class evenly among its holders (``pathological``); False gives
            PFLlib's random unequal shares (see the module docstring).
        domains: domain id of every sample, shape (N,) (``domains``).
        groups: group (writer, user) id of every sample, shape (N,) (``natural``).

    Returns:
        `num_clients` sorted int64 arrays of indices into `labels`, pairwise disjoint and
        none empty.

    Raises:
        ValueError: an unknown name or a setting the labels cannot satisfy; the message
            names the value and what would be valid.
    """
    partitioner = _PARTITIONERS.get(name)
    if partitioner is None:
        raise ConfigError(f"unknown partition {name!r}; valid: {', '.join(PARTITIONS)}")
    labels = _validated_labels(labels)
    _require_positive_int("num_clients", num_clients)
    if int(min_client_size) != min_client_size or min_client_size < 0:
        raise ConfigError(f"min_client_size={min_client_size!r} is invalid; use an integer >= 0")
    if num_clients > len(labels):
        sized = name in ("dirichlet", "incomplete") and min_client_size > 1
        most = len(labels) // int(min_client_size) if sized else len(labels)
        raise ConfigError(
            f"num_clients={num_clients} exceeds the {len(labels)} samples; use at most "
            f"{most} clients" + (f" (min_client_size={min_client_size})" if sized else "")
        )
    options = _Options(
        beta, classes_per_client, shards_per_client, int(min_client_size), size_sigma,
        bool(balanced), domains, groups,
    )
    parts = partitioner(labels, int(num_clients), np.random.default_rng(seed), options)
    empty = [i for i, p in enumerate(parts) if len(p) == 0]
    if empty:
        raise ConfigError(
            f"the {name} partition left client {empty[0]} with no samples "
            f"({len(empty)} empty of num_clients={num_clients}); lower num_clients"
        )
    return [np.sort(p).astype(np.int64) for p in parts]


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
