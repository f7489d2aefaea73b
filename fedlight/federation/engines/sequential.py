"""The simulator's engine: the participants of a round trained in this process, one after
another, through the client runtime (one live client module plays every client in turn).

Every random draw of a client's training is seeded from (seed, round, client), so a client
trains the same whichever process owns it and whatever was trained before it in the process.
The round itself (sampling, downloads, reduction, evaluation, the row) is RoundProtocol's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from fedlight.core.messages import (
    SIMULATOR,
    ClientResult,
    EngineHost,
    Score,
    State,
    TrainTask,
)
from fedlight.federation.runtime import ClientRuntime


class SequentialEngine:
    """Trains and scores the clients this process owns through ``runtime``.

    Args:
        runtime: the client runtime of this process.
    """

    name = SIMULATOR
    holds_clients = True
    resume_hint: str | None = None

    def __init__(self, runtime: ClientRuntime) -> None:
        self.runtime = runtime

    def attach(self, host: EngineHost) -> None:
        """Every trainer option works in the simulator."""

    def train(self, tasks: Sequence[TrainTask]) -> Iterator[ClientResult]:
        """Train each task's client in turn; an exception stops the run (see protocol.py)."""
        for task in tasks:
            yield self.runtime.train(task)

    def evaluate(self, round_idx: int,
                 downloads: Mapping[int, State]) -> dict[int, dict[str, Score]]:
        return {client_id: self.runtime.score(client_id, round_idx, shared)
                for client_id, shared in downloads.items()}


__all__ = ["SequentialEngine"]
