"""The run folder: metrics CSV, summary, plots, checkpoints, TensorBoard and W&B loggers."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

from fedlight.core.errors import ConfigError

#: A run's loggers: csv is always on; tensorboard and wandb are added on request.
LoggerName = Literal["csv", "tensorboard", "wandb"]
LOGGERS: tuple[str, ...] = get_args(LoggerName)
HEADLINE_COLUMNS = (
    "round", "global_accuracy", "personalized_accuracy", "personalized_accuracy_std",
    "train_loss", "seconds",
)
SUMMARY_METRICS = ("personalized_accuracy", "global_accuracy")
#: ``mean_last_<metric>`` in the summary averages this many last evaluated rounds: unlike the
#: best round, it is not biased upward when each round scores a different client subset
MEAN_LAST_ROUNDS = 10


def normalize_loggers(logger: bool | str | Sequence[str]) -> list[str]:
    """``True`` / ``"csv"`` / ``["csv", "wandb"]`` -> validated list; CSV is always on."""
    if isinstance(logger, bool):
        names = ["csv"]
    elif isinstance(logger, str):
        names = ["csv", logger]
    else:
        names = ["csv", *logger]
    for name in names:
        if name not in LOGGERS:
            raise ConfigError(f"trainer.logger: unknown logger {name!r}; valid: "
                             f"{', '.join(LOGGERS)}")
    return list(dict.fromkeys(names))


def atomic_write_bytes(path: Path, write: Any) -> None:
    """Write through ``write(tmp_path)`` then rename, so readers never see half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class RunFolder:
    """Everything a run writes, under ``<root>/<name>/``."""

    def __init__(self, path: Path, loggers: Sequence[str], group: str, wandb_project: str) -> None:
        self.path = path
        self.logger_names = list(loggers)
        self.group = group
        self.wandb_project = wandb_project
        self.loggers: list[Any] = []
        self.columns: list[str] = []

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.csv"

    def create(self) -> None:
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)

    def remove(self) -> None:
        for logger in self.loggers:
            _finish(logger)
        self.loggers = []
        shutil.rmtree(self.path, ignore_errors=True)

    # ----------------------------------------------------------------- loggers
    def open_loggers(self, hyperparameters: Mapping[str, Any]) -> None:
        if "tensorboard" in self.logger_names:
            from lightning.fabric.loggers.tensorboard import TensorBoardLogger

            self.loggers.append(TensorBoardLogger(str(self.path), name="tensorboard", version=""))
        if "wandb" in self.logger_names:
            import wandb
            from lightning.pytorch.loggers import WandbLogger

            offline = (os.environ.get("WANDB_MODE") == "offline"
                       or not os.environ.get("WANDB_API_KEY"))
            # Offline, W&B's terminal lines (its run summary) only repeat what fedlight
            # prints; the run is in <run>/wandb/. The run is started here rather than by
            # WandbLogger, which passes W&B's deprecated anonymous setting (a warning).
            run = wandb.init(
                project=self.wandb_project, name=self.path.name, group=self.group,
                dir=str(self.path), mode="offline" if offline else None,
                settings=wandb.Settings(silent=True) if offline else None)
            # WandbLogger.log_metrics records the round as trainer/global_step: the x-axis.
            run.define_metric("trainer/global_step")
            run.define_metric("*", step_metric="trainer/global_step", step_sync=True)
            self.loggers.append(WandbLogger(experiment=run, save_dir=str(self.path)))
        for logger in self.loggers:
            logger.log_hyperparams(dict(hyperparameters))

    def log_images(self, images: Mapping[str, Path]) -> None:
        for logger in self.loggers:
            if hasattr(logger, "log_image"):
                for key, path in images.items():
                    if path.exists():
                        logger.log_image(key=key, images=[str(path)])

    def log_table(self, key: str, rows: list[dict[str, Any]]) -> None:
        for logger in self.loggers:
            if hasattr(logger, "log_table") and rows:
                columns = list(rows[0])
                data = [[r[c] for c in columns] for r in rows]
                logger.log_table(key=key, columns=columns, data=data)

    def close(self) -> None:
        for logger in self.loggers:
            _finish(logger)
        self.loggers = []

    # ----------------------------------------------------------------- metrics
    def write_history(self, history: Sequence[Mapping[str, Any]]) -> None:
        """Rewrite ``metrics.csv`` from the full history (used on resume)."""
        self.columns = []
        if self.metrics_path.exists():
            self.metrics_path.unlink()
        for row in history:
            self.append_row(row, to_loggers=False)

    def append_row(self, row: Mapping[str, Any], to_loggers: bool = True) -> None:
        new_columns = [k for k in row if k not in self.columns]
        if new_columns and self.columns:
            # A metric appeared for the first time: rewrite the file with the wider header.
            previous = self.read_rows()
            self.columns = [*self.columns, *new_columns]
            self._write_rows(previous)
        elif new_columns:
            self.columns = [*HEADLINE_COLUMNS, *[k for k in row if k not in HEADLINE_COLUMNS]]
            self._write_rows([])
        with self.metrics_path.open("a", newline="") as handle:
            csv.DictWriter(handle, self.columns).writerow(
                {k: _finite_or_none(row.get(k)) for k in self.columns}
            )
        if to_loggers:
            numbers = {k: v for k, v in row.items() if isinstance(v, (int, float)) and k != "round"}
            for logger in self.loggers:
                logger.log_metrics(numbers, step=int(row["round"]))

    def read_rows(self) -> list[dict[str, Any]]:
        if not self.metrics_path.exists():
            return []
        with self.metrics_path.open() as handle:
            return list(csv.DictReader(handle))

    def _write_rows(self, rows: Sequence[Mapping[str, Any]]) -> None:
        def write(tmp: Path) -> None:
            with tmp.open("w", newline="") as handle:
                writer = csv.DictWriter(handle, self.columns)
                writer.writeheader()
                for row in rows:
                    writer.writerow({k: row.get(k) for k in self.columns})

        atomic_write_bytes(self.metrics_path, write)

    def write_json(self, name: str, obj: Any) -> None:
        atomic_write_bytes(self.path / name, lambda tmp: tmp.write_text(
            json.dumps(obj, indent=1, default=_finite_or_none)))

    def write_text(self, name: str, text: str) -> None:
        atomic_write_bytes(self.path / name, lambda tmp: tmp.write_text(text))


