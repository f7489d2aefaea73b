"""PFLlib dataset folders: read as a source with its own split, and any split exported.

PFLlib's generators write ``<folder>/train/<i>.npz`` and ``<folder>/test/<i>.npz`` (each an
``np.savez_compressed`` of ``data={"x": ..., "y": ...}``, inputs already normalized) plus
``<folder>/config.json`` (``num_clients``, ``num_classes``, ...). The ``pfllib`` source reads
such a folder as it is: client ``i`` trains on ``train/i.npz`` and is tested on
``test/i.npz``; nothing is re-partitioned and nothing re-normalized. Integer inputs are token
ids and stay int64 (PFLlib's text folders hold ``(ids, length)`` pairs; the ids are read).

``export_pfllib`` writes any fedlight split in PFLlib's layout, so PFLlib trains on the very
same clients and samples.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedlight.core.errors import ConfigError, MissingFileError
from fedlight.data.sources.base import SourceData
from fedlight.data.sources.image_source import FileImageSource


def _read_npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    if not path.is_file():
        raise MissingFileError(f"PFLlib folder is missing client file {str(path)!r}")
    with np.load(path, allow_pickle=True) as archive:
        if "data" not in archive:
            raise ConfigError(f"{str(path)!r} has no 'data' entry (PFLlib writes data={{x, y}})")
        record = archive["data"].tolist()
    if not isinstance(record, dict) or not {"x", "y"} <= set(record):
        raise ConfigError(f"{str(path)!r}: 'data' must be a dict with 'x' and 'y'")
    x, y = np.asarray(record["x"]), np.asarray(record["y"])
    if len(x) != len(y):
        raise ConfigError(f"{str(path)!r}: x has {len(x)} samples but y has {len(y)}")
    return x, y


def _inputs(x: np.ndarray) -> torch.Tensor:
    """The model's inputs: integer arrays are token ids and stay int64 (PFLlib's text
    generators store each sample as an ``(ids, length)`` pair: the ids are kept), anything
    else becomes float32."""
    if x.dtype == object and x.ndim == 2 and x.shape[1] == 2:
        x = np.stack([np.asarray(ids) for ids in x[:, 0]])
    if np.issubdtype(x.dtype, np.integer):
        return torch.from_numpy(x.astype(np.int64))
    return torch.from_numpy(x.astype(np.float32))


def load_pfllib(root: str | None) -> SourceData:
    """Read a PFLlib dataset folder; the returned ``SourceData`` carries its client split."""
    if root is None:
        raise ConfigError("data source 'pfllib' needs root (data.source.init_args.root): the "
                          "PFLlib dataset folder holding config.json, train/ and test/")
    folder = Path(root).expanduser().resolve()
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise MissingFileError(f"no PFLlib config.json in {str(folder)!r}; expected "
                                "<root>/config.json, <root>/train/<i>.npz, <root>/test/<i>.npz")
    config = json.loads(config_path.read_text())
    num_clients = int(config["num_clients"])
    xs, ys, splits, offset = [], [], [], 0
    for split_name in ("train", "test"):
        for client_id in range(num_clients):
            x, y = _read_npz(folder / split_name / f"{client_id}.npz")
            xs.append(x)
            ys.append(y)
            index = np.arange(offset, offset + len(y))
            offset += len(y)
            if split_name == "train":
                splits.append([index, None])
            else:
                splits[client_id][1] = index
    y_all = np.concatenate(ys).astype(np.int64)
    num_classes = int(config.get("num_classes") or int(y_all.max()) + 1)
    if y_all.min() < 0 or y_all.max() >= num_classes:
        raise ConfigError(f"labels in {str(folder)!r} fall outside 0..{num_classes - 1}")
    return SourceData(
        x_train=_inputs(np.concatenate(xs)),
        y_train=torch.from_numpy(y_all), x_test=None, y_test=None, num_classes=num_classes,
        client_splits=tuple((train, test) for train, test in splits),
    )


class PFLlib(FileImageSource):
    """A folder written by PFLlib's dataset generators, read with its own client split (the
    partition is then ignored).

    root: the PFLlib dataset folder holding config.json, train/ and test/.
    """

    name = "pfllib"

    def read(self, seed: int) -> SourceData:
        return load_pfllib(self.root)


def export_pfllib(datamodule: Any, folder: str | Path, scheme: Any = None) -> Path:
    """Write a data module's split in PFLlib's layout under ``folder`` and return it.
    ``scheme``: the partition config.json names (default the data module's; a split read
    back from a run's partition.json names the scheme that made it)."""
    folder = Path(folder)
    scheme = datamodule.partition if scheme is None else scheme
    datamodule.setup()
    stats = datamodule.stats()
    for split_name in ("train", "test"):
        (folder / split_name).mkdir(parents=True, exist_ok=True)
    for client_id in range(datamodule.num_clients):
        for split_name, (x, y) in (("train", datamodule.client_train(client_id)),
                                   ("test", datamodule.client_test(client_id))):
            with (folder / split_name / f"{client_id}.npz").open("wb") as handle:
                np.savez_compressed(handle, data={"x": x.numpy(), "y": y.numpy()})
    config = {
        "num_clients": datamodule.num_clients,
        "num_classes": datamodule.num_classes,
        "non_iid": scheme.name != "iid",
        "balance": False,
        "partition": scheme.name,
        "Size of samples for labels in clients": [
            [[label, count] for label, count in enumerate(c["train_label_counts"]) if count]
            for c in stats["clients"]
        ],
        "alpha": getattr(scheme, "beta", None),
        "batch_size": datamodule.batch_size,
        "exported_by": "fedlight",
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder
