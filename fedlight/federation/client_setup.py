"""The one set-up of a process's client module: what the simulator (build.py), a Flower node
(fedlight.flower.client) and the analyses of a finished run (fedlight.analysis.runs) do to the
module before its first client trains or is scored, so that all three train and score a client
alike. The client runtime that then serves the clients
(:class:`fedlight.federation.runtime.ClientRuntime`) is built on the module set up here."""

from __future__ import annotations

import torch
from lightning.fabric import Fabric

from fedlight.clients.base import FederatedClient
from fedlight.core.errors import ConfigError
from fedlight.data.datamodule import FederatedDataModule
from fedlight.federation.memory_format import apply_memory_format
from fedlight.federation.options import TrainerOptions
from fedlight.federation.processes.cpus import apply_threads


def set_up_client(options: TrainerOptions, fabric: Fabric, model: FederatedClient,
                  datamodule: FederatedDataModule, reinit: bool) -> torch.memory_format:
    """Set ``model`` up for a run over ``datamodule`` with the trainer's ``options``: torch's
    threads (trainer.threads), the data set up, the class count and the shared / private
    patterns checked, the weights re-initialized from the seed where ``reinit`` asks (False
    keeps them, as when a checkpoint is evaluated), the trainer's
    ``evaluate_after_local_training`` applied, and the module placed by Fabric (device,
    precision) in the run's memory format, collecting what it logs per round.

    Returns:
        The memory format of the image batches (see memory_format.py).

    Raises:
        TypeError: ``model`` is not a fedlight client.
        fedlight.core.errors.ConfigError: its class count is not the data's.
    """
    if not isinstance(model, FederatedClient):
        raise TypeError(f"model must be a fedlight FederatedClient, got {type(model).__name__}")
    apply_threads(options.threads, fabric.device)
    datamodule.setup("fit")
    if model.num_classes != datamodule.num_classes:
        raise ConfigError(f"model has {model.num_classes} classes but data source "
                          f"{datamodule.source.name!r} has {datamodule.num_classes}")
    _ = model.partition  # resolve and check the shared / private patterns now
    if reinit:
        reinitialize(model, options.seed)
    if options.evaluate_after_local_training is not None:
        model.evaluate_after_local_training = options.evaluate_after_local_training
    fabric.setup_module(model)
    placed = apply_memory_format(model, options.memory_format, fabric.device)
    model.capture_logs(True)
    return placed


def reinitialize(client: FederatedClient, seed: int) -> None:
    """Give ``client`` the weights a construction right after ``torch.manual_seed(seed)`` gives
    (what the CLI does), without touching the global RNG state.

    The client is rebuilt with the arguments of its own constructor call and its state copied
    over, so every method's own initialization (zero-initialized heads, copies) is kept; this
    copies a module's own initial weights, no client's state.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fresh = type(client)(**client.construction)
    client.load_state_dict(fresh.state_dict())


__all__ = ["reinitialize", "set_up_client"]
