"""Overlap of the clients' important features (FedPick Fig. 10).

FedPick Sec. VI (Fig. 10): a domain's important features are the top 50 % of the features its
mask selects most often on its test data; the overlap of two domains is the size of the
intersection of their important sets over the size of their union (Jaccard). ``by: mask``
(default) ranks each client's features by how often FedPick's inference mask ``1[l >= 0]``
keeps them on its test samples; ``by: fisher`` ranks them by their Fisher score on its
training data (FedPick Eq. 5-7), for any method.

Writes ``overlap.csv`` (the client x client matrix: a ``client`` column, then one column per
client) and ``overlap.png`` (its heatmap).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from fedlight.analysis.features import HEAD_INPUT, check_masks, client_features, selection_masks
from fedlight.analysis.fisher_knn import kept_count
from fedlight.analysis.outputs import write_outputs
from fedlight.analysis.runs import RestoredRun
from fedlight.clients.fedpick import fisher_scores
from fedlight.core.errors import ConfigError

RANKINGS = ("mask", "fisher")


def top_features(importance: Tensor, share: float) -> set[int]:
    """The indices of the top ``share`` of ``importance`` (ties in index order)."""
    order = torch.argsort(importance, descending=True, stable=True)
    return set(order[:kept_count(share, len(order))].tolist())


def jaccard(a: set[int], b: set[int]) -> float:
    """``|a & b| / |a | b|`` (1 for two empty sets)."""
    union = a | b
    return len(a & b) / len(union) if union else 1.0


def overlap_matrix(important: list[set[int]]) -> list[list[float]]:
    """The pairwise Jaccard overlaps of the clients' important feature sets."""
    return [[jaccard(a, b) for b in important] for a in important]


def importance(run: RestoredRun, client_id: int, by: str, features: str) -> Tensor:
    """A client's feature importance: the mask's selection frequency on its test data, or the
    Fisher score on its training data."""
    model = run.load_client(client_id)
    if by == "mask":
        return selection_masks(model, run.datamodule.client_test(client_id)[0]).float().mean(0)
    x, y = run.datamodule.client_train(client_id)
    return fisher_scores(client_features(model, [features], x)[features], y)


def analyze(run: RestoredRun, out: Path, *, by: str = "mask", top: float = 0.5,
            features: str = HEAD_INPUT, formats: Sequence[str] | None = None) -> list[Path]:
    """Pairwise overlap of the clients' important features.

    Args:
        run: the finished run.
        out: the folder to write into.
        by: ``mask`` (FedPick's selection frequency, the paper's) or ``fisher`` (the Fisher
            score of the features, any method).
        top: the share of the features that counts as important (paper: 0.5).
        features: with ``by: fisher``, the module whose input is the feature vector.
        formats: the figure's formats (default PNG; see :mod:`fedlight.plotting`).
    """
    if by not in RANKINGS:
        raise ConfigError(f"unknown by {by!r}; valid: {', '.join(RANKINGS)}")
    if not 0 < top <= 1:
        raise ConfigError(f"top must be a share in (0, 1], got {top}")
    if by == "mask":
        check_masks(run.model, "overlap by mask")
    important = [top_features(importance(run, i, by, features), top)
                 for i in range(run.num_clients)]
    matrix = overlap_matrix(important)
    clients = [str(i) for i in range(run.num_clients)]
    rows = [{"client": i, **dict(zip(clients, row, strict=True))} for i, row in enumerate(matrix)]
    names = run.client_labels

    def draw(axes: Any) -> None:
        ax = axes[0][0]
        image = ax.imshow(matrix, vmin=0, vmax=1, cmap="viridis")
        ax.set_xticks(range(len(clients)), names, rotation=90 if len(max(names, key=len)) > 3
                      else 0)
        ax.set_yticks(range(len(clients)), names)
        ax.grid(False)
        ax.set_xlabel("client")
        ax.set_ylabel("client")
        if len(clients) <= 12:
            for i, row in enumerate(matrix):
                for j, value in enumerate(row):
                    ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                            color="black" if value > 0.6 else "white")
        ax.figure.colorbar(image, ax=ax, label="overlap (intersection / union)")
        ax.set_title(f"{run.method}: top {100 * top:g} % features by {by}")

    size = max(4.0, 0.5 * len(clients) + 2.5)
    return write_outputs(out, {"overlap.csv": rows},
                         {"overlap.png": (draw, (size + 1.0, size), (1, 1))}, formats)


__all__ = ["RANKINGS", "analyze", "jaccard", "overlap_matrix", "top_features"]
