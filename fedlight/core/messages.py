"""The round's messages and the engine contract: what the server side hands an engine for
each participant (:class:`TrainTask`), what comes back (:class:`ClientResult`, or a
:class:`ClientFailure`), how a client's model is scored (:class:`Score`), and what the trainer
asks of an engine (:class:`ClientEngine`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from torch import Tensor

from fedlight.core.client import Upload

State = dict[str, Tensor]

#: The name of the engine of fedlight fit (clients trained in the trainer's processes).
SIMULATOR = "simulator"


@dataclass
class TrainTask:
    """What the server sends one participant of a round.

    shared and message are the rule's download for the client; score asks for the client's
    scores right after local training (evaluated rounds of methods evaluated that way);
    loss_scale is the fp16 loss scale every client of the round starts from (None without
    one); keep_from is the first round a resume could restart at (the last checkpointed
    round), so an engine that stores client states elsewhere knows which versions it may drop.
    """

    client_id: int
    round_idx: int
    shared: State
    message: dict[str, Any]
    score: bool = False
    loss_scale: float | None = None
    keep_from: int = 0


@dataclass
class Score:
    """One model on one test set: correct predictions, samples, summed cross-entropy, the
    per-class true positives, false positives and false negatives (torchmetrics' stat scores)
    and the micro-averaged one-vs-rest ROC AUC (PFLlib's AUC)."""

    correct: float = 0.0
    total: int = 0
    loss_sum: float = 0.0
    class_counts: list[tuple[int, int, int]] = field(default_factory=list)
    auc: float = float("nan")

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else float("nan")

    @property
    def loss(self) -> float:
        return self.loss_sum / self.total if self.total else float("nan")

    @property
    def macro_f1(self) -> float:
        return macro_f1(self.class_counts)


def macro_f1(class_counts: Sequence[tuple[int, int, int]]) -> float:
    """Mean over classes of F1 = 2 tp / (2 tp + fp + fn), over the classes that occur in the
    labels or the predictions (as torchmetrics' and scikit-learn's macro average)."""
    scores = [2 * tp / (2 * tp + fp + fn) for tp, fp, fn in class_counts if tp + fp + fn]
    return sum(scores) / len(scores) if scores else float("nan")


@dataclass
class ClientResult:
    """What comes back from one participant: its upload (what the method sends), the sum of its
    training losses and its step count, the values it logged, its scores when the task asked
    for them, and its fp16 loss scale after training (None without one)."""

    client_id: int
    upload: Upload
    loss_sum: float | Tensor
    steps: int
    logs: Mapping[str, float | Tensor] = field(default_factory=dict)
    scores: dict[str, Score] = field(default_factory=dict)
    loss_scale: float | None = None


@dataclass
class ClientFailure:
    """A participant whose work did not come back (counted as dropped)."""

    client_id: int
    reason: str


class EngineHost(Protocol):
    """What an engine may read of the run it serves (the trainer)."""

    @property
    def probes(self) -> Sequence[object]:
        """The run's probes (they need the whole population in one process)."""

    @property
    def world_size(self) -> int:
        """The processes of the run."""

    @property
    def run_dir(self) -> Path | None:
        """The run folder (known once the run has opened it)."""


class ClientEngine(Protocol):
    """How a run's clients are carried out: everything the trainer asks of an engine.

    name: the engine's name in the run's summary and folder name (``simulator``, ``flower``).
    holds_clients: whether this process holds the clients' data and private states (the
    simulator) or they live elsewhere (SuperNodes); the trainer checkpoints them only then,
    and only then does a first SIGINT / SIGTERM let the round in progress finish (a
    deployment's stop request also closes its transport, so such a run stops at once and
    resumes from its last checkpoint).
    resume_hint: how to resume a stopped run of this engine (None: the trainer's own hint).
    """

    name: str
    holds_clients: bool
    resume_hint: str | None

    def attach(self, host: EngineHost) -> None:
        """Called when a run starts: raise ConfigError (one line) for a run this engine cannot
        carry out, and keep what the engine needs of the run."""

    def train(self, tasks: Sequence[TrainTask]) -> Iterable[ClientResult | ClientFailure]:
        """Carry out the tasks; yield one result or failure per task, in the tasks' order."""

    def evaluate(self, round_idx: int,
                 downloads: Mapping[int, State]) -> dict[int, dict[str, Score]]:
        """Each reachable client's scores of the model it gets from downloads (its shared
        state) on its local test split; clients that could not be reached are left out."""


def state_bytes(state: Mapping[str, object]) -> int:
    """Bytes a message of tensors (nested in dicts / lists) takes on the wire."""
    total = 0
    for value in state.values():
        if isinstance(value, Tensor):
            total += value.numel() * value.element_size()
        elif isinstance(value, Mapping):
            total += state_bytes(value)
        elif isinstance(value, (list, tuple)):
            total += state_bytes({str(i): v for i, v in enumerate(value)})
    return total


__all__ = ["SIMULATOR", "ClientEngine", "ClientFailure", "ClientResult", "EngineHost", "Score",
           "State", "TrainTask", "macro_f1", "state_bytes"]
