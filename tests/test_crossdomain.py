"""The cross-domain sources: digits5 (offline Digits-Five stand-in) and digits5_torchvision."""

import dataclasses

import numpy as np
import pytest
import torch

from fedlight.data import FederatedDataModule
from fedlight.data.partitions.domains import Domains
from fedlight.data.sources import SOURCES
from fedlight.data.sources.crossdomain import (
    DIGITS5_DOMAINS,
    Digits5,
    Digits5Torchvision,
    make_digits5,
)
from fedlight.data.sources.rendered import (
    FONT_FILES,
    SVHN_LIKE,
    SYNTH_LIKE,
    glyph_bank,
    render_digits,
)


@pytest.fixture(scope="module")
def images():
    return make_digits5()


@pytest.fixture(scope="module")
def source():
    return Digits5().load()


def test_registered():
    assert "digits5" in SOURCES and "digits5_torchvision" in SOURCES


def test_shapes_classes_and_splits(source):
    assert source.input_shape == (3, 32, 32) and source.num_classes == 10
    assert source.x_train.shape == (5100, 3, 32, 32) and source.x_test.shape == (3400, 3, 32, 32)
    assert source.domain_names == list(DIGITS5_DOMAINS)
    for domain in range(5):
        train = source.y_train[torch.from_numpy(source.domains_train == domain)]
        test = source.y_test[torch.from_numpy(source.domains_test == domain)]
        assert torch.bincount(train, minlength=10).tolist() == [102] * 10
        assert torch.bincount(test, minlength=10).tolist() == [68] * 10
    dims = (0, 2, 3)
    assert torch.allclose(source.x_train.mean(dims), torch.zeros(3), atol=1e-4)
    assert torch.allclose(source.x_train.std(dims), torch.ones(3), atol=1e-3)


def test_images_are_in_unit_range_and_domains_differ(images):
    assert images.x.shape == (8500, 3, 32, 32) and images.x.dtype == torch.float32
    assert images.x.min() >= 0 and images.x.max() <= 1
    # per-domain statistics: mean brightness, contrast, colourfulness (channel spread)
    stats = []
    for domain in range(5):
        x = images.x[torch.from_numpy(images.domain == domain)]
        colour = (x - x.mean(1, keepdim=True)).abs().mean()
        stats.append(torch.stack([x.mean(), x.std(), colour]))
    stats = torch.stack(stats)
    for a in range(5):
        for b in range(a + 1, 5):
            gap = (stats[a] - stats[b]).abs().max().item()
            assert gap > 0.03, (DIGITS5_DOMAINS[a], DIGITS5_DOMAINS[b], gap)
    grey = [DIGITS5_DOMAINS.index(n) for n in ("mnist", "usps_like")]
    assert all(stats[d, 2] < 1e-6 for d in grey)  # grey replicated to three channels
    colour = [DIGITS5_DOMAINS.index(n) for n in ("mnist_m", "synth_like", "svhn_like")]
    assert all(stats[d, 2] > 0.05 for d in colour)


def test_mnist_domains_use_disjoint_digits(images):
    rows = []
    for name in ("mnist", "mnist_m"):
        index = images.mnist_index[images.domain == DIGITS5_DOMAINS.index(name)]
        assert len(index) == 1700 and index.min() >= 0
        rows.append(set(index.tolist()))
    assert len(rows[0] | rows[1]) == 3400
    for name in ("usps_like", "synth_like", "svhn_like"):
        assert (images.mnist_index[images.domain == DIGITS5_DOMAINS.index(name)] == -1).all()


def nearest_centroid_accuracy(x: torch.Tensor, y: np.ndarray, test: np.ndarray) -> float:
    flat, labels = x.reshape(len(x), -1), torch.from_numpy(y)
    train, held = torch.from_numpy(~test), torch.from_numpy(test)
    centroids = torch.stack([flat[train][labels[train] == c].mean(0) for c in range(10)])
    predicted = torch.cdist(flat[held], centroids).argmin(1)
    return (predicted == labels[held]).float().mean().item()


