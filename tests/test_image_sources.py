"""Folder sources read in their publishers' layouts: shapes, labels, domains, writers, the
decode cache, one-line errors that write nothing, and the real CIFAR-10 PNGs when present."""

from __future__ import annotations

import json
import os
from pathlib import Path

import dataset_files
import numpy as np
import pytest
import torch

from fedlight.core.errors import ConfigError
from fedlight.data import FederatedDataModule, SampleCaps
from fedlight.data.partitions.domains import Domains
from fedlight.data.partitions.iid import IID
from fedlight.data.partitions.natural import Natural
from fedlight.data.sources import SOURCES
from fedlight.data.sources.base import from_arrays
from fedlight.data.sources.cinic10 import CINIC10
from fedlight.data.sources.digits import Digits
from fedlight.data.sources.domainnet10 import DomainNet10
from fedlight.data.sources.femnist import FEMNIST
from fedlight.data.sources.imagefolder import ImageFolder
from fedlight.data.sources.images import to_source
from fedlight.data.sources.office_caltech10 import OfficeCaltech10
from fedlight.data.sources.tinyimagenet import TinyImageNet
from tests.conftest import cached_files

# The shared data sit beside the repository (CI provides them there): ../shared/data/cifar10.
CIFAR10_PNG = Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar10"


#: every test decodes into its own cache folder
pytestmark = pytest.mark.usefixtures("cache")



def test_every_folder_source_is_registered() -> None:
    assert set(dataset_files.WRITERS) <= set(SOURCES)


def test_imagefolder_reads_classes_in_sorted_order_and_caches(tmp_path, cache) -> None:
    root = dataset_files.imagefolder(tmp_path / "data", classes=3, per_class=4)
    data = ImageFolder(root=root).load()
    assert data.x_train.shape == (12, 3, 8, 8) and data.x_test.shape == (6, 3, 8, 8)
    assert data.num_classes == 3
    assert data.y_train.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert data.y_test.tolist() == [0, 0, 1, 1, 2, 2]
    assert torch.allclose(data.x_train.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-5)
    written = cached_files(cache / "images")
    assert len(written) == 2 and all(p.suffix == ".npz" for p in written)


def test_imagefolder_cache_follows_the_files(tmp_path, cache) -> None:
    root = dataset_files.imagefolder(tmp_path / "data", classes=2, per_class=2)
    ImageFolder(root=root).load()
    first = cached_files(cache / "images")
    ImageFolder(root=root, image_size=4).load()  # another size: another entry
    assert len(cached_files(cache / "images")) == len(first) + 2
    extra = root / "train" / "class0" / "more.png"
    dataset_files.write_image(extra, np.zeros((8, 8, 3), np.uint8))
    from fedlight.data.sources import imagefolder

    imagefolder._load.cache_clear()
    data = ImageFolder(root=root).load()
    assert len(data.y_train) == 5  # the new file is read, not the stale cache


def test_imagefolder_grey_files_give_one_channel_and_image_size_resizes(tmp_path) -> None:
    root = dataset_files.imagefolder(tmp_path / "data", grey=True)
    assert ImageFolder(root=root).load().input_shape == (1, 8, 8)
    assert ImageFolder(root=root, image_size=5).load().input_shape == (1, 5, 5)


def test_uint8_standardization_matches_the_float_one() -> None:
    rng = np.random.default_rng(0)
    train, test = (rng.integers(0, 256, (n, 3, 4, 4), dtype=np.uint8) for n in (50, 7))
    fast = to_source(train, np.zeros(50, int), 2, test, np.zeros(7, int))
    reference = from_arrays(torch.from_numpy(train).float() / 255, np.zeros(50, int), 2,
                             torch.from_numpy(test).float() / 255, np.zeros(7, int))
    assert torch.allclose(fast.x_train, reference.x_train, atol=1e-5)
    assert torch.allclose(fast.x_test, reference.x_test, atol=1e-5)


