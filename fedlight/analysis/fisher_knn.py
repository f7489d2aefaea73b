"""10-NN accuracy on the top Fisher-score features against the share kept (FedPick Fig. 1).

FedPick's vanilla feature selection (Sec. IV-2, Fig. 1 and 3): with a trained federated model
frozen, each client ranks the components of its features by their Fisher score on its
training data (Eq. 5-7, :func:`fedlight.clients.fedpick.fisher_scores`), keeps the top share
(10 % to 100 %) and probes the kept features with a k-nearest-neighbour classifier (K = 10)
fitted on its training features and scored on its test features. Masking ``z * m`` and
keeping the selected components give the same Euclidean neighbours, so the probe reads the
kept columns. The paper's curve rises above the all-features accuracy at a middle share.

Writes ``fisher_knn.csv`` (client, ratio, features_kept, accuracy; ``client`` = ``mean`` rows
average the clients) and ``fisher_knn.png`` (accuracy against the share kept, per client and
their mean).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from fedlight.analysis.features import HEAD_INPUT, client_features
from fedlight.analysis.outputs import write_outputs
from fedlight.analysis.runs import RestoredRun
from fedlight.clients.fedpick import fisher_scores
from fedlight.core.errors import ConfigError
from fedlight.plotting import legend_outside

MODELS = ("personalized", "global")
RATIOS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def fisher_ranking(features: Tensor, labels: Tensor) -> Tensor:
    """Feature indices by descending Fisher score (ties in index order)."""
    return torch.argsort(fisher_scores(features, labels), descending=True, stable=True)


def kept_count(ratio: float, dim: int) -> int:
    """How many of ``dim`` components a share ``ratio`` keeps (at least one)."""
    return max(1, round(ratio * dim))


def knn_accuracy(train: tuple[Tensor, Tensor], test: tuple[Tensor, Tensor],
                 neighbors: int = 10) -> float:
    """Test accuracy of a k-NN classifier (scikit-learn, Euclidean) fitted on ``train``."""
    from sklearn.neighbors import KNeighborsClassifier

    (train_z, train_y), (test_z, test_y) = train, test
    knn = KNeighborsClassifier(n_neighbors=min(neighbors, len(train_y)))
    knn.fit(train_z.double().numpy(), train_y.numpy())
    return float(knn.score(test_z.double().numpy(), test_y.numpy()))


def probe_curve(train: tuple[Tensor, Tensor], test: tuple[Tensor, Tensor],
                ratios: Sequence[float] = RATIOS, neighbors: int = 10
                ) -> list[dict[str, float]]:
    """``ratio``, ``features_kept``, ``accuracy`` of the k-NN probe on the top-Fisher share
    ``ratio`` of the features, ranked on ``train``."""
    order = fisher_ranking(*train)
    rows = []
    for ratio in ratios:
        kept = order[:kept_count(ratio, len(order))]
        accuracy = knn_accuracy((train[0][:, kept], train[1]), (test[0][:, kept], test[1]),
                                neighbors)
        rows.append({"ratio": ratio, "features_kept": len(kept), "accuracy": accuracy})
    return rows


def check_options(ratios: Sequence[float], neighbors: int, model: str) -> None:
    bad = [r for r in ratios if not 0 < r <= 1]
    if bad or not ratios:
        raise ConfigError(f"ratios must be shares in (0, 1], got {list(ratios)}")
    if neighbors < 1:
        raise ConfigError(f"neighbors must be at least 1, got {neighbors}")
    if model not in MODELS:
        raise ConfigError(f"unknown model {model!r}; valid: {', '.join(MODELS)}")


def client_split_features(run: RestoredRun, client_id: int, feature: str, model: str
                          ) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """A client's ``(train, test)`` features and labels from its personalized model or the
    global model."""
    if model == "global":
        module = run.load_global()
        if module is None:
            raise ConfigError(f"{run.method} has no global model (part of it is private); "
                              "use model personalized")
        predict = module.global_forward
    else:
        module, predict = run.load_client(client_id), None
    splits = []
    for x, y in (run.datamodule.client_train(client_id), run.datamodule.client_test(client_id)):
        splits.append((client_features(module, [feature], x, predict)[feature], y))
    return splits[0], splits[1]


def analyze(run: RestoredRun, out: Path, *, features: str = HEAD_INPUT,
            ratios: tuple[float, ...] = RATIOS, neighbors: int = 10,
            model: str = "personalized", formats: Sequence[str] | None = None) -> list[Path]:
    """FedPick's Fisher-score feature selection probed with k-NN, per client.

    Args:
        run: the finished run.
        out: the folder to write into.
        features: the module whose input is the feature vector (default ``model.head``).
        ratios: shares of the features kept (paper: 0.1 to 1.0).
        neighbors: K of the k-NN probe (paper: 10).
        model: ``personalized`` (each client's model; FedBN's in the paper) or ``global``.
        formats: the figure's formats (default PNG; see :mod:`fedlight.plotting`).
    """
    check_options(ratios, neighbors, model)
    rows: list[dict[str, Any]] = []
    for client_id in range(run.num_clients):
        train, test = client_split_features(run, client_id, features, model)
        rows += [{"client": client_id, **row}
                 for row in probe_curve(train, test, ratios, neighbors)]
    means = [{"client": "mean", "ratio": ratio,
              "features_kept": rows[i]["features_kept"],
              "accuracy": sum(r["accuracy"] for r in rows[i::len(ratios)]) / run.num_clients}
             for i, ratio in enumerate(ratios)]

    names = run.client_labels

    def draw(axes: Any) -> None:
        ax = axes[0][0]
        for client_id in range(run.num_clients):
            mine = rows[client_id * len(ratios):(client_id + 1) * len(ratios)]
            ax.plot([100 * r["ratio"] for r in mine], [100 * r["accuracy"] for r in mine],
                    marker="o", ms=3, lw=1, alpha=0.7, label=names[client_id])
        ax.plot([100 * r["ratio"] for r in means], [100 * r["accuracy"] for r in means],
                color="black", lw=2, marker="s", ms=4, label="mean")
        ax.set_xlabel("features kept, top Fisher score (%)")
        ax.set_ylabel(f"{neighbors}-NN test accuracy (%)")
        ax.set_title(f"{run.method}: input of {features}, {model} model")
        legend_outside(ax, title="client")

    return write_outputs(out, {"fisher_knn.csv": rows + means},
                         {"fisher_knn.png": (draw, (6.5, 4.2), (1, 1))}, formats)


__all__ = ["RATIOS", "analyze", "fisher_ranking", "kept_count", "knn_accuracy", "probe_curve"]
