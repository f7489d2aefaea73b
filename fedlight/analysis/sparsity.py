"""Feature sparsity over rounds and before / after aggregation (FedPick Fig. 2).

FedPick Sec. IV-1 measures feature redundancy with the sparsity ratio ``S(z, eps)`` (Eq. 3-4,
:func:`fedlight.clients.fedpick.feature_sparsity_ratio`, ``eps = 1e-5``): the share of the
components of the L2-normalized feature that are at most ``eps``. Fig. 2 (a) follows it over
training per domain; Fig. 2 (b) compares the features of the clients' models before the
server aggregates them (after local training) with those of the aggregated model.

* Over rounds (a), from ``metrics.csv``: the columns of the :class:`FeatureSparsity` probe
  (``feature_sparsity`` and ``feature_sparsity/client_<k>``; add it to the run with
  ``trainer.probes: [{class_path: fedlight.analysis.sparsity.FeatureSparsity}]``) and, for
  FedPick, its mask sparsity ``1 - train/keep_ratio_clean`` (the share of features its
  noise-free mask drops during local training).
* Before / after aggregation (b), from the checkpoint: every client trains the round after
  the checkpoint's as the run would (its download, private state, seed and batches); its
  features on its test data are measured then ("before") and again after FedAvg's
  aggregation (the weighted mean of the uploads) with its new private state ("after"). For
  FedPick the mask sparsity (share of features dropped by ``1[l >= 0]``) is measured at both
  points too: its mask is private, the encoder it reads is aggregated.

Writes ``sparsity.csv`` (client, feature_sparsity_before, feature_sparsity_after and, for
FedPick, mask_sparsity_before, mask_sparsity_after), ``sparsity_rounds.csv`` (round and each
per-round series, where the run logged one) and ``sparsity.png``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch import nn

from fedlight.analysis.features import (
    HEAD_INPUT,
    client_features,
    feature_module,
    has_masks,
    selection_masks,
)
from fedlight.analysis.outputs import write_outputs
from fedlight.analysis.runs import RestoredRun
from fedlight.clients.fedpick import feature_sparsity_ratio
from fedlight.core.errors import ConfigError
from fedlight.federation.probes import Probe
from fedlight.plotting import integer_axis, legend_outside

PROBE_COLUMN = "feature_sparsity"
KEEP_COLUMN = "train/keep_ratio_clean"


class FeatureSparsity(Probe):
    """Logs the feature sparsity ratio (FedPick Eq. 3-4) after each evaluated round.

    Each client's model as it is scored (the aggregated shared state and its private state)
    reads its test data; the columns are ``feature_sparsity`` (the mean over clients) and
    ``feature_sparsity/client_<k>``. YAML::

        trainer:
          probes:
            - class_path: fedlight.analysis.sparsity.FeatureSparsity

    Args:
        features: the module whose input is the feature (default ``model.head``).
        eps: the threshold of a near-zero component (paper: 1e-5).
        every: measure every this many rounds (on evaluated rounds).
    """

    def __init__(self, features: str = HEAD_INPUT, eps: float = 1e-5, every: int = 1) -> None:
        if every < 1 or not eps >= 0:
            raise ConfigError(f"every must be at least 1 and eps >= 0, got {every}, {eps}")
        self.features, self.eps, self.every = features, eps, every

    def setup(self, trainer: Any) -> None:
        """Refuse a module the client does not have before the first round."""
        feature_module(trainer.client, self.features)

    def on_round_end(self, trainer: Any, round_idx: int) -> dict[str, float]:
        if (round_idx + 1) % self.every:
            return {}
        values = {}
        for client_id in trainer.dist.owned(range(trainer.num_clients)):
            client = trainer.load_client(client_id, round_idx + 1).eval()
            x = trainer.population.test_data[client_id][0]
            values[client_id] = sparsity(client, self.features, x, self.eps)
        values = trainer.dist.gather_by_client(values)
        columns = {f"{PROBE_COLUMN}/client_{k}": v for k, v in values.items()}
        return {PROBE_COLUMN: sum(values.values()) / max(len(values), 1), **columns}


def sparsity(model: nn.Module, features: str, x: Any, eps: float = 1e-5) -> float:
    """``S(z, eps)`` of the features ``model`` computes for ``x`` (mean over samples)."""
    return feature_sparsity_ratio(client_features(model, [features], x)[features], eps)


def mask_sparsity(model: nn.Module, x: Any) -> float:
    """The share of features FedPick's inference mask drops on ``x``."""
    return 1.0 - float(selection_masks(model, x).float().mean())


