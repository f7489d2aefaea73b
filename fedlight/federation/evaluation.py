"""Scoring clients and the global model, and reducing per-client results to a round's metrics.

Personalized accuracy: each client's model (its shared state as the server would send it, its
private state) on its local test split, pooled and spread across clients. Global accuracy: the
global model on the global test set, where the method has one. A client may fine-tune before it
is scored (:meth:`~fedlight.clients.FederatedClient.evaluation_phases`, e.g. Per-FedAvg's
adaptation step); the fine-tuned weights are scored and thrown away, never stored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from lightning.fabric import Fabric
from torch import Tensor
from torchmetrics.functional.classification import binary_auroc, multiclass_stat_scores

from fedlight.clients.base import FederatedClient
from fedlight.data.datamodule import iterate_batches
from fedlight.federation.distributed import Distributed
from fedlight.federation.local import LocalLoop
from fedlight.federation.population import Population
from fedlight.federation.sampling import derive_seed
from fedlight.federation.server.base import ServerRule

_EVAL_STREAM = 0x4556414C  # tags the fine-tune-at-evaluation stream apart from training


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


Outputs = Mapping[str, Tensor]


@torch.inference_mode()
def score_outputs(
    outputs_fn: Callable[[Tensor], Outputs], x: Tensor, y: Tensor, batch_size: int
) -> dict[str, Score]:
    """Score every named logits tensor that ``outputs_fn`` returns on ``(x, y)``."""
    return score_batches(batch_outputs(outputs_fn, x, batch_size), y, batch_size)


@torch.inference_mode()
def batch_outputs(outputs_fn: Callable[[Tensor], Outputs], x: Tensor, batch_size: int,
                  batches: Sequence[int] | None = None) -> dict[int, dict[str, Tensor]]:
    """``outputs_fn`` on the batches of ``x`` numbered in ``batches`` (default all; see
    :func:`batch_count`), as float32 logits by batch number: the batches are the same
    whichever process computes them, so batches split across processes and gathered score
    exactly as one process's."""
    pieces = torch.split(x, batch_size)  # views, in order; channels_last is kept
    numbers = range(len(pieces)) if batches is None else batches
    return {number: {name: logits.float() for name, logits in outputs_fn(pieces[number]).items()}
            for number in numbers}


