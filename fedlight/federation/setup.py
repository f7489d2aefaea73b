"""Checks and preparation of a trainer's arguments and of the client it trains."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from fedlight.clients.base import FederatedClient
from fedlight.core.errors import ConfigError
from fedlight.data.datamodule import FederatedDataModule
from fedlight.federation.aggregate import WEIGHTINGS
from fedlight.federation.launch import apply_threads

#: Trainer options of fedlight 0.1 that moved, and where they live now.
MOVED_OPTIONS = {
    "dp_clip_norm": "server: {class_path: DPFedAvg, init_args: {clip_norm: ...}}",
    "dp_noise_multiplier": "server: {class_path: DPFedAvg, init_args: {noise_multiplier: ...}}",
    "dp_delta": "server: {class_path: DPFedAvg, init_args: {delta: ...}}",
    "dlg_every": "trainer.probes: [{class_path: DLGProbe, init_args: {every: ...}}]",
    "dlg_batches": "trainer.probes: [{class_path: DLGProbe, init_args: {batches: ...}}]",
    "dlg_options": "trainer.probes: [{class_path: DLGProbe, init_args: {options: ...}}]",
}


def check_moved(options: Mapping[str, Any]) -> None:
    """Raise ``TypeError`` for options the trainer does not take, naming the new place of the
    ones that moved."""
    for name in options:
        if name in MOVED_OPTIONS:
            raise TypeError(f"trainer option {name!r} moved: use {MOVED_OPTIONS[name]}")
    if options:
        raise TypeError(f"unknown trainer option(s) {', '.join(sorted(options))}")


def check_options(join_ratio: float, weighting: str, **counts: int) -> None:
    """Refuse a join ratio outside (0, 1], an unknown weighting and counts below 1."""
    for name, value in counts.items():
        if value < 1:
            raise ConfigError(f"trainer.{name} must be at least 1, got {value}")
    if not 0 < join_ratio <= 1:
        raise ConfigError(f"trainer.join_ratio must be in (0, 1], got {join_ratio}")
    if weighting not in WEIGHTINGS:
        raise ConfigError(f"trainer.weighting: unknown weighting {weighting!r}; valid: "
                         f"{', '.join(WEIGHTINGS)}")


def prepare_run(model: FederatedClient, datamodule: FederatedDataModule, seed: int,
                reinit: bool = True, threads: int | str | None = None,
                device: torch.device | None = None) -> None:
    """What every engine (the simulator, the Flower apps) does before round 1: set torch's
    threads (trainer.threads, see launch.apply_threads), set up the data, check the class
    count and the shared / private patterns, and re-initialize the model from seed (reinit)."""
    if not isinstance(model, FederatedClient):
        raise TypeError(f"model must be a fedlight FederatedClient, got {type(model).__name__}")
    apply_threads(threads, device or torch.device("cpu"))
    datamodule.setup("fit")
    if model.num_classes != datamodule.num_classes:
        raise ConfigError(f"model has {model.num_classes} classes but data source "
                         f"{datamodule.source!r} has {datamodule.num_classes}")
    _ = model.partition  # resolve and check the shared / private patterns now
    if reinit:
        reinitialize(model, seed)


def reinitialize(client: FederatedClient, seed: int) -> None:
    """Give ``client`` the weights a construction right after ``torch.manual_seed(seed)`` gives
    (what the CLI does), without touching the global RNG state.

    The client is rebuilt with the arguments of its own constructor call and its state copied
    over, so every method's own initialization (zero-initialized heads, copies) is kept.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fresh = type(client)(**client.construction)
    client.load_state_dict(fresh.state_dict())


__all__ = ["MOVED_OPTIONS", "check_moved", "check_options", "prepare_run", "reinitialize"]
