"""data.domain_transforms: one image transformation per class-balanced domain."""

from __future__ import annotations

import dataclasses

import dataset_files
import numpy as np
import pytest
import torch

from fedlight.cli import main
from fedlight.clients import FedBN, FedPick
from fedlight.data import FederatedDataModule, SampleCaps
from fedlight.data.partitions.domains import Domains
from fedlight.data.sources.domain_transforms import TRANSFORMS, with_domain_transforms
from fedlight.data.sources.imagefolder import ImageFolder
from fedlight.data.sources.synthetic import Synthetic
from tests.conftest import tiny_trainer

NAMES = ["identity", "grey", "invert", "blur", "rotate90", "jitter"]
CLASSES, PER_CLASS = 4, 12


@pytest.fixture
def root(tmp_path, monkeypatch):
    """An imagefolder of 16 x 16 colour PNGs: 48 train and 24 test images of 4 classes."""
    monkeypatch.setenv("FEDLIGHT_CACHE", str(tmp_path / "cache"))
    rng = np.random.default_rng(3)
    names = [f"class{c}" for c in range(CLASSES)]
    dataset_files.class_tree(tmp_path / "data" / "train", names, PER_CLASS, rng, size=16)
    dataset_files.class_tree(tmp_path / "data" / "test", names, PER_CLASS // 2, rng, size=16)
    return tmp_path / "data"


def module(root, **kwargs) -> FederatedDataModule:
    options = dict(source=ImageFolder(root=str(root), domain_transforms=NAMES),
                   partition=Domains(), num_clients=6, local_test="source")
    return FederatedDataModule(**{**options, **kwargs})


def pixels(x: torch.Tensor, standardization) -> torch.Tensor:
    mean, std = standardization
    return x * std + mean


def test_each_transformation_does_what_it_says_on_the_pixels_of_its_domain(root):
    plain = ImageFolder(root=root).load()
    data = module(root).data
    for split in ("train", "test"):
        before = pixels(getattr(plain, f"x_{split}"), plain.pixel_standardization)
        after = pixels(getattr(data, f"x_{split}"), data.pixel_standardization)
        domains = getattr(data, f"domains_{split}")
        part = {name: torch.from_numpy(domains == k) for k, name in enumerate(NAMES)}
        original = {name: before[rows] for name, rows in part.items()}
        out = {name: after[rows] for name, rows in part.items()}
        close = dict(atol=1e-5, rtol=0)
        torch.testing.assert_close(out["identity"], original["identity"], **close)
        grey = out["grey"]
        torch.testing.assert_close(grey[:, 0], grey[:, 1], **close)
        torch.testing.assert_close(grey[:, 1], grey[:, 2], **close)
        luminance = (torch.tensor([0.2989, 0.587, 0.114]).view(1, 3, 1, 1)
                     * original["grey"]).sum(1)
        torch.testing.assert_close(grey[:, 0], luminance, atol=1e-3, rtol=0)
        torch.testing.assert_close(out["invert"], 1 - original["invert"], **close)
        torch.testing.assert_close(out["rotate90"], torch.rot90(original["rotate90"], 1, (2, 3)),
                                   **close)

        def roughness(x: torch.Tensor) -> float:
            return float((x[..., 1:, :] - x[..., :-1, :]).abs().mean())

        assert roughness(out["blur"]) < 0.6 * roughness(original["blur"])
        torch.testing.assert_close(out["blur"].mean(), original["blur"].mean(), atol=0.02, rtol=0)
        jittered, source = out["jitter"], original["jitter"]
        assert 0 <= float(jittered.min()) and float(jittered.max()) <= 1
        assert (jittered - source).abs().mean() > 0.01
        brightness = jittered.mean((1, 2, 3)) / source.mean((1, 2, 3))
        assert float(brightness.std()) > 0.02  # the samples get different jitter settings


def test_domains_are_disjoint_class_balanced_and_the_same_in_every_run(root):
    data = module(root).data
    assert data.domain_names == NAMES
    for split in ("train", "test"):
        domains, labels = getattr(data, f"domains_{split}"), getattr(data, f"y_{split}").numpy()
        assert len(domains) == len(labels)  # one domain per sample: disjoint, covering
        counts = np.array([[np.sum((domains == k) & (labels == c)) for c in range(CLASSES)]
                           for k in range(len(NAMES))])
        assert (counts.max(0) - counts.min(0) <= 1).all()
        sizes = counts.sum(1)
        assert sizes.max() - sizes.min() <= 1 and sizes.sum() == len(labels)
    again = module(root).data
    assert torch.equal(again.x_train, data.x_train) and torch.equal(again.x_test, data.x_test)
    assert np.array_equal(again.domains_test, data.domains_test)
    other = module(root, seed=1).data
    assert not np.array_equal(other.domains_train, data.domains_train)


def test_partition_domains_gives_each_client_one_transformed_domain(root):
    dm = module(root, caps=SampleCaps(train_samples=5))
    dm.setup()
    for k, split in enumerate(dm.splits):
        assert len(split.train) == 5
        assert set(dm.data.domains_train[split.train]) == {k}
        assert set(dm.data.domains_test[split.test - len(dm.data.y_train)]) == {k}


def test_bad_transformation_names_are_one_line_errors():
    for bad in (["identity", "gray"], [], "grey"):
        with pytest.raises(ValueError, match="valid|from: identity, grey") as info:
            ImageFolder(domain_transforms=bad)
        assert "\n" not in str(info.value) and ", ".join(TRANSFORMS) in str(info.value)


def test_bad_name_on_the_command_line_stops_before_writing(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--model", "FedAvg", "--data.source", "MNIST5k",
              "--data.source.domain_transforms", "[grey, blurr]", "--trainer.default_root_dir",
              str(tmp_path)])
    assert exit_info.value.code == 2
    assert "unknown domain transformation 'blurr'" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("shape", [(3, 16, 16), (20,)])
def test_inputs_that_are_not_images_in_unit_range_are_refused(shape):
    data = Synthetic(samples=60, shape=shape).load()
    with pytest.raises(ValueError, match="needs an image source"):
        with_domain_transforms(data, ["identity", "invert"], 0, "synthetic")


def test_a_source_with_domains_already_is_refused(root):
    plain = ImageFolder(root=root).load()
    with_domains = dataclasses.replace(plain, domains_train=np.zeros(len(plain.y_train), int))
    with pytest.raises(ValueError, match="split into domains already"):
        with_domain_transforms(with_domains, ["identity"], 0, "imagefolder")


@pytest.mark.parametrize("method", [FedPick, FedBN])
def test_fedpick_and_fedbn_run_a_round_on_transformed_domains(root, tmp_path, method):
    dm = module(root)
    dm.setup()
    torch.manual_seed(0)
    client = method(backbone="cnn_bn", num_classes=dm.num_classes, input_shape=dm.input_shape)
    trainer = tiny_trainer(tmp_path / "runs", rounds=1, run_name=method.__name__)
    trainer.fit(client, dm)
    scores = trainer.last_client_scores
    assert len(scores) == len(NAMES)