def batch_count(samples: int, batch_size: int) -> int:
    """How many batches :func:`batch_outputs` cuts ``samples`` into."""
    return -(-samples // batch_size)


def score_batches(outputs: Mapping[int, Outputs], y: Tensor, batch_size: int
                  ) -> dict[str, Score]:
    """Score the logits of every batch of ``y`` (:func:`batch_outputs`, all batches).

    Per-class stat scores (torchmetrics) and the loss are summed on the device; the AUC
    (torchmetrics' binary AUROC over the flattened one-vs-rest probabilities) needs every
    sample's probabilities, kept on the device. Everything is read at once at the end (one
    host sync per test set).
    """
    sums: dict[str, list[Tensor]] = {}
    probabilities: dict[str, list[Tensor]] = {}
    for number, yb in enumerate(torch.split(y, batch_size)):
        for name, logits in outputs[number].items():
            stats = multiclass_stat_scores(logits, yb, logits.shape[-1], average=None)
            loss = F.cross_entropy(logits, yb, reduction="sum")
            probabilities.setdefault(name, []).append(logits.softmax(-1))
            if name in sums:
                sums[name][0] += stats
                sums[name][1] += loss
            else:
                sums[name] = [stats, loss]
    packed = {name: torch.cat([loss.double().reshape(1), _auc(probabilities[name], y),
                               stats[:, [0, 1, 3]].double().flatten()])
              for name, (stats, loss) in sums.items()}
    values = torch.cat(list(packed.values())).tolist() if packed else []
    scores, start = {}, 0
    for name, part in packed.items():
        loss, auc, *flat = values[start:start + len(part)]
        start += len(part)
        counts = [(int(flat[i]), int(flat[i + 1]), int(flat[i + 2]))
                  for i in range(0, len(flat), 3)]
        scores[name] = Score(sum(c[0] for c in counts), len(y), loss, counts, auc)
    return scores


def _auc(probabilities: list[Tensor], y: Tensor) -> Tensor:
    probs = torch.cat(probabilities)
    target = F.one_hot(y, probs.shape[-1])
    return binary_auroc(probs.flatten(), target.flatten()).double().reshape(1)


def summarize_clients(scores: Mapping[int, Mapping[str, Score]]) -> dict[str, float]:
    """Per-client scores -> pooled accuracy (sum correct / sum samples, GPFL's reported number)
    and the fairness figures across clients: mean, std, coefficient of variation, worst decile.
    """
    metrics: dict[str, float] = {}
    names = sorted({name for per_client in scores.values() for name in per_client})
    for name in names:
        client_scores = [s[name] for s in scores.values() if name in s and s[name].total]
        if not client_scores:
            continue
        accuracies = torch.tensor([s.accuracy for s in client_scores], dtype=torch.float64)
        pooled = sum(s.correct for s in client_scores) / sum(s.total for s in client_scores)
        loss = sum(s.loss_sum for s in client_scores) / sum(s.total for s in client_scores)
        mean = accuracies.mean().item()
        std = accuracies.std(unbiased=False).item()
        worst = accuracies.sort().values[: max(1, len(accuracies) // 10)].mean().item()
        classes = zip(*(s.class_counts for s in client_scores), strict=True)
        pooled_counts = [(sum(c[0] for c in per_class), sum(c[1] for c in per_class),
                          sum(c[2] for c in per_class)) for per_class in classes]
        auc = sum(s.auc * s.total for s in client_scores) / sum(s.total for s in client_scores)
        metrics.update({
            f"{name}_accuracy": pooled,
            f"{name}_accuracy_mean": mean,
            f"{name}_accuracy_std": std,
            f"{name}_accuracy_cv": std / mean if mean > 0 else float("nan"),
            f"{name}_accuracy_worst10": worst,
            f"{name}_loss": loss,
            f"{name}_macro_f1": macro_f1(pooled_counts),
            f"{name}_auc": auc,
        })
    return metrics


class Evaluator:
    """Scores the clients this process owns and (on rank 0) the global model.

    Args:
        fabric: the run's Fabric (autocast for scoring).
        dist: this process's place in the run.
        population: the clients' data and states.
        loop: the local loop (runs a client's ``evaluation_phases``).
        global_test: ``(x, y)`` of the global test set on the device.
        batch_size: evaluation batch size.
        seed: the run's seed (fine-tuning batches are drawn from ``(seed, round, client)``).
    """

    def __init__(self, fabric: Fabric, dist: Distributed, population: Population,
                 loop: LocalLoop, global_test: tuple[Tensor, Tensor], batch_size: int,
                 seed: int) -> None:
        self.fabric, self.dist, self.population, self.loop = fabric, dist, population, loop
        self.global_test = global_test
        self.batch_size = batch_size
        self.seed = seed
        self.last_client_scores: dict[int, dict[str, Score]] = {}

    def score_client(self, client: FederatedClient, client_id: int, round_idx: int,
                     shared: Mapping[str, Tensor] | None = None) -> dict[str, Score]:
        """Score ``client_id`` (loaded from ``shared`` + its private state, or as the module
        holds it now when ``shared`` is None), after its evaluation phases if it has any."""
        if shared is not None:
            self.population.load(client, client_id, round_idx, shared)
        phases = client.evaluation_phases()
        if phases:
            self._fine_tune(client, client_id, round_idx, phases)
        client.eval()
        x, y = self.population.test_data[client_id]
        val_x, val_y = self.population.val_data[client_id]
        with self.fabric.autocast():
            scores = score_outputs(client.eval_outputs, x, y, self.batch_size)
            if len(val_y):  # data.val_fraction > 0: the same model on the validation split
                scores.update({f"val_{name}": score for name, score in score_outputs(
                    client.eval_outputs, val_x, val_y, self.batch_size).items()})
        return scores

    def _fine_tune(self, client: FederatedClient, client_id: int, round_idx: int,
                   phases: list[Any]) -> None:
        generator = torch.Generator().manual_seed(
            derive_seed(self.seed, round_idx, client_id, _EVAL_STREAM))
        data = self.population.train_data[client_id]
        client.train()
        for phase in phases:
            self.loop.run_phase(client, phase, lambda: iterate_batches(
                *data, self.loop.batch_size, generator))
        client.pop_federated_logs()  # fine-tuning losses are not the round's training losses

    def evaluate(self, client: FederatedClient, server: ServerRule, round_idx: int,
                 after_training: Mapping[int, dict[str, Score]] | None) -> dict[str, Any]:
        """Global accuracy and personalized accuracy with its spread across clients; clients
        already scored after their local training are taken from ``after_training``."""
        metrics: dict[str, Any] = {"global_accuracy": None, "global_loss": None,
                                   "global_macro_f1": None, "global_auc": None}
        if client.has_global_model:
            score = self._score_global_model(client, server)
            metrics.update(global_accuracy=score.accuracy, global_loss=score.loss,
                           global_macro_f1=score.macro_f1, global_auc=score.auc)
        if after_training is None:  # each process scores the clients it owns
            after_training = {i: self.score_client(client, i, round_idx, server.download(i)[0])
                              for i in self.dist.owned(range(self.population.num_clients))}
        scores = self.dist.gather_by_client(after_training)  # ordered by client id
        self.last_client_scores = scores
        metrics.update(summarize_clients(scores))
        return metrics

    def _score_global_model(self, client: FederatedClient, server: ServerRule) -> Score:
        """The global model on the global test set, each process computing its share of the
        batches (:meth:`Distributed.share`) and every process scoring them all, gathered in
        order: the same score as one process, in 1 / world size of the time."""
        client.load_state_dict({**server.global_state, **self.population.initial_private})
        client.eval()
        x, y = self.global_test
        mine = self.dist.share(batch_count(len(y), self.batch_size))
        with self.fabric.autocast():
            outputs = batch_outputs(lambda xb: {"global": client.global_forward(xb)}, x,
                                    self.batch_size, mine)
        # gather_by_client merges any {int: value} in key order: here batch numbers
        return score_batches(self.dist.gather_by_client(outputs), y, self.batch_size)["global"]

    def per_client_rows(self) -> list[dict[str, Any]]:
        """Each client's last personalized accuracy, for ``per_client.json``."""
        return [{"client": i, "test_samples": s["personalized"].total,
                 "personalized_accuracy": s["personalized"].accuracy}
                for i, s in sorted(self.last_client_scores.items()) if "personalized" in s]
