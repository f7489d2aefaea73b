"""Sources: shapes, labels and normalization of the offline sources, and the torchvision
path read from tiny folders that the tests write in torchvision's own file formats."""

import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.datasets
import torchvision.datasets.cifar

from fedlight.data.sources import SOURCES, SourceData, as_source
from fedlight.data.sources.digits import Digits
from fedlight.data.sources.mnist5k import MNIST5k
from fedlight.data.sources.synthetic import Synthetic
from fedlight.data.sources.torchvision_datasets import CIFAR10


def assert_standardized(x: torch.Tensor) -> None:
    dims = [d for d in range(x.ndim) if d != 1]
    assert torch.allclose(x.mean(dim=dims), torch.zeros(x.shape[1]), atol=1e-4)
    assert torch.allclose(x.std(dim=dims), torch.ones(x.shape[1]), atol=1e-3)


def standardized(train: np.ndarray, test: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference normalization: [0, 1], then per channel with the train statistics."""
    a, b = torch.tensor(train / 255.0), torch.tensor(test / 255.0)
    std, mean = torch.std_mean(a, dim=(0, 2, 3), keepdim=True)
    return ((a - mean) / std).float(), ((b - mean) / std).float()


def test_registry() -> None:
    for name in ("mnist5k", "digits", "synthetic", "mnist", "fmnist", "cifar10", "cifar100",
                 "digits5", "pfllib"):
        assert name in SOURCES


def test_mnist5k() -> None:
    data = MNIST5k().load()
    assert data.x_train.shape == (5000, 1, 28, 28) and data.x_train.dtype == torch.float32
    assert data.y_train.dtype == torch.int64
    assert torch.bincount(data.y_train).tolist() == [500] * 10
    assert data.input_shape == (1, 28, 28) and data.num_classes == 10
    assert data.x_test is None and data.y_test is None and data.domains_train is None
    assert_standardized(data.x_train)


def test_loads_are_cached_and_frozen() -> None:
    data = MNIST5k().load()
    assert MNIST5k().load() is data
    with pytest.raises(dataclasses.FrozenInstanceError):
        data.num_classes = 3  # type: ignore[misc]


def test_digits() -> None:
    data = Digits().load()
    assert data.x_train.shape == (1797, 1, 8, 8) and data.input_shape == (1, 8, 8)
    assert data.num_classes == 10 and data.x_test is None
    assert sorted(torch.unique(data.y_train).tolist()) == list(range(10))
    assert_standardized(data.x_train)


@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 8, 8), (20,)])
def test_synthetic_shape_balance(shape: tuple[int, ...]) -> None:
    data = Synthetic(samples=303, shape=shape, classes=5).load()
    assert data.x_train.shape == (303, *shape) and data.num_classes == 5
    counts = torch.bincount(data.y_train, minlength=5)
    assert counts.max() - counts.min() <= 1
    assert data.x_test is None
    assert_standardized(data.x_train)


def test_synthetic_is_seeded() -> None:
    def load(seed: int) -> SourceData:
        return Synthetic(samples=200, shape=(16,)).load(seed)

    assert torch.equal(load(1).x_train, load(1).x_train)
    assert torch.equal(load(1).y_train, load(1).y_train)
    assert not torch.equal(load(1).x_train, load(2).x_train)


def test_synthetic_classes_are_learnable() -> None:
    """Nearest class mean on half the data classifies the other half well above chance."""
    data = Synthetic(samples=1000, shape=(1, 28, 28)).load()
    x, y = data.x_train.flatten(1), data.y_train
    means = torch.stack([x[:500][y[:500] == c].mean(0) for c in range(10)])
    accuracy = (torch.cdist(x[500:], means).argmin(1) == y[500:]).float().mean().item()
    assert 0.3 < accuracy < 1.0


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"classes": 1}, "classes=1"),
        ({"samples": 3, "classes": 4}, "samples=3"),
        ({"shape": (1, 0, 4)}, r"shape=\(1, 0, 4\)"),
    ],
)
def test_synthetic_rejects_bad_settings(options: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Synthetic(**options).load()


def test_a_mapping_names_a_source_by_class_name_or_path() -> None:
    short = as_source({"class_path": "Synthetic", "init_args": {"samples": 100}})
    assert isinstance(short, Synthetic) and short.options()["samples"] == 100
    assert as_source(short.record()).options() == short.options()
    with pytest.raises(ValueError, match=r"unknown data.source class 'MNST'; valid: AGNews, "):
        as_source({"class_path": "MNST"})


# ---------------------------------------------------------------------------- torchvision


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write a uint8 array in the IDX format of the MNIST files (big-endian header)."""
    header = bytes([0, 0, 0x08, array.ndim])
    header += b"".join(int(s).to_bytes(4, "big") for s in array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def write_mnist(root: Path, folder: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A tiny MNIST-format dataset in `root/folder/raw`: 20 train and 10 test images."""
    raw = root / folder / "raw"
    raw.mkdir(parents=True)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (20, 28, 28)),
        "train-labels-idx1-ubyte": np.arange(20) % 10,
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (10, 28, 28)),
        "t10k-labels-idx1-ubyte": np.arange(10)[::-1],
    }
    for name, array in arrays.items():
        write_idx(raw / name, array)
    return arrays


@pytest.mark.parametrize(("source", "folder"), [("mnist", "MNIST"), ("fmnist", "FashionMNIST")])
def test_mnist_format_folder(tmp_path: Path, source: str, folder: str) -> None:
    arrays = write_mnist(tmp_path, folder, np.random.default_rng(0))
    data = SOURCES[source](root=tmp_path).load()
    expected_train, expected_test = standardized(
        arrays["train-images-idx3-ubyte"][:, None], arrays["t10k-images-idx3-ubyte"][:, None]
    )
    assert data.x_train.shape == (20, 1, 28, 28) and data.x_test.shape == (10, 1, 28, 28)
    assert torch.allclose(data.x_train, expected_train, atol=1e-5)
    assert torch.allclose(data.x_test, expected_test, atol=1e-5)  # train statistics
    assert data.y_train.tolist() == arrays["train-labels-idx1-ubyte"].tolist()
    assert data.y_test.tolist() == arrays["t10k-labels-idx1-ubyte"].tolist()
    assert data.y_train.dtype == torch.int64 and data.num_classes == 10


def write_cifar(root: Path, dataset_cls: type, label_key: str, rng: np.random.Generator):
    """A tiny dataset in CIFAR's pickled batch format, at the file names torchvision reads
    (4 images per batch file). Returns the (N, 3, 32, 32) train and test images."""
    folder = root / dataset_cls.base_folder
    folder.mkdir()

    def write_batches(names: list[str]) -> np.ndarray:
        images = []
        for name in names:
            batch = rng.integers(0, 256, (4, 3, 32, 32), dtype=np.uint8)
            entry = {"data": batch.reshape(4, -1), label_key: [0, 1, 2, 3]}
            (folder / name).write_bytes(pickle.dumps(entry))
            images.append(batch)
        return np.concatenate(images)

    train = write_batches([name for name, _ in dataset_cls.train_list])
    test = write_batches([name for name, _ in dataset_cls.test_list])
    meta = {dataset_cls.meta["key"]: [f"class{i}" for i in range(4)]}
    (folder / dataset_cls.meta["filename"]).write_bytes(pickle.dumps(meta))
    return train, test


@pytest.mark.parametrize(
    ("source", "class_name", "label_key", "num_classes"),
    [("cifar10", "CIFAR10", "labels", 10), ("cifar100", "CIFAR100", "fine_labels", 100)],
)
def test_cifar_format_folder(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    source: str,
    class_name: str,
    label_key: str,
    num_classes: int,
) -> None:
    # Our files cannot match the real ones' MD5 sums: let torchvision check existence only.
    monkeypatch.setattr(
        torchvision.datasets.cifar, "check_integrity", lambda path, md5=None: Path(path).is_file()
    )
    dataset_cls = getattr(torchvision.datasets, class_name)
    train, test = write_cifar(tmp_path, dataset_cls, label_key, np.random.default_rng(0))
    data = SOURCES[source](root=str(tmp_path)).load()
    expected_train, expected_test = standardized(train, test)
    assert data.x_train.shape == (len(train), 3, 32, 32) and data.x_test.shape == (4, 3, 32, 32)
    assert data.x_train.is_contiguous()
    assert torch.allclose(data.x_train, expected_train, atol=1e-5)  # HWC -> CHW undone right
    assert torch.allclose(data.x_test, expected_test, atol=1e-5)
    assert data.y_train.tolist() == [0, 1, 2, 3] * (len(train) // 4)
    assert data.num_classes == num_classes


@pytest.mark.parametrize("source", ["mnist", "fmnist", "cifar10", "cifar100"])
def test_missing_folder_says_what_to_do(tmp_path: Path, source: str) -> None:
    with pytest.raises(FileNotFoundError, match=rf"'{source}' not found .*{tmp_path}.*download"):
        SOURCES[source](root=tmp_path).load()


def test_corrupted_files_say_what_to_do(tmp_path: Path) -> None:
    folder = tmp_path / torchvision.datasets.CIFAR10.base_folder
    folder.mkdir()
    (folder / "data_batch_1").write_bytes(b"not cifar")  # fails the real MD5 check
    with pytest.raises(FileNotFoundError, match=r"'cifar10' not found .*checks.*download"):
        CIFAR10(root=tmp_path).load()


def test_torchvision_source_needs_a_root() -> None:
    with pytest.raises(ValueError, match=r"'cifar10' .* no root was given; set root "
                                         r"\(data.source.init_args.root\)"):
        CIFAR10().load()
