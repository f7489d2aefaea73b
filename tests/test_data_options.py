"""Data options that reshape a source: resizing any image source (``image_size``), the first
files of each class of a folder source (``first_per_class``), and decode caches written only
when the whole source loaded."""

from __future__ import annotations

import json
from pathlib import Path

import dataset_files
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedlight.cli import main
from fedlight.core.errors import ConfigError
from fedlight.data import FederatedDataModule
from fedlight.data.partitions.iid import IID
from fedlight.data.sources.base import resized
from fedlight.data.sources.cinic10 import CINIC10
from fedlight.data.sources.imagefolder import ImageFolder
from fedlight.data.sources.mnist5k import MNIST5k
from fedlight.data.sources.pfllib import PFLlib
from fedlight.data.sources.synthetic import Synthetic
from fedlight.data.sources.torchvision_datasets import FashionMNIST
from tests.conftest import cached_files
from tests.test_pfllib import write_pfllib_folder
from tests.test_sources import write_mnist

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


#: every test decodes into its own cache folder
pytestmark = pytest.mark.usefixtures("cache")



# ---------------------------------------------------------------------------- image_size


def pixels_of(data) -> tuple[torch.Tensor, torch.Tensor]:
    mean, std = data.pixel_standardization
    return data.x_train * std + mean, data.x_test * std + mean


def test_a_torchvision_source_is_resized_in_pixel_space_and_standardized_again(tmp_path):
    arrays = write_mnist(tmp_path, "FashionMNIST", np.random.default_rng(0))
    native = FashionMNIST(root=tmp_path).load()
    resized = FashionMNIST(root=tmp_path, image_size=32).load()
    assert resized.x_train.shape == (20, 1, 32, 32) and resized.x_test.shape == (10, 1, 32, 32)
    train, test = pixels_of(resized)
    files = torch.from_numpy(arrays["train-images-idx3-ubyte"]).float().div(255)[:, None]
    expected = F.interpolate(files, size=(32, 32), mode="bilinear", antialias=True,
                             align_corners=False)
    torch.testing.assert_close(train, expected, atol=1e-5, rtol=0)
    assert torch.allclose(resized.x_train.mean(), torch.zeros(()), atol=1e-5)
    assert torch.allclose(resized.x_train.std(), torch.ones(()), atol=1e-3)
    assert torch.equal(resized.y_train, native.y_train) and test.shape[-1] == 32
    assert FashionMNIST(root=tmp_path, image_size=32).load() is resized  # shared, as loads
    assert FashionMNIST(root=tmp_path, image_size=28).load() is native  # already that size


def test_an_embedded_source_is_resized_through_the_data_module():
    data = FederatedDataModule(source=MNIST5k(image_size=32), partition=IID(), num_clients=4)
    data.setup()
    assert data.input_shape == (1, 32, 32) and data.client_train(0)[0].shape[1:] == (1, 32, 32)


def test_a_pfllib_folder_is_resized_as_it_is_with_its_own_clients(tmp_path):
    written = write_pfllib_folder(tmp_path / "pfllib")  # normalized by PFLlib: not re-normalized
    native = PFLlib(root=tmp_path / "pfllib").load()
    resized = PFLlib(root=tmp_path / "pfllib", image_size=16).load()
    expected = F.interpolate(native.x_train, size=(16, 16), mode="bilinear", antialias=True,
                             align_corners=False)
    assert torch.equal(resized.x_train, expected)
    for (train, test), (train0, test0) in zip(resized.client_splits, native.client_splits,
                                              strict=True):
        assert np.array_equal(train, train0) and np.array_equal(test, test0)
    assert resized.x_train.shape == (sum(len(c[s][1]) for c in written for s in c), 1, 16, 16)


def test_image_size_on_a_source_without_images_is_a_one_line_error():
    with pytest.raises(ConfigError, match=r"image_size applies to image sources; synthetic"):
        resized(Synthetic(shape=(20,)).load(), 32, "synthetic")


def test_a_paper_famnist_config_runs_at_32_pixels(tmp_path):
    write_mnist(tmp_path / "data", "FashionMNIST", np.random.default_rng(1))
    main(["fit", "-c", str(CONFIGS / "map/paper/famnist_lenet.yaml"),
          "--data.source.root", str(tmp_path / "data"), "--data.source.download", "false",
          "--data.num_clients", "2", "--data.partition.min_client_size", "2",
          "--trainer.rounds", "1",
          "--trainer.local_epochs", "1", "--trainer.join_ratio", "1.0",
          "--trainer.progress_bar", "false", "--trainer.logger", "csv",
          "--trainer.accelerator", "cpu", "--trainer.default_root_dir", str(tmp_path / "runs")])
    run = next((tmp_path / "runs").glob("*/"))
    config = json.loads((run / "summary.json").read_text())
    assert config["rounds"] == 1
    assert "image_size: 32" in (run / "config.yaml").read_text()


