"""FedPick's feature selection per client: keep ratio, Fisher scores kept vs dropped (Fig. 7, 9).

Fig. 7 shows, per domain, the share of the features FedPick's mask selects (here: the
inference mask ``1[l >= 0]`` on the client's test samples). Fig. 9 compares the Fisher scores
(Eq. 5-7) of the task-relevant features ``z_p = z_g * m`` and the task-irrelevant ones
``z_u = z_g * (1 - m)``; each is the mean of the finite per-component scores on the client's
test samples (a component constant within every class scores ``inf`` and is left out).

Writes ``selection.csv`` (client, keep_ratio, fisher_relevant, fisher_irrelevant) and
``selection.png`` (the keep ratio per client; the two Fisher scores per client).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch import Tensor

from fedlight.analysis.features import check_masks, client_features, selection_masks
from fedlight.analysis.outputs import write_outputs
from fedlight.analysis.runs import RestoredRun
from fedlight.clients.fedpick import fisher_scores
from fedlight.plotting import legend_outside

RELEVANT, IRRELEVANT = "pfsm.relevant_head", "pfsm.irrelevant_head"


def finite_mean(values: Tensor) -> float:
    """The mean of the finite entries (NaN when there is none)."""
    finite = values[values.isfinite()]
    return float(finite.mean()) if len(finite) else math.nan


def client_selection(run: RestoredRun, client_id: int) -> dict[str, Any]:
    """A client's keep ratio and the mean Fisher scores of its ``z_p`` and ``z_u``."""
    model = run.load_client(client_id)
    x, y = run.datamodule.client_test(client_id)
    features = client_features(model, [RELEVANT, IRRELEVANT], x)
    return {"client": client_id,
            "keep_ratio": float(selection_masks(model, x).float().mean()),
            "fisher_relevant": finite_mean(fisher_scores(features[RELEVANT], y)),
            "fisher_irrelevant": finite_mean(fisher_scores(features[IRRELEVANT], y))}


def analyze(run: RestoredRun, out: Path, *, formats: Sequence[str] | None = None
            ) -> list[Path]:
    """FedPick's keep ratio and the Fisher scores of its selected and dropped features.

    Args:
        run: the finished run (FedPick with its PFSM).
        out: the folder to write into.
        formats: the figure's formats (default PNG; see :mod:`fedlight.plotting`).
    """
    check_masks(run.model, "selection")
    rows = [client_selection(run, i) for i in range(run.num_clients)]

    names = run.client_labels

    def draw(axes: Any) -> None:
        keep_ax, fisher_ax = axes[0]
        clients = [r["client"] for r in rows]
        keep_ax.bar(clients, [100 * r["keep_ratio"] for r in rows])
        keep_ax.set_xticks(clients, [names[c] for c in clients])
        keep_ax.set_xlabel("client")
        keep_ax.set_ylabel("features selected (%)")
        keep_ax.set_title("selection ratio")
        for offset, key in ((-0.2, "fisher_relevant"), (0.2, "fisher_irrelevant")):
            fisher_ax.bar([c + offset for c in clients], [r[key] for r in rows], 0.4,
                          label=key.replace("fisher_", "task-"))
        fisher_ax.set_xticks(clients, [names[c] for c in clients])
        fisher_ax.set_xlabel("client")
        fisher_ax.set_ylabel("mean Fisher score")
        fisher_ax.set_title("Fisher score of the selected / dropped features")
        legend_outside(fisher_ax)

    return write_outputs(out, {"selection.csv": rows},
                         {"selection.png": (draw, (11.0, 4.0), (1, 2))}, formats)


__all__ = ["analyze", "client_selection", "finite_mean"]
