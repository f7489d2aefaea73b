"""Shared fixtures: tiny federated data and a fast trainer factory."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
torch.set_num_threads(1)  # tiny models: one thread is faster and steadier

from fedlight.data import FederatedDataModule  # noqa: E402
from fedlight.data.partitions import PARTITIONS, Partition  # noqa: E402
from fedlight.data.sources.synthetic import Synthetic  # noqa: E402
from fedlight.federation.processes import cpus  # noqa: E402
from fedlight.federation.trainer import FederatedTrainer  # noqa: E402

#: What tiny_data's partitions are given (sized for its 240 samples of 4 classes)
TINY_PARTITION_OPTIONS = {"dirichlet": {"min_client_size": 5}, "incomplete": {"min_client_size": 5},
                          "pathological": {"classes_per_client": 2}}


def tiny_data(num_clients: int = 4, partition: str | Partition = "iid",
              shape: tuple[int, ...] = (1, 8, 8), samples: int = 240, classes: int = 4,
              **kwargs) -> FederatedDataModule:
    """``samples`` synthetic samples of ``classes`` classes (each of ``shape``) over
    ``num_clients`` clients; ``partition`` a Partition or the name of one (built with
    TINY_PARTITION_OPTIONS)."""
    if isinstance(partition, str):
        partition = PARTITIONS[partition](**TINY_PARTITION_OPTIONS.get(partition, {}))
    options = dict(source=Synthetic(samples=samples, shape=shape, classes=classes),
                   partition=partition, num_clients=num_clients)
    options.update(kwargs)
    return FederatedDataModule(**options)


def tiny_trainer(root, **kwargs) -> FederatedTrainer:
    options = dict(rounds=2, batch_size=16, accelerator="cpu", default_root_dir=str(root),
                   progress_bar=False, checkpoint_every=1)
    options.update(kwargs)
    return FederatedTrainer(**options)


def make_client(cls, **kwargs):
    """A seeded client of class ``cls`` sized for tiny_data (MLP on 1x8x8, 4 classes)."""
    torch.manual_seed(0)
    return cls(**{"backbone": "mlp", "num_classes": 4, "input_shape": (1, 8, 8), "lr": 0.1,
                  **kwargs})


@pytest.fixture(autouse=True)
def _machine_busy(monkeypatch):
    """Every core reads as busy, so ``devices: auto`` (the default) is one process in tests:
    xdist's workers share the machine, and a test that wants processes asks for them. Tests of
    the idle-core rule replace ``busy_cores`` themselves."""
    monkeypatch.setattr(cpus, "busy_cores", lambda window=0.25: float(cpus.cpu_cores()))


@pytest.fixture
def data() -> FederatedDataModule:
    return tiny_data()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A test's own decode-cache folder (FEDLIGHT_CACHE), to check what a source wrote there."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("FEDLIGHT_CACHE", str(folder))
    return folder


def cached_files(folder):
    """The files under a cache folder, sorted (none when it was never created)."""
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []
