"""The options every image source shares: a resize and one transformation per domain."""

from __future__ import annotations

from collections.abc import Sequence

from fedlight.core.errors import ConfigError
from fedlight.core.paths import ConfigPath
from fedlight.data.sources.base import Source, SourceData, resized
from fedlight.data.sources.domain_transforms import check_names, with_domain_transforms
from fedlight.data.sources.images import first_per_class_counts

__all__ = ["ClassFolderImageSource", "DownloadableImageSource", "FileImageSource", "ImageSource"]


class ImageSource(Source):
    """A source of images: :meth:`load` resizes them and splits them into transformed domains
    where asked to. Subclasses pass ``image_size`` and ``domain_transforms`` on; folder
    sources also read ``self.image_size`` to resize each file as it is decoded.

    Args:
        image_size: resize the images to this square side (MAP's 32 x 32 FaMnist); null keeps
            their size. Folder sources resize each file as it is decoded, the others resize
            their pixels (bilinear, antialiased, as torchvision's ``Resize``); inputs are then
            standardized again. Decoded images are cached in $FEDLIGHT_CACHE (default
            ~/.cache/fedlight; delete it to clear).
        domain_transforms: make the source cross-domain: its train and test samples are split
            into one class-balanced domain per name (seeded by data.seed) and domain k gets the
            k-th image transformation (identity, grey, invert, blur, rotate90, jitter; see
            fedlight.data.sources.domain_transforms), e.g. [identity, grey, invert, blur,
            rotate90, jitter] with the Domains partition; null = off.
    """

    def __init__(self, image_size: int | None = None,
                 domain_transforms: Sequence[str] | None = None) -> None:
        if image_size is not None and (int(image_size) != image_size or image_size < 1):
            raise ConfigError(f"image_size={image_size!r} is invalid; use a positive integer "
                              "or null")
        if domain_transforms is not None:
            check_names(domain_transforms)
        self.image_size = image_size
        self.domain_transforms = None if domain_transforms is None else list(domain_transforms)

    def load(self, seed: int = 0) -> SourceData:
        """The images, resized to ``image_size`` and split into ``domain_transforms``' domains
        where those are set (see :meth:`Source.load`)."""
        data = super().load(seed)
        if self.image_size is not None:
            data = resized(data, int(self.image_size), self.name)
        if self.domain_transforms is not None:
            data = with_domain_transforms(data, self.domain_transforms, int(seed), self.name)
        return data


class FileImageSource(ImageSource):
    """An image source read from its publisher's files at ``root`` (each source's description
    says what root holds), with the options every image source has.

    Args:
        root: the source's folder or file. In a config file a relative path is relative to
            the file's folder.
        image_size: resize the images to this square side; null keeps their size.
        domain_transforms: one image transformation per domain, the source made cross-domain
            (identity, grey, invert, blur, rotate90, jitter; see ImageSource); null = off.
    """

    def __init__(self, root: ConfigPath | str | None = None, image_size: int | None = None,
                 domain_transforms: Sequence[str] | None = None) -> None:
        super().__init__(image_size, domain_transforms)
        self.root = root


class DownloadableImageSource(FileImageSource):
    """A file image source that can download its publisher's files into ``root``.

    Args:
        root: the folder of the source's files. In a config file a relative path is relative
            to the file's folder.
        download: download (and unpack) the files into root when they are missing.
        image_size: resize the images to this square side; null keeps their size.
        domain_transforms: one image transformation per domain, the source made cross-domain
            (identity, grey, invert, blur, rotate90, jitter; see ImageSource); null = off.
    """

    def __init__(self, root: ConfigPath | str | None = None, download: bool = False,
                 image_size: int | None = None,
                 domain_transforms: Sequence[str] | None = None) -> None:
        super().__init__(root, image_size, domain_transforms)
        self.download = download


class ClassFolderImageSource(FileImageSource):
    """A file image source of one folder per class, of which the first files of each class
    can be kept (a subset read without decoding the rest).

    Args:
        root: the dataset's folder. In a config file a relative path is relative to the
            file's folder.
        first_per_class: keep only the first N training and first M test files of each
            class in file-name order, [N, M] (one int: the same N for both), e.g. [500, 100]
            for a 5,000 / 1,000 image CIFAR-10 subset of its PNG folder; null = all.
        image_size: resize the images to this square side; null keeps their size.
        domain_transforms: one image transformation per domain, the source made cross-domain
            (identity, grey, invert, blur, rotate90, jitter; see ImageSource); null = off.
    """

    def __init__(self, root: ConfigPath | str | None = None,
                 first_per_class: int | Sequence[int] | None = None,
                 image_size: int | None = None,
                 domain_transforms: Sequence[str] | None = None) -> None:
        super().__init__(root, image_size, domain_transforms)
        first_per_class_counts(first_per_class)  # a bad value fails when the config is read
        self.first_per_class = (None if first_per_class is None else
                                first_per_class if isinstance(first_per_class, int)
                                else list(first_per_class))

    @property
    def first_counts(self) -> tuple[int, int] | None:
        """``first_per_class`` as (train, test) counts; None = every file."""
        return first_per_class_counts(self.first_per_class)
