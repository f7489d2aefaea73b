"""``packed``: a dataset packed into one file of uint8 images (``benchmarks/pack_data.py``
writes them), for machines that receive the project but not the image folders.

``root`` is the file, e.g. ``gpu_data/cifar10_500_100.pt``: a ``torch.save`` dictionary
(compressed with xz when the name ends in ``.xz``) holding

- ``x_train`` uint8 ``(N, C, H, W)`` and ``y_train`` int64 ``(N,)``; optionally ``x_test``
  and ``y_test``, the source's own test split;
- ``classes``: the class names, label ``i`` being the ``i``-th;
- optionally ``domains_train`` / ``domains_test`` (int64 domain id per image) and
  ``domain_names``, for the ``Domains`` partition;
- ``packed_from``: what was packed and how (a description, not read).

The images are standardized as every image source's are (the train split's per-channel mean
and std), so a packed subset of a folder gives the same tensors as the folder source with the
same selection (``first_per_class``, ``image_size``).
"""

from __future__ import annotations

import dataclasses
import functools
import io
import lzma
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedlight.core.errors import ConfigError, DamagedFileError, MissingFileError
from fedlight.core.files import atomic_write
from fedlight.data.sources.base import SourceData
from fedlight.data.sources.image_source import FileImageSource
from fedlight.data.sources.images import to_source

__all__ = ["FORMAT", "read_packed", "write_packed"]

#: The ``format`` entry of a packed file; bump when the layout changes.
FORMAT = "fedlight-packed-1"
_REQUIRED = ("x_train", "y_train", "classes")


def write_packed(path: str | Path, record: dict[str, Any]) -> Path:
    """Write ``record`` (the entries listed in the module docstring) to ``path``, xz-compressed
    when it ends in ``.xz``; through a temporary file, so an interrupted write leaves none."""
    path = Path(path)
    missing = [key for key in _REQUIRED if key not in record]
    if missing:
        raise ValueError(f"a packed dataset needs {', '.join(missing)}")
    buffer = io.BytesIO()
    torch.save({"format": FORMAT, **record}, buffer)
    content = buffer.getvalue()
    if path.suffix == ".xz":
        content = lzma.compress(content, preset=6)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda stream: stream.write(content))
    return path


def read_packed(path: str | Path) -> dict[str, Any]:
    """The dictionary of a packed file; one-line errors for a missing or foreign file."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"data source 'packed': file {path} does not exist; write it "
                               "with python benchmarks/pack_data.py")
    content = path.read_bytes()
    try:
        if path.suffix == ".xz":
            content = lzma.decompress(content)
        record = torch.load(io.BytesIO(content), weights_only=True)
    except (lzma.LZMAError, RuntimeError, OSError, EOFError) as err:
        raise DamagedFileError(f"data source 'packed': {path} is not a packed dataset ({err}); "
                               "write it with python benchmarks/pack_data.py") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        found = record.get("format") if isinstance(record, dict) else type(record).__name__
        raise DamagedFileError(f"data source 'packed': {path} has format {found!r}, not "
                               f"{FORMAT!r}; pack it again with python benchmarks/pack_data.py")
    return record


@functools.lru_cache(maxsize=2)
def _load(path: Path, size: int, modified: int) -> SourceData:
    record = read_packed(path)

    def array(key: str) -> np.ndarray | None:
        value = record.get(key)
        return None if value is None else value.numpy()

    data = to_source(record["x_train"].numpy(), array("y_train"), len(record["classes"]),
                     array("x_test"), array("y_test"))
    if record.get("domains_train") is None:
        return data
    return dataclasses.replace(data, domains_train=array("domains_train"),
                               domains_test=array("domains_test"),
                               domain_names=list(record["domain_names"]))


class Packed(FileImageSource):
    """A dataset packed into one file of uint8 images by benchmarks/pack_data.py.

    root: the packed file, e.g. gpu_data/cifar10_500_100.pt.
    """

    name = "packed"

    def read(self, seed: int) -> SourceData:
        return self._load_file()

    def _load_file(self) -> SourceData:
        if self.root is None:
            raise ConfigError("data source 'packed' reads one file; set root "
                              "(data.source.init_args.root) to it, e.g. "
                              "gpu_data/cifar10_500_100.pt (written by benchmarks/pack_data.py)")
        path = Path(self.root).expanduser().resolve()
        stat = path.stat() if path.is_file() else None
        return _load(path, stat.st_size if stat else -1, stat.st_mtime_ns if stat else -1)
