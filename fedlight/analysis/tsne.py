"""t-SNE of features, coloured by class and by client (GPFL Fig. 2; FedPick Fig. 8).

GPFL Fig. 2 embeds the feature vectors each client's personalized model extracts from its own
test samples, all clients in one embedding, coloured by class with the client id marked; FedPick
Fig. 8 embeds its task-relevant and task-irrelevant features (``--features
[pfsm.relevant_head,pfsm.irrelevant_head]``). Each client's test samples (at most
``samples_per_client``, drawn with ``seed``) go through its personalized model and, where the
method has one, through the global model; each (model, features) pair is one embedding
(scikit-learn's ``TSNE``, PCA initialisation), drawn twice: by class and by client.

Writes ``tsne.csv`` (model, features, client, sample, label, tsne_x, tsne_y: one row per point)
and ``tsne.png`` (one row of two panels per embedding; clients named by their domain where the
data has domains).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fedlight.analysis.features import HEAD_INPUT, client_features
from fedlight.analysis.outputs import write_outputs
from fedlight.analysis.runs import RestoredRun
from fedlight.core.errors import ConfigError
from fedlight.plotting import scatter_by


def embed(features: Tensor, perplexity: float, seed: int) -> np.ndarray:
    """2-D t-SNE embedding of ``features`` ``(N, d)`` (the perplexity is capped below N, as
    scikit-learn requires)."""
    from sklearn.manifold import TSNE

    count = len(features)
    if count < 2:
        raise ConfigError(f"t-SNE needs at least 2 samples, got {count}")
    capped = min(float(perplexity), max(1.0, (count - 1) / 3))
    tsne = TSNE(n_components=2, perplexity=capped, init="pca", random_state=seed)
    return np.asarray(tsne.fit_transform(features.double().numpy()))


def test_samples(run: RestoredRun, client_id: int, limit: int, seed: int
                 ) -> tuple[Tensor, Tensor, Tensor]:
    """At most ``limit`` of a client's test samples, drawn with ``seed``: ``(x, y, index)``."""
    x, y = run.datamodule.client_test(client_id)
    generator = torch.Generator().manual_seed(seed + client_id)
    index = torch.randperm(len(y), generator=generator)[:limit].sort().values
    return x[index], y[index], index


def collect(run: RestoredRun, features: Sequence[str], samples_per_client: int, seed: int
            ) -> list[dict[str, Any]]:
    """Per (model, features) view: the clients' feature rows, labels and sample ids."""
    views: dict[tuple[str, str], dict[str, list[Tensor]]] = {}
    for client_id in range(run.num_clients):
        x, y, index = test_samples(run, client_id, samples_per_client, seed)
        per_model = {"personalized": client_features(run.load_client(client_id), features, x)}
        global_model = run.load_global()
        if global_model is not None:
            per_model["global"] = client_features(global_model, features, x,
                                                  global_model.global_forward)
        meta = torch.stack([torch.full_like(y, client_id), index, y], 1)
        for kind, found in per_model.items():
            for name, z in found.items():
                view = views.setdefault((kind, name), {"z": [], "meta": []})
                view["z"].append(z)
                view["meta"].append(meta)
    return [{"model": kind, "features": name, "z": torch.cat(parts["z"]),
             "meta": torch.cat(parts["meta"])} for (kind, name), parts in views.items()]


def analyze(run: RestoredRun, out: Path, *, features: tuple[str, ...] = (HEAD_INPUT,),
            samples_per_client: int = 200, perplexity: float = 30.0, seed: int = 0,
            formats: Sequence[str] | None = None) -> list[Path]:
    """t-SNE of each client's test features, personalized and global model.

    Args:
        run: the finished run.
        out: the folder to write into.
        features: the modules whose input is embedded (default ``model.head``: what the head
            reads; FedPick Fig. 8: ``[pfsm.relevant_head, pfsm.irrelevant_head]``).
        samples_per_client: at most this many test samples per client.
        perplexity: t-SNE perplexity (capped below the number of points).
        seed: draws the samples and seeds t-SNE.
        formats: the figure's formats (default PNG; see :mod:`fedlight.plotting`).
    """
    if samples_per_client < 1:
        raise ConfigError(f"samples_per_client must be at least 1, got {samples_per_client}")
    views = collect(run, features, samples_per_client, seed)
    rows: list[dict[str, Any]] = []
    for view in views:
        view["xy"] = embed(view["z"], perplexity, seed)
        for (client, sample, label), (tx, ty) in zip(view["meta"].tolist(), view["xy"],
                                                     strict=True):
            rows.append({"model": view["model"], "features": view["features"], "client": client,
                         "sample": sample, "label": label, "tsne_x": float(tx),
                         "tsne_y": float(ty)})

    clients = dict(enumerate(run.client_labels))

    def draw(axes: Any) -> None:
        for row_axes, view in zip(axes, views, strict=True):
            meta = view["meta"].tolist()
            labels = [label for _, _, label in meta]
            for ax, categories, names, what in (
                    (row_axes[0], labels, {c: str(c) for c in labels}, "class"),
                    (row_axes[1], [client for client, _, _ in meta], clients, "client")):
                scatter_by(ax, view["xy"], categories, names, what)
                ax.set_title(f"{view['model']} model, input of {view['features']}: by {what}")
                ax.set_xticks([])
                ax.set_yticks([])
                ax.grid(False)

    figure = (draw, (11.0, 4.6 * len(views)), (len(views), 2))
    return write_outputs(out, {"tsne.csv": rows}, {"tsne.png": figure}, formats)


__all__ = ["analyze", "embed", "test_samples"]