# ---------------------------------------------------------------------------- first_per_class


def write_named_classes(root: Path) -> dict[str, list[int]]:
    """Two classes per split whose files are written out of name order; each file is one
    flat brightness, so a decoded image names its file. Returns the brightnesses of each
    class folder's files in file-name order."""
    order = {"train": ["c.png", "a.png", "d.png", "b.png"], "test": ["y.png", "x.png", "z.png"]}
    expected = {}
    for split, names in order.items():
        for label, name in enumerate(("cat", "dog")):
            values = {}
            for i, file in enumerate(names):
                value = 10 * (i + 1) + 100 * label
                dataset_files.write_image(root / split / name / file,
                                          np.full((4, 4, 3), value, np.uint8))
                values[file] = value
            expected[f"{split}/{name}"] = [values[f] for f in sorted(values)]
    return expected


def brightness(data, part: str) -> list[int]:
    pixels = getattr(data, f"x_{part}") * data.pixel_standardization[1] \
        + data.pixel_standardization[0]
    return [round(float(v) * 255) for v in pixels[:, 0, 0, 0]]


def test_first_per_class_keeps_the_first_files_of_each_class_in_name_order(tmp_path):
    expected = write_named_classes(tmp_path)
    data = ImageFolder(root=tmp_path, first_per_class=[2, 1]).load()
    assert data.y_train.tolist() == [0, 0, 1, 1] and data.y_test.tolist() == [0, 1]
    assert brightness(data, "train") == expected["train/cat"][:2] + expected["train/dog"][:2]
    assert brightness(data, "test") == expected["test/cat"][:1] + expected["test/dog"][:1]
    both = ImageFolder(root=tmp_path, first_per_class=3).load()
    assert len(both.y_train) == 6 and len(both.y_test) == 6
    everything = ImageFolder(root=tmp_path).load()
    assert len(everything.y_train) == 8 and len(everything.y_test) == 6


def test_first_per_class_gets_its_own_cache_entries(tmp_path, cache):
    write_named_classes(tmp_path)
    ImageFolder(root=tmp_path, first_per_class=[2, 1]).load()
    assert len(cached_files(cache)) == 2
    ImageFolder(root=tmp_path, first_per_class=[3, 1]).load()  # the same test files
    assert len(cached_files(cache)) == 3
    ImageFolder(root=tmp_path).load()
    assert len(cached_files(cache)) == 5
    from fedlight.data.sources import imagefolder

    imagefolder._load.cache_clear()  # read back from the cache: still the first files only
    again = ImageFolder(root=tmp_path, first_per_class=[2, 1]).load()
    assert len(again.y_train) == 4 and len(cached_files(cache)) == 5


def test_first_per_class_reaches_the_folder_source_from_the_data_module(tmp_path):
    root = dataset_files.cinic10(tmp_path / "data", per_class=3)
    data = FederatedDataModule(source=CINIC10(root=str(root), first_per_class=[2, 1]),
                               partition=IID(), num_clients=2)
    data.setup()
    assert len(data.data.y_train) == 20 and len(data.data.y_test) == 10
    assert data.hparams["source"]["init_args"]["first_per_class"] == [2, 1]


@pytest.mark.parametrize(("value", "match"), [
    ([5, 0], r"first_per_class=\[5, 0\] is invalid"),
    ([1, 2, 3], r"first_per_class=\[1, 2, 3\] is invalid"),
])
def test_bad_first_per_class_is_a_one_line_error(tmp_path, value, match):
    with pytest.raises(ConfigError, match=match):
        ImageFolder(root=tmp_path, first_per_class=value)


# ---------------------------------------------------------------------------- caches


def test_a_truncated_test_image_leaves_no_cache_of_the_train_split(tmp_path, cache):
    root = dataset_files.imagefolder(tmp_path / "data")
    bad = root / "test" / "class1" / "class1_0.png"
    content = bad.read_bytes()
    bad.write_bytes(content[: len(content) // 2])
    with pytest.raises(ValueError, match=f"cannot read image {bad}") as error:
        ImageFolder(root=root).load()
    assert "\n" not in str(error.value)
    assert cached_files(cache) == []
    bad.write_bytes(content)  # repaired: both splits load and are cached
    ImageFolder(root=root).load()
    assert len(cached_files(cache)) == 2
