"""Scoring models on test sets, and reducing per-client scores to a round's metrics.

Personalized accuracy: each client's model (its shared state as the server would send it, its
private state) on its local test split, scored by the client runtime (runtime.py), pooled and
spread across clients here. Global accuracy: the global model on the global test set, where the
method has one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from lightning.fabric import Fabric
from torch import Tensor
from torchmetrics.functional.classification import binary_auroc, multiclass_stat_scores

from fedlight.clients.base import FederatedClient
from fedlight.core.messages import Score, macro_f1
from fedlight.core.rules import ServerRule
from fedlight.federation.processes.collectives import Distributed

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


@torch.inference_mode()
def stacked_batch_outputs(outputs_fn: Callable[[Tensor], Outputs], xs: Sequence[Tensor],
                          batch_size: int) -> list[dict[int, dict[str, Tensor]]]:
    """:func:`batch_outputs` of K models at once: ``outputs_fn`` maps inputs ``[K, b, ...]``
    (row k from ``xs[k]``) to each name's logits ``[K, b, C]`` (row k from model k, e.g. a
    vmapped ``eval_outputs``). Batch number n of every client is its rows ``n * batch_size``
    onward, as :func:`batch_outputs` cuts them (an empty split is one empty batch, as
    ``torch.split`` gives it); a client with fewer samples is padded with zeros, whose outputs
    are dropped. Returns each client's batches by number."""
    results: list[dict[int, dict[str, Tensor]]] = [{} for _ in xs]
    batches = [len(torch.split(x, batch_size)) for x in xs]
    for number in range(max(batches, default=0)):
        start = number * batch_size
        lengths = [max(0, min(batch_size, len(x) - start)) for x in xs]
        inputs = xs[0].new_zeros((len(xs), max(lengths), *xs[0].shape[1:]))
        for k, (x, length) in enumerate(zip(xs, lengths, strict=True)):
            inputs[k, :length] = x[start:start + length]
        outputs = outputs_fn(inputs)
        for k, length in enumerate(lengths):
            if number < batches[k]:
                results[k][number] = {name: logits[k, :length].float()
                                      for name, logits in outputs.items()}
    return results


def batch_count(samples: int, batch_size: int) -> int:
    """How many batches :func:`batch_outputs` cuts ``samples`` into."""
    return -(-samples // batch_size)


def score_batches(outputs: Mapping[int, Outputs], y: Tensor, batch_size: int
                  ) -> dict[str, Score]:
    """Score the logits of every batch of ``y`` (:func:`batch_outputs`, all batches).

    Per-class stat scores (torchmetrics) and the loss are summed on the device; the AUC
    (torchmetrics' binary AUROC over the flattened one-vs-rest probabilities) needs every
    sample's probabilities, kept on the device. Everything is read at once at the end (one
    host sync per test set; :func:`read_scores` reads several clients' at once).
    """
    return read_scores([device_scores(outputs, y, batch_size)], [len(y)])[0]


def device_scores(outputs: Mapping[int, Outputs], y: Tensor, batch_size: int
                  ) -> dict[str, Tensor]:
    """:func:`score_batches`'s sums, on the device, unread: per name, the loss, the AUC and
    the per-class (true positive, false positive, false negative) counts in one tensor."""
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
    return {name: torch.cat([loss.double().reshape(1), _auc(probabilities[name], y),
                             stats[:, [0, 1, 3]].double().flatten()])
            for name, (stats, loss) in sums.items()}


def read_scores(packed: Sequence[Mapping[str, Tensor]],
                samples: Sequence[int]) -> list[dict[str, Score]]:
    """The :class:`Score` of each :func:`device_scores` result (of a test set of
    ``samples[i]`` samples), read from the device in one transfer for all of them."""
    parts = [part for scores in packed for part in scores.values()]
    values = torch.cat(parts).tolist() if parts else []
    results: list[dict[str, Score]] = []
    start = 0
    for scores, count in zip(packed, samples, strict=True):
        results.append({})
        for name, part in scores.items():
            loss, auc, *flat = values[start:start + len(part)]
            start += len(part)
            counts = [(int(flat[i]), int(flat[i + 1]), int(flat[i + 2]))
                      for i in range(0, len(flat), 3)]
            results[-1][name] = Score(sum(c[0] for c in counts), count, loss, counts, auc)
    return results


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
    """Scores the global model (its share of the batches on each process) and pools every
    client's scores into a round's metrics.

    Args:
        fabric: the run's Fabric (autocast for scoring).
        dist: this process's place in the run.
        load_global: puts a global shared state into the live module (the client runtime's
            :meth:`~fedlight.federation.runtime.ClientRuntime.load_global`: with the clients'
            initial private state).
        global_test: ``(x, y)`` of the global test set on the device.
        batch_size: evaluation batch size.
    """

    def __init__(self, fabric: Fabric, dist: Distributed,
                 load_global: Callable[[Mapping[str, Tensor]], FederatedClient],
                 global_test: tuple[Tensor, Tensor], batch_size: int) -> None:
        self.fabric, self.dist, self.load_global = fabric, dist, load_global
        self.global_test = global_test
        self.batch_size = batch_size
        self.last_client_scores: dict[int, dict[str, Score]] = {}

    def evaluate(self, client: FederatedClient, rule: ServerRule, round_idx: int,
                 client_scores: Mapping[int, dict[str, Score]]) -> dict[str, Any]:
        """Global accuracy and personalized accuracy with its spread across clients, from the
        scores of the clients this process served (``client_scores``, gathered here)."""
        metrics: dict[str, Any] = {"global_accuracy": None, "global_loss": None,
                                   "global_macro_f1": None, "global_auc": None}
        if client.has_global_model:
            score = self._score_global_model(client, rule)
            metrics.update(global_accuracy=score.accuracy, global_loss=score.loss,
                           global_macro_f1=score.macro_f1, global_auc=score.auc)
        scores = self.dist.gather_by_client(client_scores)  # ordered by client id
        self.last_client_scores = scores
        metrics.update(summarize_clients(scores))
        return metrics

    def _score_global_model(self, client: FederatedClient, rule: ServerRule) -> Score:
        """The global model on the global test set, each process computing its share of the
        batches (:meth:`Distributed.share`) and every process scoring them all, gathered in
        order: the same score as one process, in 1 / world size of the time."""
        self.load_global(rule.global_state).eval()
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


__all__ = ["Evaluator", "batch_count", "batch_outputs", "device_scores", "read_scores",
           "score_batches", "score_outputs", "stacked_batch_outputs", "summarize_clients"]
