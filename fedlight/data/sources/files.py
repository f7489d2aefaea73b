"""What the sources read from disk share: the root folder check, downloads, and errors that
name the file and line at fault.

A source that reads a dataset in its publisher's format raises :class:`DataFormatError`
(a ``ValueError``) with one line ``<file>:<line>: <what is wrong>; <what is valid>`` before
it builds anything, so a bad file never produces a half-loaded dataset.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from fedlight.core.errors import ConfigError, DownloadError, MissingFileError


class DataFormatError(ConfigError):
    """A data file that does not follow its publisher's format (the message names the file,
    the line or record, and what was expected)."""

    def __init__(self, path: str | Path, where: int | str | None, problem: str) -> None:
        location = str(path) if where is None else (
            f"{path}:{where}" if isinstance(where, int) else f"{path} ({where})")
        super().__init__(f"{location}: {problem}")


def require_root(name: str, root: str | os.PathLike[str] | None, layout: str) -> Path:
    """``root`` as an absolute path (``~`` expanded); a one-line error saying how to lay the
    data out when it is None."""
    if root is None:
        raise ConfigError(f"data source {name!r} is read from a folder but no root was given; "
                         f"set root (data.source.init_args.root) to a folder holding {layout}")
    return Path(root).expanduser().resolve()


def missing_files(name: str, folder: Path, files: Sequence[str], how: str) -> FileNotFoundError:
    """The error for data files that are not there: what was looked for and how to get it."""
    absent = [f for f in files if not (folder / f).exists()]
    return MissingFileError(f"data source {name!r}: {', '.join(absent)} not found in "
                             f"{str(folder)!r}; {how}")


def download_files(name: str, urls: dict[str, str], folder: Path) -> None:
    """Fetch each ``file name -> URL`` missing from ``folder`` (torchvision's downloader);
    a failure is one line naming the URL and what to do without network access."""
    from torchvision.datasets.utils import download_url

    folder.mkdir(parents=True, exist_ok=True)
    for file_name, url in urls.items():
        if (folder / file_name).exists():
            continue
        try:
            download_url(url, str(folder), file_name)
        except (OSError, RuntimeError) as err:
            (folder / file_name).unlink(missing_ok=True)
            raise DownloadError(f"could not download data source {name!r} from {url} into "
                                f"{str(folder)!r} ({err}); without network access, put "
                                f"{file_name} there yourself") from err


__all__ = ["DataFormatError", "download_files", "missing_files", "require_root"]