def test_tinyimagenet_reads_train_and_annotated_val(tmp_path) -> None:
    data = TinyImageNet(root=dataset_files.tinyimagenet(tmp_path, classes=4)).load()
    assert data.input_shape == (3, 16, 16) and data.num_classes == 4
    assert len(data.y_train) == 24 and np.bincount(data.y_train.numpy()).tolist() == [6] * 4
    assert data.y_test.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]  # wnids sorted, as ImageFolder


def test_cinic10_uses_train_and_test_not_valid(tmp_path) -> None:
    data = CINIC10(root=dataset_files.cinic10(tmp_path, per_class=2)).load()
    assert data.num_classes == 10 and len(data.y_train) == 20 and len(data.y_test) == 20


def test_femnist_keeps_writers_in_one_id_space(tmp_path) -> None:
    data = FEMNIST(root=dataset_files.femnist(tmp_path, writers=6)).load()
    assert data.input_shape == (1, 28, 28) and data.num_classes == 62
    assert len(data.group_names) == 6 and data.group_names == sorted(data.group_names)
    assert np.bincount(data.groups_train).tolist() == [9, 10, 11, 9, 10, 11]
    assert np.bincount(data.groups_test).tolist() == [3, 4, 5, 3, 4, 5]


def test_natural_partition_gives_each_client_one_writer(tmp_path) -> None:
    root = dataset_files.femnist(tmp_path, writers=6)
    module = FederatedDataModule(source=FEMNIST(root=str(root)), partition=Natural(),
                                 num_clients=4, merge_test=True,
                                 train_fraction=0.8, seed=3)
    module.setup()
    groups = np.concatenate([module.data.groups_train, module.data.groups_test])
    writers = [set(groups[np.concatenate([s.train, s.test])].tolist()) for s in module.splits]
    assert all(len(w) == 1 for w in writers) and len(set.union(*writers)) == 4
    for split, owner in zip(module.splits, writers, strict=True):
        total = int(np.sum(groups == next(iter(owner))))
        assert len(split.train) + len(split.test) == total  # the writer's train and test pooled
        assert len(split.train) == round(0.8 * total)
    with pytest.raises(ValueError, match="num_clients=7 exceeds the 6 groups"):
        FederatedDataModule(source=FEMNIST(root=str(root)), partition=Natural(),
                            num_clients=7).setup()


@pytest.mark.parametrize(("source", "domains", "shape"), [
    ("office_caltech10", 4, (3, 12, 12)), ("domainnet10", 6, (3, 12, 12)),
    ("digits5_real", 5, (3, 32, 32)),
])
def test_cross_domain_sources_record_domains(tmp_path, source, domains, shape) -> None:
    root = dataset_files.WRITERS[source](tmp_path)
    size = None if source == "digits5_real" else 12
    data = SOURCES[source](root=root, image_size=size).load()
    assert data.input_shape == shape and data.num_classes == 10
    assert len(data.domain_names) == domains
    assert np.unique(data.domains_train).tolist() == list(range(domains))
    assert set(data.y_train.tolist()) == set(range(10))
    if source == "digits5_real":  # MNIST from train.pkl, the others from two slices
        assert np.bincount(data.domains_train).tolist() == [30, 60, 60, 60, 60]
    if source == "office_caltech10":
        assert data.x_test is None  # no official split
    else:
        assert np.unique(data.domains_test).tolist() == list(range(domains))


def test_max_train_samples_caps_training_and_keeps_tests(tmp_path) -> None:
    root = dataset_files.office_caltech10(tmp_path)
    options = dict(source=OfficeCaltech10(root=str(root), image_size=8), partition=Domains(),
                   num_clients=4, train_fraction=0.5)
    whole = FederatedDataModule(**options)
    capped = FederatedDataModule(caps=SampleCaps(train_samples=4), **options)
    whole.setup()
    capped.setup()
    for a, b in zip(whole.splits, capped.splits, strict=True):
        assert len(b.train) == 4 and set(b.train) <= set(a.train)
        assert np.array_equal(a.test, b.test)


