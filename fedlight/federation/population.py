"""The clients of a run as this process holds them: their data, their private state between
rounds, their optimizer state (``optimizer_state: persist``) and participation counts, and
what client ``i`` is told of itself for round ``r`` (its context). The client runtime loads
them into the live module (runtime.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from fedlight.clients.base import FederatedClient
from fedlight.core.client import ClientContext
from fedlight.data.datamodule import FederatedDataModule
from fedlight.federation.memory_format import on_device
from fedlight.federation.processes.collectives import Distributed
from fedlight.federation.state.stores import ClientStore, make_store

Batch = tuple[Tensor, Tensor]
Augmentation = Callable[[Tensor, torch.Generator], Tensor]


class Population:
    """Per-client data and state of the clients this process owns (all with one process).

    Args:
        datamodule: the set-up data module.
        dist: this process's place in the run (which clients it owns).
        initial_private: the module's private state before training (what a client that never
            trained starts from).
        storage: the private-state store (``memory`` or ``disk``).
        storage_dir: the folder of the ``disk`` store's file (None: the temporary folder).
        rounds, join_ratio, batch_size, drop_last: told to clients through their context;
            ``drop_last`` also shapes the training epochs (:meth:`ClientRuntime.batches`).
        memory_format: the memory format of the image batches (see memory_format.py).
    """

    def __init__(self, datamodule: FederatedDataModule, dist: Distributed,
                 initial_private: dict[str, Tensor], storage: str,
                 storage_dir: str | Path | None, rounds: int, join_ratio: float,
                 batch_size: int, drop_last: bool = False,
                 memory_format: torch.memory_format = torch.contiguous_format) -> None:
        device = dist.device
        self.dist = dist
        self.num_clients = datamodule.num_clients
        owned = [dist.owns(i) for i in range(self.num_clients)]
        def place(batch: tuple[Tensor, Tensor]) -> Batch:
            return on_device(batch, device, memory_format)

        # The data of the clients this process owns (None for the others').
        self.train_data: list[Batch] = [
            place(datamodule.client_train(i)) if mine else None  # type: ignore[misc]
            for i, mine in enumerate(owned)]
        self.test_data: list[Batch] = [
            place(datamodule.client_test(i)) if mine else None  # type: ignore[misc]
            for i, mine in enumerate(owned)]
        self.val_data: list[Batch] = [
            place(datamodule.client_val(i)) if mine else None  # type: ignore[misc]
            for i, mine in enumerate(owned)]
        self.class_counts = [datamodule.class_counts(i) for i in range(self.num_clients)]
        #: ``(x, generator) -> x``: the random augmentation of training batches (data.augment)
        self.augmentation: Augmentation | None = datamodule.augmentation
        self.initial_private = initial_private
        self.states: ClientStore = make_store(storage, initial_private, self.num_clients,
                                              storage_dir)
        self.optimizer_states: dict[int, dict[int, dict[str, Any]]] = {}
        self.participations = [0] * self.num_clients
        self.rounds, self.join_ratio, self.batch_size = rounds, join_ratio, batch_size
        self.drop_last = drop_last

    def context(self, client_id: int, round_idx: int) -> ClientContext:
        return ClientContext(
            client_id=client_id, round=round_idx, rounds=self.rounds, join_ratio=self.join_ratio,
            class_counts=self.class_counts[client_id],
            participations=self.participations[client_id],
            train_data=self.train_data[client_id], batch_size=self.batch_size,
            drop_last=self.drop_last)

    def finish_training(self, client: FederatedClient, client_id: int,
                        optimizer_states: dict[int, dict[str, Any]]) -> None:
        """Keep what the client must remember: its private state and optimizer state."""
        self.participations[client_id] += 1
        self.states[client_id] = client.client_state()
        if optimizer_states:
            self.optimizer_states[client_id] = optimizer_states

    # ----------------------------------------------------------------- one client's state
    def snapshot(self, client_id: int) -> dict[str, Any]:
        """What client ``client_id`` carries to its next round (a Flower node's file)."""
        return {"private": self.states[client_id],
                "optimizer": self.optimizer_states.get(client_id),
                "participations": self.participations[client_id]}

    def restore_client(self, client_id: int, snapshot: Mapping[str, Any] | None) -> None:
        """Put back a :meth:`snapshot` (None: the client as before its first round)."""
        self.states.pop(client_id, None)
        self.optimizer_states.pop(client_id, None)
        self.participations[client_id] = 0
        if snapshot is None:
            return
        self.states[client_id] = snapshot["private"]
        if snapshot["optimizer"]:
            self.optimizer_states[client_id] = snapshot["optimizer"]
        self.participations[client_id] = snapshot["participations"]

    # ----------------------------------------------------------------- checkpoints
    def checkpoint(self) -> dict[str, Any]:
        """Every client's state, gathered on rank 0 (``None`` values on the other ranks)."""
        return {
            "client_states": self.dist.gather_client_states(self.states.state()),
            "optimizer_states": self.dist.gather_client_states(self.optimizer_states),
            "participations": self.dist.merge_participations(self.participations),
            "initial_private": self.initial_private,
        }

    def restore(self, checkpoint: Mapping[str, Any]) -> None:
        """Load this process's clients from a checkpoint (already cut to the owned clients)."""
        self.initial_private = checkpoint["initial_private"]
        self.states.load(checkpoint["client_states"])
        self.optimizer_states = {int(k): v for k, v in checkpoint["optimizer_states"].items()}
        self.participations = list(checkpoint["participations"])


__all__ = ["Population"]
