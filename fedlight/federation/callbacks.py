"""Round callbacks: objects the trainer calls at the start and end of fit and of each round,
in the shape of Lightning's ``Callback`` (hooks take the trainer and the client module first).

A callback reads the run (``trainer.history``, ``trainer.run_dir`` ...), logs what it likes,
and can end the run after the round in progress with ``trainer.should_stop = True`` (setting
``trainer.stop_reason`` says why): the run then writes its last checkpoint and summary as a
finished run, and the stop is recorded, so ``--ckpt_path last`` does not train past it. Rank 0's
callbacks decide for every process of a run. Pass them as
``FederatedTrainer(callbacks=[EarlyStopping("val_personalized_accuracy")])`` or in YAML:

    trainer:
      callbacks:
        - class_path: EarlyStopping
          init_args: {monitor: val_personalized_accuracy, patience: 5}

A callback with state across rounds returns it from ``state_dict`` (saved in every
checkpoint under ``state_key``) and takes it back in ``load_state_dict`` on resume, so that an
interrupted run resumes as if it had not stopped.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import Any, Literal

from fedlight.core.errors import ConfigError


class RoundCallback:
    """Base class of round callbacks; every hook is optional.

    ``trainer`` is the FederatedTrainer, ``client`` the client module being trained and
    ``round_idx`` the 0-based round (its row's ``round`` is ``round_idx + 1``).
    """

    @property
    def state_key(self) -> str:
        """The key of this callback's state in a checkpoint (unique among a run's callbacks)."""
        return type(self).__qualname__

    def on_fit_start(self, trainer: Any, client: Any) -> None:
        """Before the first round (after a resumed run's state is loaded)."""

    def on_round_start(self, trainer: Any, client: Any, round_idx: int) -> None:
        """Before round ``round_idx`` trains."""

    def on_round_end(self, trainer: Any, client: Any, round_idx: int,
                     metrics: Mapping[str, Any]) -> None:
        """After round ``round_idx``, before its row is written: ``metrics`` is the round's row
        (evaluated rounds: accuracies, losses, ``round``), or its training columns (train_loss,
        seconds, bytes) on a round that was not evaluated."""

    def on_fit_end(self, trainer: Any, client: Any, summary: Mapping[str, Any]) -> None:
        """After the run's summary is written."""

    def state_dict(self) -> dict[str, Any]:
        """What this callback keeps across rounds (saved in the run's checkpoints)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Take back what :meth:`state_dict` returned (a resumed run)."""


class EarlyStopping(RoundCallback):
    """Stop the run when ``monitor`` has not improved for ``patience`` evaluations in a row.

    Args:
        monitor: a column of the run's metrics.csv, e.g. val_personalized_accuracy (needs
            data.val_fraction > 0; a test column would select on test data) or train_loss.
        patience: evaluations without improvement before the run stops.
        mode: max (higher is better, accuracies) or min (losses).
        min_delta: the least change that counts as an improvement.
    """

    def __init__(self, monitor: str, patience: int = 3, mode: Literal["min", "max"] = "max",
                 min_delta: float = 0.0) -> None:
        if mode not in ("min", "max"):
            raise ConfigError(f"EarlyStopping: mode must be 'min' or 'max', got {mode!r}")
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ConfigError(f"EarlyStopping: patience must be an integer >= 1, got "
                              f"{patience!r}")
        if not min_delta >= 0:
            raise ConfigError(f"EarlyStopping: min_delta must be >= 0, got {min_delta!r}")
        self.monitor, self.patience, self.mode = monitor, patience, mode
        self.min_delta = float(min_delta)
        self.best: float | None = None
        self.best_round: int | None = None
        self.wait = 0

    @property
    def state_key(self) -> str:
        return f"EarlyStopping{{monitor={self.monitor}, mode={self.mode}}}"

    def improved(self, value: float) -> bool:
        if self.best is None:
            return True
        if self.mode == "max":
            return value > self.best + self.min_delta
        return value < self.best - self.min_delta

    def on_round_end(self, trainer: Any, client: Any, round_idx: int,
                     metrics: Mapping[str, Any]) -> None:
        if "round" not in metrics:  # a round that was not evaluated
            return
        if self.monitor not in metrics:
            raise ConfigError(unknown_monitor(self.monitor, metrics))
        value = metrics[self.monitor]
        if isinstance(value, (int, float)) and math.isfinite(value) and self.improved(value):
            self.best, self.best_round, self.wait = float(value), int(metrics["round"]), 0
            return
        self.wait += 1
        if self.wait >= self.patience:
            trainer.should_stop = True
            best = "none" if self.best is None else f"{self.best:.4f} at round {self.best_round}"
            evaluations = "evaluation" if self.wait == 1 else "evaluations"
            trainer.stop_reason = (f"EarlyStopping: {self.monitor} did not improve for "
                                   f"{self.wait} {evaluations} (best {best})")

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "best_round": self.best_round, "wait": self.wait}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.best, self.best_round, self.wait = state["best"], state["best_round"], state["wait"]


def unknown_monitor(monitor: str, metrics: Mapping[str, Any]) -> str:
    """The one-line error for a monitored name that is not a metric of the run."""
    names = sorted(k for k, v in metrics.items() if isinstance(v, (int, float)) and k != "round")
    close = difflib.get_close_matches(monitor, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return (f"trainer.callbacks: EarlyStopping monitor {monitor!r} is not a metric of this run"
            f"{hint} (its metrics: {', '.join(names)})")


def check_callbacks(callbacks: Any) -> list[RoundCallback]:
    """``callbacks`` as a list, each a RoundCallback (a one-line ConfigError otherwise)."""
    listed = list(callbacks or [])
    for callback in listed:
        if not isinstance(callback, RoundCallback):
            raise ConfigError(f"trainer.callbacks: {type(callback).__name__} is not a "
                              "RoundCallback (fedlight.federation.callbacks); valid: "
                              "EarlyStopping or a RoundCallback subclass")
    keys = [c.state_key for c in listed]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ConfigError(f"trainer.callbacks: two callbacks share the state key {twice[0]!r}; "
                          "give each its own state_key")
    return listed


__all__ = ["EarlyStopping", "RoundCallback", "check_callbacks", "unknown_monitor"]
