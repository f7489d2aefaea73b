"""Saving, resuming and evaluating a run's checkpoints: the part of FederatedTrainer that
deals with checkpoints/last.ckpt and best.ckpt (validate and test are public here).

RunCheckpoints is a base class of FederatedTrainer and uses the run the trainer prepared:
client, server, population, writer, dist, fabric, grad_scale, history, totals and its
configuration (_hyperparameters); FederatedTrainer._prepare sets them up.
"""

from __future__ import annotations

import math
from typing import Any

from fedlight.clients.base import FederatedClient
from fedlight.core.errors import ConfigError
from fedlight.data.datamodule import FederatedDataModule
from fedlight.federation.checkpoint import (
    LAST,
    RESUMABLE_CHANGES,
    check_compatible,
    check_same_config,
    load_checkpoint,
    run_checkpoint,
)
from fedlight.federation.launch import launch, needs_launch

#: The column a best round is chosen on when data.val_fraction > 0.
VALIDATION_KEY = "val_personalized_accuracy"


class RunCheckpoints:
    """Checkpoint writing, resume checks and restore, and evaluation of a saved run."""

    client: Any
    server: Any
    population: Any
    writer: Any
    dist: Any
    fabric: Any
    grad_scale: Any
    history: list[dict[str, Any]]
    totals: dict[str, Any]
    rounds_saved: int
    reinitialize: bool
    rounds: int
    evaluator: Any

    def _hyperparameters(self) -> dict[str, Any]:
        raise NotImplementedError  # FederatedTrainer's

    def _prepare(self, model: FederatedClient, datamodule: FederatedDataModule,
                 server: Any = None, engine: Any = None, reinit: bool | None = None) -> None:
        raise NotImplementedError  # FederatedTrainer's

    def validate(self, model: FederatedClient, datamodule: FederatedDataModule,
                 ckpt_path: str | None = "last") -> dict[str, float]:
        """Evaluate a run's checkpoint on the clients' local test splits and the global test.

        Args:
            model: the client module the run trained.
            datamodule: the run's federated data.
            ckpt_path: a checkpoint file, or last (best: the round chosen on validation,
                with data.val_fraction > 0) for the newest checkpoint of the run this
                configuration names.
        """
        return self._evaluate_checkpoint(model, datamodule, ckpt_path, "validate")

    def test(self, model: FederatedClient, datamodule: FederatedDataModule,
             ckpt_path: str | None = "last") -> dict[str, float]:
        """Evaluate a run's checkpoint like validate and write test_metrics.json.

        Args:
            model: the client module the run trained.
            datamodule: the run's federated data.
            ckpt_path: a checkpoint file, or last (best: the round chosen on validation,
                with data.val_fraction > 0) for the newest checkpoint of the run this
                configuration names.
        """
        return self._evaluate_checkpoint(model, datamodule, ckpt_path, "test")

    def _best_on_validation(self, row: dict[str, Any]) -> bool:
        """Whether ``row`` (the newest history row) ties or beats every earlier round on
        validation personalized accuracy (as the summary's best round is chosen)."""
        value = row.get(VALIDATION_KEY)
        if value is None or not math.isfinite(value):
            return False
        earlier = [r[VALIDATION_KEY] for r in self.history[:-1]
                   if r.get(VALIDATION_KEY) is not None and math.isfinite(r[VALIDATION_KEY])]
        return bool(value >= max(earlier, default=-math.inf))

    def _save_checkpoint(self, rounds_done: int, names: list[str] | None = None) -> None:
        """Write the state after ``rounds_done`` rounds to checkpoints/<name> for each name
        (last.ckpt by default; best.ckpt for a new best round on validation)."""
        names = names or [LAST]
        population = self.population.checkpoint()  # a collective: every rank takes part

        def write() -> None:
            state = run_checkpoint(
                rounds_done, type(self.client).__name__, self.server, population,
                grad_scale=self.grad_scale.value, history=self.history, totals=self.totals,
                config=self._hyperparameters())
            for name in names:
                self.writer.save_checkpoint(state, name)

        self.dist.from_writer(write)  # a failed write (a full disk) stops every rank
        if LAST in names:
            self.rounds_saved = rounds_done

    def _check_checkpoint(self, checkpoint: dict[str, Any], states_only: bool = False) -> None:
        """Refuse a checkpoint of another method, rule or configuration (evaluating one,
        ``states_only``, only needs the same method, model and data)."""
        check_compatible(checkpoint, type(self.client).__name__,
                         None if states_only else type(self.server).__name__)
        ignore = (*RESUMABLE_CHANGES, "trainer.", "server") if states_only else RESUMABLE_CHANGES
        check_same_config(checkpoint.get("config"), self._hyperparameters(), ignore)
        if not states_only and checkpoint["rounds_done"] >= self.rounds:
            raise ConfigError(
                f"nothing to train: the run is at round {checkpoint['rounds_done']} and "
                f"trainer.rounds is {self.rounds}; pass trainer.rounds above "
                f"{checkpoint['rounds_done']} to extend it (fedlight test evaluates it as it is)")
        planned = (checkpoint.get("config") or {}).get("trainer", {}).get("rounds", self.rounds)
        if not states_only and self.client.reads_planned_rounds and planned != self.rounds:
            method = type(self.client).__name__
            raise ConfigError(
                f"{method} trains with trainer.rounds as the planned number of rounds, so "
                f"resuming its {planned}-round run with trainer.rounds {self.rounds} would "
                f"differ from a run planned for {self.rounds} rounds; resume with "
                f"trainer.rounds {planned}, or start a new run (without ckpt_path)")

    def _restore(self, checkpoint: dict[str, Any], states_only: bool = False) -> int:
        self.server.load_state_dict(checkpoint["server"])
        self.server.to(self.fabric.device)
        self.population.restore(checkpoint)
        if not states_only:
            self.grad_scale.load(checkpoint.get("grad_scale"))
            self.history = list(checkpoint["history"])
            self.totals = dict(checkpoint["totals"])
            self.writer.folder.write_history(self.history)
        return int(checkpoint["rounds_done"])

    def _evaluate_checkpoint(self, model: FederatedClient, datamodule: FederatedDataModule,
                             ckpt_path: str | None, stage: str) -> dict[str, float]:
        if needs_launch(self.fabric):  # several processes: start them, each evaluates
            metrics: dict[str, float] = launch(self, "_evaluate_checkpoint", model, datamodule,
                                               ckpt_path, stage)
            return metrics
        self._prepare(model, datamodule, reinit=False)  # the checkpoint holds the weights
        try:
            file = self.writer.checkpoint_file(ckpt_path or "last")
            checkpoint = self.dist.share_checkpoint(lambda: load_checkpoint(file))
            self._check_checkpoint(checkpoint, states_only=True)
            self.writer.open_existing(file)
            rounds_done = self._restore(checkpoint, states_only=True)
            self.writer.announce("evaluating", file, rounds_done)
            metrics = self.evaluator.evaluate(self.client, self.server, rounds_done, None)
        finally:
            self.client.capture_logs(False)
        self.writer.print_metrics(stage, metrics)
        if stage == "test":
            self.writer.folder.write_json("test_metrics.json", metrics)
        return metrics


__all__ = ["VALIDATION_KEY", "RunCheckpoints"]
