"""A run's loggers beside its CSV: TensorBoard and W&B (offline unless the user has a key).

A W&B run has W&B's step at the round: each evaluated round's row is logged at its round, its
per-client table (trainer.per_client_scores) beside it, and the closing images at the last
round, so ``_step`` never passes the round count. Its config is the run's full configuration
(with the labels a sweep gives it: sweep, method, setting and seed, also as tags) and its
summary every figure of summary.json (best and its round, mean of the last window, last,
fairness, bytes, CPU seconds). An offline run also gets files/config.yaml and
files/wandb-summary.json (as an online run has them), so both read without W&B's binary file.
"""

from __future__ import annotations

import json
import netrc
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import urlparse

#: A run's loggers: csv is always on; tensorboard and wandb are added on request.
LoggerName = Literal["csv", "tensorboard", "wandb"]
LOGGERS: tuple[str, ...] = get_args(LoggerName)
#: The longest tag W&B takes.
TAG_LENGTH = 64


def wandb_offline() -> bool:
    """W&B runs offline when WANDB_MODE says so or no API key is known: neither
    WANDB_API_KEY nor the entry ``wandb login`` writes to ~/.netrc for W&B's host."""
    if os.environ.get("WANDB_MODE") == "offline":
        return True
    return not (os.environ.get("WANDB_API_KEY") or logged_in(
        urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or ""))


def logged_in(host: str) -> bool:
    """Whether ~/.netrc (NETRC where set) holds a key for ``host``."""
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def numbers(row: Mapping[str, Any]) -> dict[str, int | float]:
    """The numeric entries of a row (what a logger plots)."""
    return {k: v for k, v in row.items() if isinstance(v, (int, float))}


class WandbRun:
    """One fedlight run as a W&B run (see the module docstring).

    Args:
        path: the run folder (W&B's files go to ``<path>/wandb/``).
        group: the W&B group.
        project: the W&B project.
        labels: config keys that label the run, each also a ``key=value`` tag.
    """

    def __init__(self, path: Path, group: str, project: str,
                 labels: Mapping[str, Any] | None = None) -> None:
        self.path, self.group, self.project = path, group, project
        self.labels = dict(labels or {})
        self.offline = wandb_offline()
        self.config: dict[str, Any] = {}
        self.last: dict[str, Any] = {}  # the newest value of each logged number
        self.summary: dict[str, Any] = {}
        self.run: Any = None

    def open(self, config: Mapping[str, Any]) -> None:
        import wandb

        self.config = {**json.loads(json.dumps(config, default=str)), **self.labels}
        tags = [f"{key}={value}"[:TAG_LENGTH] for key, value in self.labels.items()]
        # Offline, W&B's terminal lines (its run summary) only repeat what fedlight prints.
        self.run = wandb.init(
            project=self.project, name=self.path.name, group=self.group, dir=str(self.path),
            config=self.config, tags=tags or None, mode="offline" if self.offline else None,
            settings=wandb.Settings(silent=True) if self.offline else None)

    def log(self, values: Mapping[str, Any], step: int) -> None:
        self.run.log(dict(values), step=step)
        self.last.update(numbers(values))

    def log_image(self, key: str, path: Path, step: int) -> None:
        import wandb

        self.run.log({key: wandb.Image(str(path))}, step=step)

    def log_table(self, key: str, rows: Sequence[Mapping[str, Any]], step: int) -> None:
        import wandb

        columns = list(dict.fromkeys(c for row in rows for c in row))
        data = [[row.get(c) for c in columns] for row in rows]
        self.run.log({key: wandb.Table(columns=list[str | int](columns), data=data)}, step=step)

    def log_summary(self, summary: Mapping[str, Any]) -> None:
        self.summary = json.loads(json.dumps(summary, default=str))
        self.run.summary.update(self.summary)

    def close(self) -> None:
        if self.run is None:
            return
        if self.offline:
            self.write_files(self.run.step)
        self.run.finish()
        self.run = None

    def write_files(self, step: int) -> None:
        """files/config.yaml (W&B's layout: each key's ``value``) and files/wandb-summary.json
        (the newest value of each logged number, the summary's figures and W&B's ``_step``)."""
        import yaml

        files = Path(self.run.dir)
        config = {key: {"value": value} for key, value in self.config.items()}
        (files / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        summary = {**self.last, **self.summary, "_step": step}
        (files / "wandb-summary.json").write_text(json.dumps(summary, indent=1))


class Loggers:
    """The TensorBoard and W&B loggers of one run folder (the CSV is the folder's own).

    Args:
        names: the run's logger names (``csv`` needs nothing here).
        path: the run folder.
        group: the W&B group of the run.
        wandb_project: the W&B project.
        labels: W&B config keys (and tags) labelling the run, e.g. a sweep's method.
    """

    def __init__(self, names: Sequence[str], path: Path, group: str, wandb_project: str,
                 labels: Mapping[str, Any] | None = None) -> None:
        self.names, self.path = list(names), path
        self.group, self.wandb_project, self.labels = group, wandb_project, labels
        self.tensorboard: Any = None
        self.wandb: WandbRun | None = None

    def open(self, config: Mapping[str, Any]) -> None:
        """Start the loggers with the run's configuration."""
        if "tensorboard" in self.names:
            from lightning.fabric.loggers.tensorboard import TensorBoardLogger

            self.tensorboard = TensorBoardLogger(str(self.path), name="tensorboard", version="")
            self.tensorboard.log_hyperparams(dict(config))
        if "wandb" in self.names:
            self.wandb = WandbRun(self.path, self.group, self.wandb_project, self.labels)
            self.wandb.open(config)

    def log_row(self, row: Mapping[str, Any]) -> None:
        """An evaluated round's row, at its round."""
        step = int(row["round"])
        values = {k: v for k, v in numbers(row).items() if k != "round"}
        if self.tensorboard is not None:
            self.tensorboard.log_metrics(values, step=step)
        if self.wandb is not None:
            self.wandb.log({**values, "round": step}, step)

    def log_images(self, images: Mapping[str, Path], step: int) -> None:
        """Images (those that exist) at round ``step``."""
        if self.wandb is not None:
            for key, path in images.items():
                if path.exists():
                    self.wandb.log_image(key, path, step)

    def log_table(self, key: str, rows: Sequence[Mapping[str, Any]], step: int) -> None:
        """A table (one dict per row) at round ``step``."""
        if self.wandb is not None and rows:
            self.wandb.log_table(key, rows, step)

    def log_summary(self, summary: Mapping[str, Any]) -> None:
        """The run's summary.json as W&B's run summary."""
        if self.wandb is not None:
            self.wandb.log_summary(summary)

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.finalize("success")
            self.tensorboard = None
        if self.wandb is not None:
            self.wandb.close()
            self.wandb = None


__all__ = ["LOGGERS", "LoggerName", "Loggers", "WandbRun", "wandb_offline"]
