"""Scoring clients and reducing per-client results to a round's metrics."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from fedlight.data.datamodule import iterate_batches


@dataclass
class Score:
    """Correct predictions, samples and summed cross-entropy of one model on one test set."""

    correct: float = 0.0
    total: int = 0
    loss_sum: float = 0.0

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else float("nan")

    @property
    def loss(self) -> float:
        return self.loss_sum / self.total if self.total else float("nan")


@torch.inference_mode()
def score_outputs(
    outputs_fn: Callable[[Tensor], Mapping[str, Tensor]], x: Tensor, y: Tensor, batch_size: int
) -> dict[str, Score]:
    """Score every named logits tensor that ``outputs_fn`` returns on ``(x, y)``.

    Sums are kept on the device and read once at the end (one host sync per test set).
    """
    sums: dict[str, list[Tensor]] = {}
    for xb, yb in iterate_batches(x, y, batch_size):
        for name, logits in outputs_fn(xb).items():
            logits = logits.float()
            correct = (logits.argmax(-1) == yb).sum()
            loss = F.cross_entropy(logits, yb, reduction="sum")
            if name in sums:
                sums[name][0] += correct
                sums[name][1] += loss
            else:
                sums[name] = [correct, loss]
    return {name: Score(float(c), len(y), float(loss)) for name, (c, loss) in sums.items()}


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
        metrics.update({
            f"{name}_accuracy": pooled,
            f"{name}_accuracy_mean": mean,
            f"{name}_accuracy_std": std,
            f"{name}_accuracy_cv": std / mean if mean > 0 else float("nan"),
            f"{name}_accuracy_worst10": worst,
            f"{name}_loss": loss,
        })
    return metrics
