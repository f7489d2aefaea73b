"""The simulator's engine: the participants of a round trained in this process, one after
another, on the one live client module.

Every random draw of a client's training is seeded from (seed, round, client), so a client
trains the same whichever process owns it and whatever was trained before it in the process.
The round itself (sampling, downloads, reduction, evaluation, the row) is RoundProtocol's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from lightning.fabric import Fabric

from fedlight.clients.base import FederatedClient
from fedlight.federation.evaluation import Evaluator, Score
from fedlight.federation.local import LocalLoop
from fedlight.federation.population import Population
from fedlight.federation.precision import ClientGradScale
from fedlight.federation.protocol import ClientResult, State, TrainTask, private_scores
from fedlight.federation.sampling import derive_seed


class LocalEngine:
    """Trains and scores the clients this process owns (see the module docstring).

    Args:
        fabric: the process's Fabric (device, precision).
        client: the live client module that plays every client in turn.
        population: the owned clients' data and private states.
        loop: the local loop.
        evaluator: scores a client right after training, or on the model it is sent.
        seed: the run's seed.
        local_epochs: local epochs E.
    """

    holds_clients = True

    def __init__(self, fabric: Fabric, client: FederatedClient, population: Population,
                 loop: LocalLoop, evaluator: Evaluator, seed: int, local_epochs: int,
                 share_class_counts: bool = True) -> None:
        self.client, self.population, self.loop, self.evaluator = (client, population, loop,
                                                                    evaluator)
        self.seed, self.local_epochs = seed, local_epochs
        self.share_class_counts = share_class_counts
        self.grad_scale = ClientGradScale(fabric)

    def train(self, tasks: Sequence[TrainTask]) -> Iterator[ClientResult]:
        """Train each task's client in turn; an exception stops the run (see protocol.py)."""
        for task in tasks:
            yield train_client(self.client, self.population, self.loop, self.evaluator,
                               self.grad_scale, task, derive_seed(
                                   self.seed, task.round_idx, task.client_id), self.local_epochs,
                               self.share_class_counts)

    def evaluate(self, round_idx: int,
                 downloads: Mapping[int, State]) -> dict[int, dict[str, Score]]:
        return {client_id: private_scores(
                    self.evaluator.score_client(self.client, client_id, round_idx, shared),
                    self.share_class_counts)
                for client_id, shared in downloads.items()}

    def attach(self, trainer: object) -> None:
        """Every trainer option works in the simulator."""


def train_client(client: FederatedClient, population: Population, loop: LocalLoop,
                 evaluator: Evaluator, grad_scale: ClientGradScale, task: TrainTask, seed: int,
                 local_epochs: int, share_class_counts: bool = True) -> ClientResult:
    """One client's round, as every engine runs it (the simulator, a Flower SuperNode): local
    training from the task's download and loss scale, then its scores when the task asks
    (per-class counts only where the run shares them)."""
    grad_scale.start(task.loss_scale)
    result = population.train(client, loop, task.client_id, task.round_idx, task.shared,
                              task.message, seed, local_epochs)
    logs = client.pop_federated_logs()
    scores = task_scores(evaluator, client, task, share_class_counts)
    return ClientResult(task.client_id, result.upload, result.loss_sum, result.steps, logs,
                        scores, grad_scale.end())


def task_scores(evaluator: Evaluator, client: FederatedClient, task: TrainTask,
                share_class_counts: bool) -> dict[str, Score]:
    """A participant's scores right after its training where the task asks for them (per-class
    counts only where the run shares them), else none."""
    if not task.score:
        return {}
    return private_scores(evaluator.score_client(client, task.client_id, task.round_idx),
                          share_class_counts)


__all__ = ["LocalEngine", "task_scores", "train_client"]