def round_series(run: RestoredRun) -> list[dict[str, float]]:
    """The per-round sparsity values ``metrics.csv`` holds: the probe's columns and FedPick's
    mask sparsity; no rows when it holds none."""
    rows = []
    for row in run.metrics():
        values = {k: v for k, v in row.items() if k.startswith(PROBE_COLUMN)}
        if KEEP_COLUMN in row:
            values["mask_sparsity"] = 1.0 - row[KEEP_COLUMN]
        if any(math.isfinite(v) for v in values.values()):
            rows.append({"round": int(row["round"]), **values})
    return rows


def around_aggregation(run: RestoredRun, features: str, eps: float) -> list[dict[str, Any]]:
    """Per client, the sparsity after its local training and after the aggregation."""
    masks = has_masks(run.model)
    uploads, privates, rows = {}, {}, []
    for client_id in range(run.num_clients):
        model, uploads[client_id] = run.train_locally(client_id)
        privates[client_id] = model.client_state()
        x = run.datamodule.client_test(client_id)[0]
        rows.append({"client": client_id,
                     "feature_sparsity_before": sparsity(model, features, x, eps)})
        if masks:
            rows[-1]["mask_sparsity_before"] = mask_sparsity(model, x)
    aggregated = run.weighted_mean(uploads)
    for client_id, row in enumerate(rows):
        model = run.load_client(client_id, aggregated, privates[client_id])
        x = run.datamodule.client_test(client_id)[0]
        row["feature_sparsity_after"] = sparsity(model, features, x, eps)
        if masks:
            row["mask_sparsity_after"] = mask_sparsity(model, x)
    order = ["client", "feature_sparsity_before", "feature_sparsity_after",
             *(["mask_sparsity_before", "mask_sparsity_after"] if masks else [])]
    return [{key: row[key] for key in order} for row in rows]


def analyze(run: RestoredRun, out: Path, *, features: str = HEAD_INPUT, eps: float = 1e-5,
            formats: Sequence[str] | None = None) -> list[Path]:
    """Feature sparsity over rounds (where logged) and before / after aggregation.

    Args:
        run: the finished run.
        out: the folder to write into.
        features: the module whose input is the feature (default ``model.head``).
        eps: the threshold of a near-zero component (paper: 1e-5).
        formats: the figure's formats (default PNG; see :mod:`fedlight.plotting`).
    """
    if not eps >= 0:
        raise ConfigError(f"eps must be >= 0, got {eps}")
    series = round_series(run)
    clients = around_aggregation(run, features, eps)
    tables = {"sparsity.csv": clients, **({"sparsity_rounds.csv": series} if series else {})}

    names = run.client_labels

    def draw(axes: Any) -> None:
        rounds_ax, bars_ax = axes[0]
        for key in (series[0] if series else {}):
            if key != "round":
                rounds_ax.plot([r["round"] for r in series], [r[key] for r in series],
                               lw=2 if key in (PROBE_COLUMN, "mask_sparsity") else 1,
                               label=series_label(key, names))
        if not series:
            rounds_ax.text(0.5, 0.5, "no per-round sparsity in metrics.csv\n(add the "
                           "FeatureSparsity probe)", ha="center", va="center")
        integer_axis(rounds_ax.xaxis)
        rounds_ax.set_xlabel("round")
        rounds_ax.set_ylabel("sparsity ratio")
        rounds_ax.set_title("(a) over rounds")
        legend_outside(rounds_ax)
        kinds = [k for k in clients[0] if k != "client"]
        width = 0.8 / len(kinds)
        for index, kind in enumerate(kinds):
            bars_ax.bar([c["client"] + index * width for c in clients],
                        [c[kind] for c in clients], width, label=kind.replace("_", " "))
        bars_ax.set_xticks([c["client"] + 0.4 - width / 2 for c in clients],
                           [names[c["client"]] for c in clients])
        bars_ax.set_xlabel("client")
        bars_ax.set_ylabel("sparsity ratio")
        bars_ax.set_title(f"(b) before / after aggregation, input of {features}")
        legend_outside(bars_ax)

    return write_outputs(out, tables, {"sparsity.png": (draw, (12.0, 4.2), (1, 2))}, formats)


def series_label(column: str, names: list[str]) -> str:
    """A per-round series as a legend names it: ``feature_sparsity/client_3`` -> ``client
    3`` (or its domain), the mean ``feature_sparsity`` -> ``mean over clients``."""
    if column == PROBE_COLUMN:
        return "mean over clients"
    if column.startswith(f"{PROBE_COLUMN}/client_"):
        client = int(column.rsplit("_", 1)[1])
        return names[client] if names[client] != str(client) else f"client {client}"
    return column.replace("_", " ")


__all__ = ["FeatureSparsity", "analyze", "around_aggregation", "mask_sparsity", "round_series",
           "series_label", "sparsity"]
