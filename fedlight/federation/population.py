"""The clients of a run as this process holds them: their data, their private state between
rounds, their optimizer state (``optimizer_state: persist``) and participation counts, and the
one way to load client ``i`` into the live module for round ``r``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from fedlight.clients.base import ClientContext, FederatedClient
from fedlight.data.datamodule import FederatedDataModule
from fedlight.federation.distributed import Distributed
from fedlight.federation.local import LocalLoop, LocalResult
from fedlight.federation.memory_format import on_device
from fedlight.federation.store import ClientStore, make_store

Batch = tuple[Tensor, Tensor]


def seed_global_rngs(seed: int, device: torch.device) -> None:
    """Seed the global generators a client's training on ``device`` draws from (the CPU one,
    and the accelerator's): the same streams as ``torch.manual_seed(seed)`` there.

    Why not torch.manual_seed: on a machine where CUDA (or another accelerator backend) is
    present but not initialized, every call also queues a lazy seeding call per backend with
    a captured stack trace, ~1 ms per call: a measurable share of a small client's round."""
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.manual_seed_all(seed)
    elif device.type != "cpu":
        torch.manual_seed(seed)


class Population:
    """Per-client data and state of the clients this process owns (all with one process).

    Args:
        datamodule: the set-up data module.
        dist: this process's place in the run (which clients it owns).
        initial_private: the module's private state before training (what a client that never
            trained starts from).
        storage, storage_dir: the private-state store (``memory`` or ``disk``).
        rounds, join_ratio, batch_size: told to clients through their context.
        memory_format: the memory format of the image batches (see memory_format.py).
    """

    def __init__(self, datamodule: FederatedDataModule, dist: Distributed,
                 initial_private: dict[str, Tensor], storage: str, storage_dir: Any,
                 rounds: int, join_ratio: float, batch_size: int,
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
        self.initial_private = initial_private
        self.states: ClientStore = make_store(storage, initial_private, self.num_clients,
                                              storage_dir)
        self.optimizer_states: dict[int, dict[int, dict[str, Any]]] = {}
        self.participations = [0] * self.num_clients
        self.rounds, self.join_ratio, self.batch_size = rounds, join_ratio, batch_size

    def context(self, client_id: int, round_idx: int) -> ClientContext:
        return ClientContext(
            client_id=client_id, round=round_idx, rounds=self.rounds, join_ratio=self.join_ratio,
            class_counts=self.class_counts[client_id],
            participations=self.participations[client_id],
            train_data=self.train_data[client_id], batch_size=self.batch_size)

    def load(self, client: FederatedClient, client_id: int, round_idx: int,
             shared: Mapping[str, Tensor]) -> None:
        """Put client ``client_id`` into the live module as it is at round ``round_idx``:
        ``shared`` (what the server sent) plus its own private state, and its context."""
        private = self.states.get(client_id, self.initial_private)
        client.load_state_dict({**shared, **private}, strict=True)
        client.context = self.context(client_id, round_idx)

    def start_training(self, client: FederatedClient, client_id: int, round_idx: int,
                       shared: Mapping[str, Tensor], message: dict[str, Any]) -> None:
        """:meth:`load`, train mode, and ``on_round_start`` with the server's message."""
        self.load(client, client_id, round_idx, shared)
        client.train()
        client.on_round_start(round_idx, message)

    def finish_training(self, client: FederatedClient, client_id: int,
                        optimizer_states: dict[int, dict[str, Any]]) -> None:
        """Keep what the client must remember: its private state and optimizer state."""
        self.participations[client_id] += 1
        self.states[client_id] = client.client_state()
        if optimizer_states:
            self.optimizer_states[client_id] = optimizer_states

    def train(self, client: FederatedClient, loop: LocalLoop, client_id: int, round_idx: int,
              shared: Mapping[str, Tensor], message: dict[str, Any], seed: int,
              local_epochs: int) -> LocalResult:
        """One client's round, as every engine runs it (the simulator, a Flower SuperNode):
        seed the global RNG and the batch order with seed, load the client, run its local
        phases with loop, call on_round_end, keep its private and optimizer state."""
        seed_global_rngs(seed, self.dist.device)
        self.start_training(client, client_id, round_idx, shared, message)
        phases = client.local_phases(local_epochs)
        result = loop.fit(client, self.train_data[client_id], torch.Generator().manual_seed(seed),
                          phases, self.optimizer_states.get(client_id))
        client.on_round_end()
        self.finish_training(client, client_id, result.optimizer_states)
        return result

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
        self.optimizer_states = {int(k): v for k, v in
                                 (checkpoint.get("optimizer_states") or {}).items()}
        self.participations = list(checkpoint["participations"])


__all__ = ["Population", "seed_global_rngs"]