def test_surplus_training_samples_can_join_the_local_test_split(tmp_path) -> None:
    root = dataset_files.office_caltech10(tmp_path)
    options = dict(source=OfficeCaltech10(root=str(root), image_size=8), partition=Domains(),
                   num_clients=4, train_fraction=0.5)
    whole = FederatedDataModule(**options)
    dropped = FederatedDataModule(**options, caps=SampleCaps(train_samples=4))
    kept = FederatedDataModule(**options, caps=SampleCaps(train_samples=4, surplus_train="test"))
    for data in (whole, dropped, kept):
        data.setup()
    for w, a, b in zip(whole.splits, dropped.splits, kept.splits, strict=True):
        assert np.array_equal(a.train, b.train) and len(b.train) == 4
        assert np.array_equal(a.test, w.test)  # drop: the held-out split only
        assert sorted([*b.train, *b.test]) == sorted([*w.train, *w.test])  # test: every sample


def test_a_split_without_any_local_test_sample_is_one_line(tmp_path) -> None:
    root = dataset_files.office_caltech10(tmp_path)
    data = FederatedDataModule(source=OfficeCaltech10(root=str(root), image_size=8),
                               partition=Domains(), num_clients=4,
                               train_fraction=1.0,
                               caps=SampleCaps(train_samples=100, surplus_train="test"))
    with pytest.raises(ConfigError, match="no client of the office_caltech10 split has a local "
                                          "test sample"):
        data.setup()


def test_a_bad_surplus_train_value_is_one_line(tmp_path) -> None:
    with pytest.raises(ConfigError, match="surplus_train must be drop or test, got 'keep'"):
        FederatedDataModule(source=Digits(), caps=SampleCaps(surplus_train="keep"))


# ---------------------------------------------------------------------------- bad input


def _break_empty_class(root: Path) -> str:
    for path in (root / "train" / "class1").iterdir():
        path.unlink()
    return str(root / "train" / "class1")


def _break_image(root: Path) -> str:
    path = root / "train" / "class2" / "class2_1.png"
    path.write_bytes(b"not a png")
    return str(path)


def _break_layout(root: Path) -> str:
    (root / "train").rename(root / "training")
    return str(root / "train")


def _break_flat(root: Path) -> str:
    """Images straight in train/, without class folders."""
    for folder in list((root / "train").iterdir()):
        for image in folder.iterdir():
            image.rename(root / "train" / image.name)
        folder.rmdir()
    return str(root / "train")


def _break_leaf_counts(root: Path) -> str:
    path = next((root / "data" / "train").glob("*.json"))
    record = json.loads(path.read_text())
    record["num_samples"][0] += 1
    path.write_text(json.dumps(record))
    return str(path)


def _break_val_annotation(root: Path) -> str:
    path = root / "tiny-imagenet-200" / "val" / "val_annotations.txt"
    path.write_text(path.read_text().replace("\tn0", "\tx0", 1))
    return str(path)


@pytest.mark.parametrize(("source", "writer", "breaker", "expected"), [
    ("imagefolder", dataset_files.imagefolder, _break_empty_class, "holds no image files"),
    ("imagefolder", dataset_files.imagefolder, _break_image, "cannot read image"),
    ("imagefolder", dataset_files.imagefolder, _break_layout, "does not exist"),
    ("imagefolder", dataset_files.imagefolder, _break_flat, "has no class folders"),
    ("imagefolder", dataset_files.imagefolder, lambda root: str(root / "nowhere"), "not exist"),
    ("femnist", dataset_files.femnist, _break_leaf_counts, "num_samples"),
    ("tinyimagenet", dataset_files.tinyimagenet, _break_val_annotation, "line 1"),
])
def test_bad_input_is_one_line_naming_the_path_and_writes_nothing(
    tmp_path, cache, source, writer, breaker, expected
) -> None:
    root = writer(tmp_path / "data")
    bad_path = breaker(root)
    if bad_path.endswith("nowhere"):
        root = Path(bad_path)
    with pytest.raises((ValueError, FileNotFoundError)) as error:
        SOURCES[source](root=root).load()
    message = str(error.value)
    assert expected in message and bad_path in message and "expected" in message
    assert "\n" not in message
    assert not [p for p in cached_files(cache) if p.is_file()]


