"""A run's loggers beside its CSV: TensorBoard and W&B (offline unless the user has a key)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

#: A run's loggers: csv is always on; tensorboard and wandb are added on request.
LoggerName = Literal["csv", "tensorboard", "wandb"]
LOGGERS: tuple[str, ...] = get_args(LoggerName)


class Loggers:
    """The TensorBoard and W&B loggers of one run folder (the CSV is the folder's own).

    Args:
        names: the run's logger names (``csv`` needs nothing here).
        path: the run folder.
        group: the W&B group of the run.
        wandb_project: the W&B project.
    """

    def __init__(self, names: Sequence[str], path: Path, group: str, wandb_project: str) -> None:
        self.names, self.path = list(names), path
        self.group, self.wandb_project = group, wandb_project
        self.opened: list[Any] = []

    def open(self, hyperparameters: Mapping[str, Any]) -> None:
        if "tensorboard" in self.names:
            from lightning.fabric.loggers.tensorboard import TensorBoardLogger

            self.opened.append(TensorBoardLogger(str(self.path), name="tensorboard", version=""))
        if "wandb" in self.names:
            self.opened.append(self._wandb())
        for logger in self.opened:
            logger.log_hyperparams(dict(hyperparameters))

    def _wandb(self) -> Any:
        import wandb
        from lightning.pytorch.loggers import WandbLogger

        offline = os.environ.get("WANDB_MODE") == "offline" or not os.environ.get("WANDB_API_KEY")
        # Offline, W&B's terminal lines (its run summary) only repeat what fedlight prints; the
        # run is in <run>/wandb/. The run is started here rather than by WandbLogger, which
        # passes W&B's deprecated anonymous setting (a warning).
        run = wandb.init(
            project=self.wandb_project, name=self.path.name, group=self.group,
            dir=str(self.path), mode="offline" if offline else None,
            settings=wandb.Settings(silent=True) if offline else None)
        # WandbLogger.log_metrics records the round as trainer/global_step: the x-axis.
        run.define_metric("trainer/global_step")
        run.define_metric("*", step_metric="trainer/global_step", step_sync=True)
        return WandbLogger(experiment=run, save_dir=str(self.path))

    def log_row(self, row: Mapping[str, Any]) -> None:
        numbers = {k: v for k, v in row.items() if isinstance(v, (int, float)) and k != "round"}
        for logger in self.opened:
            logger.log_metrics(numbers, step=int(row["round"]))

    def log_images(self, images: Mapping[str, Path]) -> None:
        for logger in self.opened:
            if hasattr(logger, "log_image"):
                for key, path in images.items():
                    if path.exists():
                        logger.log_image(key=key, images=[str(path)])

    def log_table(self, key: str, rows: list[dict[str, Any]]) -> None:
        for logger in self.opened:
            if hasattr(logger, "log_table") and rows:
                columns = list(rows[0])
                logger.log_table(key=key, columns=columns,
                                 data=[[r[c] for c in columns] for r in rows])

    def close(self) -> None:
        for logger in self.opened:
            if hasattr(logger, "finalize"):
                logger.finalize("success")
            if type(logger).__name__ == "WandbLogger":  # its run was started by log_hyperparams
                logger.experiment.finish()
        self.opened = []


__all__ = ["LOGGERS", "LoggerName", "Loggers"]
