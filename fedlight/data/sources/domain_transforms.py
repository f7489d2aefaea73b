"""One image transformation per domain: any image source made cross-domain.

``domain_transforms: [identity, grey, invert, blur, rotate90, jitter]`` (an option of every
image source, ``data.source.init_args``) splits the source's train samples, and its test
samples, into as many disjoint domains as names are given, and applies the ``k``-th
transformation to domain ``k``, in the spirit of CIFAR-10-C. With the ``Domains`` partition
each client then holds one domain (``num_clients`` a multiple of the number of names), and
``local_test: source`` tests each
client on its own domain's transformed test samples.

The split is class-balanced and seeded by ``data.seed``: per class, the samples are shuffled
and dealt to the domains in turn (continuing from class to class), so every domain holds
``n_c / K`` samples of class ``c`` give or take one, and domain sizes differ by at most one.
The transformations act on the images in ``[0, 1]`` (the source's standardization is undone
first), through ``torchvision.transforms.v2.functional``, and the result is standardized again
per channel with the pooled train statistics of all domains (each domain keeps its own mean
and contrast, as in the other cross-domain sources):

============  ===========================================================================
``identity``  the images as they are
``grey``      luminance (``rgb_to_grayscale``), repeated on every channel
``invert``    ``1 - x``
``blur``      Gaussian blur, 5 x 5 kernel, sigma 1 pixel
``rotate90``  rotated 90 degrees counter-clockwise (non-square images keep their size: the
              corners that fall outside are cut and the rest filled with 0)
``jitter``    colour jitter: brightness, contrast and saturation factors in [0.6, 1.4] and a
              hue shift in [-0.1, 0.1] (the ranges of ``ColorJitter(0.4, 0.4, 0.4, 0.1)``);
              one of ``JITTER_SETTINGS`` settings drawn with the fixed ``JITTER_SEED``, picked
              per sample by its index, so a sample is jittered the same way in every run
============  ===========================================================================

Every transformation is deterministic. A name may repeat (two domains left as they are, say).

Why an option of every image source (``ImageSource``) rather than a source wrapping another:
it composes with every image source and its own options (``root``, ``image_size``,
``download``) unchanged. It needs images whose pixels were in ``[0, 1]``
(``SourceData.pixel_standardization``); other inputs (synthetic features, token ids, sensor
signals) and sources that already have domains are refused with a one-line error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor
from torchvision.transforms.v2 import functional as F

from fedlight.core.errors import ConfigError
from fedlight.data.sources.base import SourceData, from_arrays

__all__ = ["JITTER_SEED", "JITTER_SETTINGS", "TRANSFORMS", "check_names", "split_domains",
           "with_domain_transforms"]

JITTER_SEED = 0
JITTER_SETTINGS = 16  # jitter settings shared out among the samples (one batched call each)
_SPLIT_STREAM = 0x444F4D  # tags the domain split's random stream apart from the partition's


def _jitter_settings() -> np.ndarray:
    """``(JITTER_SETTINGS, 4)`` brightness, contrast, saturation factors and hue shifts."""
    rng = np.random.default_rng(JITTER_SEED)
    factors = rng.uniform(0.6, 1.4, size=(JITTER_SETTINGS, 3))
    return np.column_stack([factors, rng.uniform(-0.1, 0.1, size=JITTER_SETTINGS)])


def _jitter(images: Tensor, index: np.ndarray) -> Tensor:
    out = torch.empty_like(images)
    setting_of = index % JITTER_SETTINGS
    for setting, (brightness, contrast, saturation, hue) in enumerate(_jitter_settings()):
        rows = torch.from_numpy(np.flatnonzero(setting_of == setting))
        if len(rows):
            x = F.adjust_brightness(images[rows], float(brightness))
            x = F.adjust_contrast(x, float(contrast))
            x = F.adjust_saturation(x, float(saturation))
            out[rows] = F.adjust_hue(x, float(hue))
    return out


#: name -> transformation of a batch of ``(N, C, H, W)`` images in [0, 1], given the samples'
#: indices in their split (only ``jitter`` reads them)
TRANSFORMS: dict[str, Callable[[Tensor, np.ndarray], Tensor]] = {
    "identity": lambda x, index: x,
    "grey": lambda x, index: F.rgb_to_grayscale(x, num_output_channels=x.shape[1]),
    "invert": lambda x, index: F.invert(x),
    "blur": lambda x, index: F.gaussian_blur(x, kernel_size=[5, 5], sigma=[1.0, 1.0]),
    "rotate90": lambda x, index: F.rotate(x, 90.0),
    "jitter": _jitter,
}


def check_names(names: Sequence[str]) -> None:
    """A one-line ValueError for an empty list or a name not in `TRANSFORMS`."""
    if isinstance(names, str) or not names:
        raise ConfigError(f"domain_transforms={names!r} is invalid; give a list of "
                         f"transformation names, one per domain, from: {', '.join(TRANSFORMS)}")
    unknown = [name for name in names if name not in TRANSFORMS]
    if unknown:
        raise ConfigError(f"unknown domain transformation {unknown[0]!r} in "
                         f"domain_transforms; valid: {', '.join(TRANSFORMS)}")


def split_domains(labels: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """A domain id in ``0..count-1`` per sample: per class, shuffled and dealt in turn."""
    order = np.concatenate([rng.permutation(np.flatnonzero(labels == c))
                            for c in np.unique(labels)])
    domains = np.empty(len(labels), dtype=np.int64)
    domains[order] = np.arange(len(labels)) % count
    return domains


def _transformed(x: Tensor, standardization: tuple[Tensor, Tensor], domains: np.ndarray,
                 names: Sequence[str]) -> Tensor:
    """The pixels behind standardized `x`, domain ``k`` transformed by ``names[k]``."""
    mean, std = standardization
    pixels = (x * std + mean).clamp_(0.0, 1.0)  # undo the source's standardization
    for domain, name in enumerate(names):
        index = np.flatnonzero(domains == domain)
        rows = torch.from_numpy(index)
        pixels[rows] = TRANSFORMS[name](pixels[rows], index)
    return pixels


def with_domain_transforms(data: SourceData, names: Sequence[str], seed: int,
                           source: str) -> SourceData:
    """`data` split into ``len(names)`` domains, domain ``k`` transformed by ``names[k]``.

    Args:
        data: the loaded source (its tensors are not modified).
        names: one transformation name per domain (keys of `TRANSFORMS`).
        seed: seed of the class-balanced domain split (``data.seed``).
        source: the source's name, for error messages.

    Returns:
        A new `SourceData`, standardized again with its pooled train statistics, with
        ``domains_train`` / ``domains_test`` and ``domain_names`` (the transformation names).

    Raises:
        ValueError: a bad name, a source whose inputs are not images in [0, 1], or a source
            that already has domains or its own client split.
    """
    check_names(names)
    if data.pixel_standardization is None or data.x_train.ndim != 4:
        raise ConfigError(f"domain_transforms needs an image source (pixels in [0, 1], "
                         f"e.g. imagefolder, cifar10, mnist5k); {source!r} gives inputs of "
                         f"shape {tuple(data.input_shape)} that are not such images")
    if data.domains_train is not None or data.client_splits is not None:
        raise ConfigError(f"domain_transforms splits a single-domain source into domains, "
                         f"but {source!r} comes split into "
                         f"{'domains' if data.domains_train is not None else 'clients'} already")
    rng = np.random.default_rng([seed, _SPLIT_STREAM])
    domains_train = split_domains(data.y_train.numpy(), len(names), rng)
    x_train = _transformed(data.x_train, data.pixel_standardization, domains_train, names)
    domains_test = x_test = None
    if data.x_test is not None:
        domains_test = split_domains(data.y_test.numpy(), len(names), rng)
        x_test = _transformed(data.x_test, data.pixel_standardization, domains_test, names)
    standardized = from_arrays(x_train, data.y_train, data.num_classes, x_test, data.y_test)
    return dataclasses.replace(
        data, x_train=standardized.x_train, x_test=standardized.x_test,
        pixel_standardization=standardized.pixel_standardization,
        domains_train=domains_train, domains_test=domains_test, domain_names=list(names),
    )
