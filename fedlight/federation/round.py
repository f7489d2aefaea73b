"""One communication round: train the participants this process owns and reduce their reports.

Every random draw of a client's training is seeded from (seed, round, client), so a client
trains the same whichever process owns it and whatever was trained before it in the process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from lightning.fabric import Fabric
from torch import Tensor

from fedlight.clients.base import FederatedClient
from fedlight.federation.aggregate import state_bytes
from fedlight.federation.distributed import Distributed
from fedlight.federation.evaluation import Evaluator, Score
from fedlight.federation.local import LocalLoop
from fedlight.federation.population import Population
from fedlight.federation.precision import RoundGradScale
from fedlight.federation.sampling import derive_seed
from fedlight.federation.server import Report, ServerRule


@dataclass
class RoundResult:
    """What a round leaves behind: its row's training columns (train_loss, bytes, train/*)
    and, when asked for, each owned participant's scores right after its local training."""

    stats: dict[str, Any]
    scores: dict[int, dict[str, Score]] = field(default_factory=dict)


class RoundRunner:
    """Trains the owned participants of a round in turn on the one live client module and
    folds each report into the server rule; dropped clients train but never report."""

    def __init__(self, fabric: Fabric, dist: Distributed, client: FederatedClient,
                 server: ServerRule, population: Population, loop: LocalLoop,
                 seed: int, local_epochs: int, weighting: str) -> None:
        self.fabric, self.dist, self.client, self.server = fabric, dist, client, server
        self.population, self.loop = population, loop
        self.seed, self.local_epochs, self.weighting = seed, local_epochs, weighting
        self.grad_scale = RoundGradScale(fabric)

    def run(self, round_idx: int, participants: list[int], dropped: set[int],
            evaluator: Evaluator | None) -> RoundResult:
        """Train and reduce one round; evaluator scores each client right after its local
        training (methods evaluated that way), None skips it."""
        self.server.begin_round(round_idx)
        stats: dict[int, dict[str, Any]] = {}
        scores: dict[int, dict[str, Score]] = {}
        for client_id in self.dist.owned(participants):  # all of them with one process
            report, stats[client_id] = self.train_client(client_id, round_idx)
            if client_id not in dropped:  # a dropped client trained but never reports
                self.server.add(report)
                stats[client_id]["bytes_up"] = state_bytes(report.state) + state_bytes(
                    report.payload)
            if evaluator is not None:
                scores[client_id] = evaluator.score_client(self.client, client_id, round_idx)
        self.server.end_round(self.dist)
        self.grad_scale.end_round(self.dist)
        row = round_stats(self.dist.gather_by_client(stats), dropped, self.fabric.device)
        return RoundResult(row, scores)

    def train_client(self, client_id: int, round_idx: int) -> tuple[Report, dict[str, Any]]:
        """Load client client_id, run its local phases and return its report to the server
        and its statistics (loss sum, steps, bytes, logged values)."""
        shared, message = self.server.download(client_id)
        result = self.population.train(
            self.client, self.loop, client_id, round_idx, shared, message,
            derive_seed(self.seed, round_idx, client_id), self.local_epochs, self.grad_scale)
        upload = result.upload
        weight = upload.weight if self.weighting == "samples" else 1.0
        return Report(client_id, upload.state, weight, upload.payload), {
            "loss": result.loss_sum, "steps": result.steps, "bytes_up": 0,
            "bytes_down": state_bytes(shared) + state_bytes(message),
            "logs": self.client.pop_federated_logs()}


def round_stats(stats: dict[int, dict[str, Any]], dropped: set[int],
                device: torch.device) -> dict[str, Any]:
    """Train loss, bytes and logged values of a round, accumulated in client-id order (so the
    figures do not depend on which process trained which client)."""
    loss = torch.zeros((), device=device)
    steps = 0
    logs: dict[str, list[Tensor]] = {}
    for client_id, entry in stats.items():
        if client_id in dropped:
            continue
        loss += entry["loss"]
        steps += entry["steps"]
        for name, value in entry["logs"].items():
            if name != "train_loss":  # already the round's train_loss column
                logs.setdefault(name, []).append(value)
    row: dict[str, Any] = {
        "train_loss": float(loss) / max(steps, 1),
        "bytes_up": sum(e["bytes_up"] for e in stats.values()),
        "bytes_down": sum(e["bytes_down"] for e in stats.values()),
    }
    row.update({f"train/{k}": float(torch.stack(v).mean()) for k, v in logs.items()})
    return row


__all__ = ["RoundResult", "RoundRunner", "round_stats"]