def test_differently_sized_images_need_image_size(tmp_path, cache) -> None:
    root = dataset_files.office_caltech10(tmp_path)
    with pytest.raises(ValueError, match=r"set image_size \(data.source.init_args.image_size\)"):
        OfficeCaltech10(root=root).load()
    assert not [p for p in cached_files(cache) if p.is_file()]


def test_a_folder_source_without_root_says_so() -> None:
    with pytest.raises(ValueError,
                       match=r"no root was given; set root \(data.source.init_args.root\)"):
        CINIC10().load()


# ---------------------------------------------------------------------------- real CIFAR-10


def channel_stats(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and std (in [0, 1] units) of uint8 (N, C, H, W) images, from byte
    histograms (exact, and fast on 150 million bytes)."""
    values = np.arange(256) / 255
    means, stds = [], []
    for channel in range(images.shape[1]):
        counts = np.bincount(images[:, channel].ravel(), minlength=256)
        mean = counts @ values / counts.sum()
        means.append(mean)
        stds.append(np.sqrt(counts @ (values - mean) ** 2 / counts.sum()))
    return np.array(means), np.array(stds)


@pytest.fixture(scope="session")
def real_cifar10(tmp_path_factory):
    """The 60,000 CIFAR-10 PNGs through imagefolder, decoded once for the session."""
    if not (CIFAR10_PNG / "train").is_dir():
        pytest.skip(f"no CIFAR-10 PNG folder at {CIFAR10_PNG}")
    folder = tmp_path_factory.mktemp("cifar10-cache")
    previous = os.environ.get("FEDLIGHT_CACHE")
    os.environ["FEDLIGHT_CACHE"] = str(folder)
    try:
        from fedlight.data.sources.images import class_folders, decode_images

        train_files, y_train, classes = class_folders(CIFAR10_PNG / "train", "t", "t")
        test_files, y_test, _ = class_folders(CIFAR10_PNG / "test", "t", "t")
        return {"train": decode_images("imagefolder-train", train_files, None, "t"),
                "test": decode_images("imagefolder-test", test_files, None, "t"),
                "y_train": y_train, "y_test": y_test, "classes": classes, "cache": folder}
    finally:
        if previous is None:
            os.environ.pop("FEDLIGHT_CACHE")
        else:
            os.environ["FEDLIGHT_CACHE"] = previous


def test_real_cifar10_matches_torchvision_cifar10(real_cifar10) -> None:
    train, test = real_cifar10["train"], real_cifar10["test"]
    assert train.shape == (50000, 3, 32, 32) and test.shape == (10000, 3, 32, 32)
    assert real_cifar10["classes"] == ["airplane", "automobile", "bird", "cat", "deer", "dog",
                                       "frog", "horse", "ship", "truck"]  # CIFAR-10's label order
    assert np.bincount(real_cifar10["y_train"]).tolist() == [5000] * 10
    assert np.bincount(real_cifar10["y_test"]).tolist() == [1000] * 10
    # CIFAR-10's well-known per-channel statistics of the train split (torchvision's arrays)
    mean, std = channel_stats(train)
    assert np.allclose(mean, [0.4914, 0.4822, 0.4465], atol=5e-4)
    assert np.allclose(std, [0.2470, 0.2435, 0.2616], atol=5e-4)
    assert np.allclose(channel_stats(test)[0], [0.4942, 0.4851, 0.4504], atol=5e-4)


def test_real_cifar10_source_loads_from_the_cache(real_cifar10, monkeypatch) -> None:
    from fedlight.data.sources import imagefolder

    monkeypatch.setenv("FEDLIGHT_CACHE", str(real_cifar10["cache"]))
    data = ImageFolder(root=CIFAR10_PNG).load()
    imagefolder._load.cache_clear()  # frees the 0.7 GB of tensors for the rest of the session
    assert data.input_shape == (3, 32, 32) and data.num_classes == 10
    assert len(data.y_train) == 50000 and len(data.y_test) == 10000
    assert torch.equal(data.y_train, torch.from_numpy(real_cifar10["y_train"]))
    mean, std = channel_stats(real_cifar10["train"])
    expected = (real_cifar10["train"][:500] / 255 - mean.reshape(1, 3, 1, 1)) / std.reshape(
        1, 3, 1, 1)
    assert np.allclose(data.x_train[:500].numpy(), expected, atol=1e-4)


def test_local_test_source_tests_each_domain_on_its_own_test_split(tmp_path) -> None:
    root = dataset_files.domainnet10(tmp_path)
    module = FederatedDataModule(source=DomainNet10(root=str(root), image_size=8),
                                 partition=Domains(),
                                 num_clients=6,
                                 local_test="source")
    module.setup()
    data = module.data
    n_train = len(data.y_train)
    for domain, split in enumerate(module.splits):
        assert np.array_equal(split.train, np.flatnonzero(data.domains_train == domain))
        assert np.array_equal(split.test - n_train, np.flatnonzero(data.domains_test == domain))
        x, y = module.client_test(domain)
        assert torch.equal(x, data.x_test[torch.from_numpy(split.test - n_train)])
    assert module.global_test()[0] is data.x_test
    assert module.partition_record()["test_split_merged"]


def test_local_test_source_keeps_leaf_writers_own_test_samples(tmp_path) -> None:
    root = dataset_files.femnist(tmp_path, writers=6)
    module = FederatedDataModule(source=FEMNIST(root=str(root)), partition=Natural(),
                                 num_clients=3,
                                 local_test="source", seed=1)
    module.setup()
    data = module.data
    for split in module.splits:
        writer = set(data.groups_train[split.train].tolist())
        assert len(writer) == 1
        test_writers = data.groups_test[split.test - len(data.y_train)]
        assert set(test_writers.tolist()) == writer
        assert len(split.test) == np.sum(data.groups_test == next(iter(writer)))


@pytest.mark.parametrize(("options", "match"), [
    ({"partition": IID(), "num_clients": 2}, "needs the Domains or Natural partition"),
    ({"partition": Domains(), "num_clients": 4, "merge_test": True}, "set merge_test: false"),
    ({"partition": Domains(), "num_clients": 4, "local_test": "own"}, "unknown local_test"),
])
def test_local_test_source_needs_a_client_per_domain(tmp_path, options, match) -> None:
    root = dataset_files.office_caltech10(tmp_path)
    options = {"local_test": "source", **options}
    with pytest.raises(ValueError, match=match):
        FederatedDataModule(source=OfficeCaltech10(root=str(root), image_size=8), **options).setup()
    with pytest.raises(ValueError, match="office_caltech10 has none, use local_test: split"):
        FederatedDataModule(source=OfficeCaltech10(root=str(root), image_size=8),
                            partition=Domains(), num_clients=4,
                            local_test="source").setup()


def test_download_fetches_the_official_archive_into_root(tmp_path, monkeypatch) -> None:
    """Offline: the download helper is replaced by one that unpacks the tiny files."""
    calls = []

    def fake_download(url, download_root, **kwargs):
        calls.append(url)
        dataset_files.tinyimagenet(Path(download_root), classes=2, per_class=2)

    monkeypatch.setattr("torchvision.datasets.utils.download_and_extract_archive", fake_download)
    data = TinyImageNet(root=tmp_path / "fresh", download=True).load()
    assert calls == ["http://cs231n.stanford.edu/tiny-imagenet-200.zip"]
    assert data.num_classes == 2 and len(data.y_train) == 4


def test_femnist_all_data_without_a_split(tmp_path) -> None:
    rng = np.random.default_rng(0)
    dataset_files.leaf_file(tmp_path / "all_data" / "all_data_0.json", ["a", "b"], [5, 7], rng)
    data = FEMNIST(root=tmp_path).load()
    assert data.x_test is None and data.group_names == ["a", "b"]
    assert np.bincount(data.groups_train).tolist() == [5, 7]


def test_an_interrupted_cache_write_leaves_no_file(tmp_path, cache, monkeypatch) -> None:
    root = dataset_files.imagefolder(tmp_path / "data")

    def interrupted(stream, **arrays):
        stream.write(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ImageFolder(root=root).load()
    assert not [p for p in cached_files(cache) if p.is_file()]