def test_rendered_digits_carry_their_labels():
    labels = np.repeat(np.arange(10), 40)
    test = np.tile(np.arange(40) >= 30, 10)
    for style in (SYNTH_LIKE, SVHN_LIKE):
        images, masks = render_digits(labels, style, np.random.default_rng(0))
        assert images.shape == (400, 3, 32, 32) and masks.shape == (400, 1, 32, 32)
        assert 0 <= images.min() and images.max() <= 1
        # the strokes of the labelled digit are recognisable: 10 classes, chance is 0.1
        assert nearest_centroid_accuracy(masks, labels, test) > 0.3, style
        # shuffled labels are not
        shuffled = np.random.default_rng(1).permutation(labels)
        assert nearest_centroid_accuracy(masks, shuffled, test) < 0.2
    # without neighbours, a 1 has less ink than an 8
    alone = dataclasses.replace(SYNTH_LIKE, neighbour_probability=0.0)
    ink = render_digits(labels, alone, np.random.default_rng(0))[1].sum((1, 2, 3))
    assert ink[labels == 1].mean() < 0.8 * ink[labels == 8].mean()
    assert glyph_bank().shape == (len(FONT_FILES), 10, 1, 48, 48)


def test_deterministic_and_seeded(images):
    again = make_digits5()
    assert torch.equal(again.x, images.x) and np.array_equal(again.test, images.test)
    other = make_digits5(seed=1, per_class=10)
    assert other.x.shape == (500, 3, 32, 32)
    same_seed_small = make_digits5(seed=0, per_class=10)
    assert not torch.equal(other.x, same_seed_small.x)
    assert Digits5().load() is Digits5().load(3)  # images ignore data.seed


def test_bad_sizes_are_named():
    with pytest.raises(ValueError, match="per_class=175 is invalid; use an integer in 1..174"):
        make_digits5(per_class=175)
    with pytest.raises(ValueError, match="test_fraction=1.0"):
        make_digits5(test_fraction=1.0)


def test_domains_partition_gives_one_domain_per_client_with_a_held_out_test(source):
    data = FederatedDataModule(source=Digits5(), partition=Domains(), num_clients=5,
                               merge_test=True, train_fraction=0.6)
    data.setup()
    domains = np.concatenate([source.domains_train, source.domains_test])
    for client, split in enumerate(data.splits):
        assert len(split.train) == 1020 and len(split.test) == 680
        assert set(domains[split.train]) == set(domains[split.test]) == {client}
        assert not set(split.train) & set(split.test)
    assert len(data.global_test()[1]) == 3400
    with pytest.raises(ValueError, match="5 domains"):
        FederatedDataModule(source=Digits5(), partition=Domains(), num_clients=4).setup()


# ------------------------------------------------------------------------- digits5_torchvision
class _Fake:
    """Stands in for a torchvision dataset class: random uint8 images of its real shape."""

    shapes = {"MNIST": (28, 28), "USPS": (16, 16), "SVHN": (3, 32, 32)}

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, root, train=True, split=None, download=False):
        train = train if split is None else split == "train"
        n = 1200 if train else 300
        rng = np.random.default_rng(len(self.name) + train)
        dataset = type("Dataset", (), {})()
        dataset.data = rng.integers(0, 256, (n, *self.shapes[self.name]), dtype=np.uint8)
        labels = rng.permutation(np.arange(n) % 10)
        if self.name == "SVHN":
            dataset.labels = labels
        else:
            dataset.targets = torch.as_tensor(labels)
        return dataset


def test_digits5_torchvision_reads_three_domains(monkeypatch, tmp_path):
    import torchvision.datasets

    for name in ("MNIST", "USPS", "SVHN"):
        monkeypatch.setattr(torchvision.datasets, name, _Fake(name))
    data = Digits5Torchvision(root=tmp_path).load()
    assert data.input_shape == (3, 32, 32) and data.num_classes == 10
    assert data.domain_names == ["mnist", "svhn", "usps"]
    assert np.bincount(data.domains_train).tolist() == [1000] * 3
    assert np.bincount(data.domains_test).tolist() == [250] * 3


def test_digits5_torchvision_errors_say_what_to_do(tmp_path):
    with pytest.raises(ValueError, match="no root"):
        Digits5Torchvision().load()
    with pytest.raises(FileNotFoundError, match="download: true"):
        Digits5Torchvision(root=tmp_path / "empty").load()
