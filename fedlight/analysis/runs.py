"""A finished run folder, rebuilt for analysis.

:func:`load_finished_run` is the one place the analyses read a run folder (``config.yaml``,
``checkpoints/last.ckpt`` or ``best.ckpt``, ``metrics.csv``, ``partition.json``); every
analysis works on the :class:`RestoredRun` it returns::

    run = load_finished_run("runs/fedpick-digits-dirichlet-s0")
    client = run.load_client(0)        # client 0's model as it is scored: eval mode
    x, y = run.datamodule.client_test(0)

The client module and the data module are rebuilt from the configuration the checkpoint
records (the same for runs started by ``fedlight fit`` and from Python), and the rebuilt split
is checked against the run's ``partition.json``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from fedlight.clients import CLIENTS
from fedlight.clients.base import FederatedClient
from fedlight.core.errors import ConfigError, MissingFileError
from fedlight.core.messages import TrainTask
from fedlight.core.rules import WeightedSum, aggregation_weight
from fedlight.data.datamodule import FederatedDataModule
from fedlight.federation.client_setup import set_up_client
from fedlight.federation.options import TrainerOptions
from fedlight.federation.outputs.checkpoints import NAMED, load_checkpoint
from fedlight.federation.outputs.folder import read_metrics
from fedlight.federation.processes.collectives import Distributed
from fedlight.federation.processes.fabric import device_fabric
from fedlight.federation.runtime import ClientRuntime
from fedlight.parsing.messages import did_you_mean
from fedlight.plotting import client_labels

#: What a run folder holds that every analysis needs.
RUN_FILES = ("config.yaml", "partition.json")


@dataclass
class RestoredRun:
    """A finished run folder restored for analysis: its client module and data module
    rebuilt, its clients' states loaded from a checkpoint.

    Attributes:
        folder: the run folder.
        model: the run's client module (its state is loaded by :meth:`load_client` /
            :meth:`load_global`).
        datamodule: the run's data, set up, with the run's split.
        checkpoint: the checkpoint read (``checkpoints/last.ckpt`` unless asked otherwise).
        checkpoint_path: its file.
    """

    folder: Path
    model: FederatedClient
    datamodule: FederatedDataModule
    checkpoint: dict[str, Any]
    checkpoint_path: Path

    @property
    def method(self) -> str:
        return str(self.checkpoint["method"])

    @property
    def rounds_done(self) -> int:
        return int(self.checkpoint["rounds_done"])

    @property
    def num_clients(self) -> int:
        return int(self.datamodule.num_clients)

    @property
    def client_labels(self) -> list[str]:
        """How figures name the clients: each one's domain or group where the data names
        them (digits5, Office-Caltech-10), else its number."""
        return client_labels(self.num_clients, self.datamodule.client_names())

    @property
    def trainer_config(self) -> dict[str, Any]:
        """The run's trainer section (batch size, seed, local epochs, weighting, ...)."""
        return dict(self.checkpoint["config"]["trainer"])

    @property
    def global_state(self) -> dict[str, Tensor]:
        """The aggregated shared state of the checkpoint's round."""
        return dict(self.checkpoint["server"]["global_state"])

    @functools.cached_property
    def runtime(self) -> ClientRuntime:
        """The client side as the run built it, in this process (the model's device), with
        the checkpoint's clients: set up once, the clients' data copied once, whatever the
        analyses load and train."""
        options = TrainerOptions.from_saved(self.trainer_config)
        fabric = device_fabric(self.model.device)
        memory_format = set_up_client(options, fabric, self.model, self.datamodule, reinit=False)
        sizes = [self.datamodule.client_train_size(i) for i in range(self.num_clients)]
        runtime = ClientRuntime(fabric, self.model, self.datamodule, Distributed(fabric, sizes),
                                self.checkpoint["initial_private"], options, memory_format)
        runtime.population.restore(self.checkpoint)
        return runtime

    def load_client(self, client_id: int, shared: Mapping[str, Tensor] | None = None,
                    private: Mapping[str, Tensor] | None = None) -> FederatedClient:
        """The module loaded as client ``client_id`` is scored after the checkpoint's round:
        the aggregated shared state (or ``shared``), its private state (or ``private``) and
        its context, in eval mode."""
        self._check_client(client_id)
        return self.runtime.load(client_id, self.rounds_done,
                                 self.global_state if shared is None else shared,
                                 private).eval()

    def load_global(self) -> FederatedClient | None:
        """The module loaded as the global model (``global_forward`` predicts with it), or
        None where the method has none (a private part such as GPFL's head)."""
        if not self.model.has_global_model:
            return None
        model = self.runtime.load_global(self.global_state)
        model.context = None
        return model.eval()

    def train_locally(self, client_id: int) -> tuple[FederatedClient, dict[str, Tensor]]:
        """Client ``client_id``'s local training of the round after the checkpoint's, as the
        run would train it (its download, private state, seed, batches and phases): the
        module after training, in eval mode, and its upload's shared state. The clients'
        states stay the checkpoint's."""
        self._check_client(client_id)
        server = self.checkpoint["server"]
        try:
            result = self.runtime.train(TrainTask(client_id, self.rounds_done,
                                                  server["global_state"],
                                                  dict(server["message"])))
        finally:
            self.runtime.population.restore(self.checkpoint)
        return self.model.eval(), result.upload.state

    def weighted_mean(self, uploads: Mapping[int, Mapping[str, Tensor]]) -> dict[str, Tensor]:
        """FedAvg's aggregation of the clients' uploaded shared states: their mean weighted
        by the run's weighting (training samples, or uniform)."""
        weighting = self.trainer_config.get("weighting", "samples")
        total = WeightedSum()
        for client_id, state in uploads.items():
            samples = self.datamodule.client_train_size(client_id)
            total.add(state, aggregation_weight(samples, weighting))
        return total.mean()

    def metrics(self) -> list[dict[str, float]]:
        """The rows of ``metrics.csv`` as numbers (an empty cell is NaN)."""
        return read_metrics(self.folder)

    def _check_client(self, client_id: int) -> None:
        if not 0 <= client_id < self.num_clients:
            raise ConfigError(f"client {client_id} does not exist in {str(self.folder)!r}; "
                              f"valid: 0..{self.num_clients - 1}")