def summarize(history: Sequence[Mapping[str, Any]], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Best, last and mean of the last MEAN_LAST_ROUNDS evaluated rounds of every accuracy
    column (None where the method has no such model).

    A column with a validation counterpart (val_<column>, when data.val_fraction > 0) has
    its best round chosen on validation and reported on test: best_<column> is the test
    figure of the round where val_<column> peaked (best_selected_on: validation).
    Other columns keep the best over rounds.
    """
    summary: dict[str, Any] = {}
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
        tail = [value for value, _ in values[-MEAN_LAST_ROUNDS:]]
        summary[f"mean_last_{key}"] = sum(tail) / len(tail) if tail else None
    summary["best_selected_on"] = "validation" if validated else "test"
    summary.update(extra)
    return summary


def _finite(value: Any) -> bool:
    return isinstance(value, float) and math.isfinite(value)


def plot_curves(history: Sequence[Mapping[str, Any]], path: Path, title: str) -> None:
    """Accuracy curves of one run (every ``*_accuracy`` column against the round)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in (history[0] if history else {}) if k.endswith("_accuracy")]
    fig, ax = plt.subplots(figsize=(6, 4))
    for key in keys:
        points = [(r["round"], r[key]) for r in history
                  if isinstance(r.get(key), float) and math.isfinite(r[key])]
        if points:
            ax.plot(*zip(*points, strict=True), label=key)
    ax.set_xlabel("round")
    ax.set_ylabel("accuracy")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if keys:
        ax.legend(fontsize=8)
    fig.tight_layout()
    atomic_write_bytes(path, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    plt.close(fig)


def _finish(logger: Any) -> None:
    if hasattr(logger, "finalize"):
        logger.finalize("success")
    if type(logger).__name__ == "WandbLogger":  # its run was started by log_hyperparams
        logger.experiment.finish()
