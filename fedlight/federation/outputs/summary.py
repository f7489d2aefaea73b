"""A run's summary: best, last and recent-mean of every accuracy column (the best round chosen
on validation where the data has a validation split), and its accuracy curves."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: The column a best round is chosen on when data.val_fraction > 0.
VALIDATION_KEY = "val_personalized_accuracy"


SUMMARY_METRICS = ("personalized_accuracy", "global_accuracy")


#: ``mean_last_<metric>`` in the summary averages this many last evaluated rounds by default
#: (trainer.report_last): unlike the best round, it is not biased upward when each round
#: scores a different client subset
MEAN_LAST_ROUNDS = 10


def summarize(history: Sequence[Mapping[str, Any]], extra: Mapping[str, Any],
              last: int = MEAN_LAST_ROUNDS) -> dict[str, Any]:
    """Best, last and mean of the ``last`` last evaluated rounds (``report_last`` in the
    summary) of every accuracy column (None where the method has no such model);
    ``report_window`` is how many evaluated rounds the means averaged (fewer than ``last``
    in a run with fewer evaluations).

    A column with a validation counterpart (val_<column>, when data.val_fraction > 0) has
    its best round chosen on validation and reported on test: best_<column> is the test
    figure of the round where val_<column> peaked (best_selected_on: validation).
    Other columns keep the best over rounds.
    """
    summary: dict[str, Any] = {}
    window = 0
    accuracy_keys = [k for k in (history[0] if history else {}) if k.endswith("accuracy")]
    validated = False
    for key in dict.fromkeys([*SUMMARY_METRICS, *accuracy_keys]):
        values = [(r[key], r["round"]) for r in history if _finite(r.get(key))]
        chooser = f"val_{key}" if any(_finite(r.get(f"val_{key}")) for r in history) else key
        validated |= chooser != key
        rows = [r for r in history if _finite(r.get(chooser)) and _finite(r.get(key))]
        best = max(rows, key=lambda r: (r[chooser], r["round"]), default=None)
        summary[f"best_{key}"] = None if best is None else best[key]
        summary[f"best_{key}_round"] = None if best is None else best["round"]
        summary[f"last_{key}"] = values[-1][0] if values else None
        tail = [value for value, _ in values[-last:]]
        summary[f"mean_last_{key}"] = sum(tail) / len(tail) if tail else None
        window = max(window, len(tail))
    summary["best_selected_on"] = "validation" if validated else "test"
    summary["report_last"] = last
    summary["report_window"] = window
    summary.update(extra)
    return summary


def window_label(evaluations: int) -> str:
    """What a ``mean_last_*`` figure averaged: ``mean of the last 2 evaluations``."""
    return "mean of the last evaluation" if evaluations == 1 else (
        f"mean of the last {evaluations} evaluations")


def _finite(value: Any) -> bool:
    return isinstance(value, float) and math.isfinite(value)


def plot_curves(history: Sequence[Mapping[str, Any]], path: Path, title: str) -> None:
    """Accuracy curves of one run (every ``*_accuracy`` column against the round), in the
    style of every fedlight figure (:mod:`fedlight.plotting`)."""
    from fedlight.plotting import integer_axis, legend_outside, save_figure

    keys = [k for k in (history[0] if history else {}) if k.endswith("_accuracy")]

    def draw(axes: Any) -> None:
        ax = axes[0][0]
        for key in keys:
            points = [(r["round"], r[key]) for r in history if _finite(r.get(key))]
            if points:
                ax.plot(*zip(*points, strict=True), label=key.replace("_", " "))
        integer_axis(ax.xaxis)
        ax.set_xlabel("round")
        ax.set_ylabel("accuracy")
        ax.set_title(title)
        legend_outside(ax)

    save_figure(path, draw, (7.0, 3.6))


def best_on_validation(history: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the newest row of ``history`` ties or beats every earlier round on validation
    personalized accuracy (as the summary's best round is chosen)."""
    if not history or not _finite(history[-1].get(VALIDATION_KEY)):
        return False
    value = float(history[-1][VALIDATION_KEY])
    earlier = [r[VALIDATION_KEY] for r in history[:-1] if _finite(r.get(VALIDATION_KEY))]
    return bool(value >= max(earlier, default=-math.inf))


__all__ = ["MEAN_LAST_ROUNDS", "SUMMARY_METRICS", "VALIDATION_KEY", "best_on_validation",
           "plot_curves", "summarize", "window_label"]