def checkpoint_file(folder: Path, checkpoint: str) -> Path:
    """The file ``checkpoint`` names: ``last`` / ``best`` (in ``folder/checkpoints``) or a
    path."""
    path = folder / "checkpoints" / NAMED[checkpoint] if checkpoint in NAMED else Path(checkpoint)
    if not path.is_file():
        raise MissingFileError(f"checkpoint {str(path)!r} does not exist; valid: last, best "
                               "(when the run kept one) or a checkpoint file")
    return path


def build_client(description: Mapping[str, Any]) -> FederatedClient:
    """The client module a checkpoint's recorded configuration describes (method and model
    arguments)."""
    method = str(description["method"])
    if method not in CLIENTS:
        raise ConfigError(f"the run's method {method!r} is not a fedlight client class; valid: "
                          f"{', '.join(sorted(CLIENTS))}{did_you_mean(method, CLIENTS)}")
    return CLIENTS[method](**description["model"])


def check_split(datamodule: FederatedDataModule, folder: Path) -> None:
    """Refuse a rebuilt data module whose split is not the run's ``partition.json``."""
    recorded = json.loads((folder / "partition.json").read_text())["clients"]
    if datamodule.partition_record()["clients"] != recorded:
        raise ConfigError(f"the data of {str(folder)!r} no longer splits as its partition.json "
                          f"(source {datamodule.source.name!r} changed?); the run cannot be "
                          "analysed")


def load_finished_run(run_dir: str | Path, checkpoint: str = "last",
                      device: str | torch.device = "cpu") -> RestoredRun:
    """Rebuild a finished run for analysis.

    Args:
        run_dir: a run folder written by ``fedlight fit`` or ``FederatedTrainer.fit``.
        checkpoint: ``last`` (default), ``best`` or a checkpoint file.
        device: where its clients are loaded, trained and scored.

    Raises:
        fedlight.core.errors.MissingFileError: the folder, a run file or the checkpoint is
            missing.
        fedlight.core.errors.ConfigError: the checkpoint's method is unknown, or the data no
            longer split as the run's ``partition.json``.
    """
    folder = Path(run_dir)
    missing = [name for name in RUN_FILES if not (folder / name).is_file()]
    if missing:
        raise MissingFileError(f"{str(folder)!r} is not a finished run folder (no "
                               f"{', '.join(missing)}); pass a folder written by fedlight fit")
    path = checkpoint_file(folder, checkpoint)
    state = load_checkpoint(path)
    description = state["config"]
    torch.manual_seed(int(description["trainer"].get("seed", 0)))
    model = build_client(description).to(device)
    datamodule = FederatedDataModule(**description["data"])
    datamodule.setup()
    check_split(datamodule, folder)
    return RestoredRun(folder, model, datamodule, state, path)


__all__ = ["RestoredRun", "build_client", "check_split", "checkpoint_file",
           "load_finished_run"]
