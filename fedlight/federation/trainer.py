"""FederatedTrainer: fit / validate / test of a federated run, and the round loop.

A run is built once (build.py); each round the round protocol (protocol.py) samples the
participants, has the engine carry out their work (engines/, or Flower's SuperNodes), reduces
the results through the server rule and evaluates; the trainer runs the probes, writes the row
and checkpoints. Every random draw is a pure function of (seed, round, client), so a resumed
run equals an uninterrupted one, whatever the order, process or engine clients train in.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from torch import Tensor

from fedlight.clients.base import FederatedClient
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ClientEngine, Score, TrainTask
from fedlight.core.rules import ServerRule
from fedlight.data.datamodule import FederatedDataModule
from fedlight.federation.build import Federation, build_run
from fedlight.federation.options import TrainerOptions
from fedlight.federation.outputs.checkpoints import (
    LAST,
    checkpoint_names,
    saved_client_states,
)
from fedlight.federation.outputs.summary import best_on_validation
from fedlight.federation.outputs.writer import to_yaml, write_header
from fedlight.federation.processes.fabric import make_fabric
from fedlight.federation.processes.launch import launch, needs_launch
from fedlight.federation.processes.signals import RunInterrupted, StopSignals


class FederatedTrainer(TrainerOptions):
    """Runs federated training of a FederatedClient over a FederatedDataModule (the options:
    :class:`~fedlight.federation.options.TrainerOptions`)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.fabric = make_fabric(self.accelerator, self.devices, self.num_nodes,
                                  self.precision, self.strategy, self.workers_per_device)
        self.run_config: str | None = None  # the resolved YAML, set by the CLI
        self.command: str | None = None  # the command line that started the run, set by the CLI
        #: how a stopped run is resumed, where what started it knows better (a sweep: its own
        #: command); None: the run's command with --ckpt_path last
        self.resume_command: str | None = None
        self.should_stop = False  # set by a callback: the run ends after the round in progress
        self.stop_reason: str | None = None  # why a callback stopped the run
        self.history: list[dict[str, Any]] = []
        self.launched_run_dir: Path | None = None  # the run folder of a launched fit
        self.built: Federation | None = None  # the run of fit / test in this process

    @property
    def run(self) -> Federation:
        """The run being (or last) carried out in this process (built by fit or test)."""
        assert self.built is not None, "no run was started in this process"
        return self.built

    @property
    def global_state(self) -> dict[str, Tensor]:
        """The server's current global shared state."""
        return self.server.global_state

    @property
    def message(self) -> dict[str, Any]:
        """What the server sends with the global state (prototypes, control variates...)."""
        return self.server.message

    @property
    def client_states(self) -> Mapping[int, dict[str, Tensor]]:
        """Each trained client's stored private state ({client: {key: tensor}}); read from the
        last checkpoint after a run in started processes; {} before fit."""
        if self.built is not None:
            return self.built.population.states
        return {} if self.run_dir is None else saved_client_states(self.run_dir)

    @property
    def run_dir(self) -> Path | None:
        """The folder of the current (or last) run; None before fit."""
        folder = None if self.built is None else self.built.writer.folder
        return Path(folder.path) if folder is not None else self.launched_run_dir

    @property
    def world_size(self) -> int:
        return self.fabric.world_size

    # what probes read of the run
    client = property(lambda self: self.run.client, doc="The live client module.")
    datamodule = property(lambda self: self.run.datamodule, doc="The run's data.")
    dist = property(lambda self: self.run.dist, doc="This process's place in the run.")
    population = property(lambda self: self.run.population, doc="This process's clients.")
    engine = property(lambda self: self.run.engine, doc="What carries the clients' work out.")
    grad_scale = property(lambda self: self.run.grad_scale, doc="The fp16 loss scale.")
    num_clients = property(lambda self: self.run.datamodule.num_clients, doc="Clients.")
    participations = property(lambda self: self.run.population.participations,
                              doc="How many rounds each client has trained in (this process).")

    def fit(self, model: FederatedClient, datamodule: FederatedDataModule,
            ckpt_path: str | None = None, server: ServerRule | None = None) -> dict[str, Any]:
        """Train a federated run for trainer.rounds rounds and return its summary.

        A first Ctrl-C (SIGINT) or SIGTERM finishes the round in progress, checkpoints it and
        stops, printing how to resume; a second one stops at once.

        Args:
            model: the client module (any fedlight client class).
            datamodule: the federated data.
            ckpt_path: resume a run: a checkpoint file, or last for the newest
                checkpoints/last.ckpt of the run this configuration names (folder run_name or
                run_name-vN). The configuration must be the run's own (trainer.threads
                included); trainer.rounds may change, which trains the rounds a run planned
                that long would, except for a method that reads the planned rounds (MAP:
                refused); the run and round resumed are printed.
            server: a server rule replacing the method's own (e.g. FedAdam, Krum, DPFedAvg),
                where the method allows it; None = the method's configure_server(). Each run
                uses a fresh copy of it (set up from its constructor arguments), so one rule
                object passed to several runs gives each the same result; the copy a run
                used is trainer.server.
        """
        if needs_launch(self.fabric):  # several processes: start them, each runs fit
            summary: dict[str, Any] = launch(self, "fit", model, datamodule, ckpt_path, server)
            self.launched_run_dir = Path(summary["run_dir"])
            return summary
        return self.federate(model, datamodule, None, ckpt_path, server)

    def federate(self, model: FederatedClient, datamodule: FederatedDataModule,
                 engine: ClientEngine | None, ckpt_path: str | None = None,
                 server: ServerRule | None = None) -> dict[str, Any]:
        """fit, with the clients' work carried out by engine (None: the simulator in this
        process; fedlight.flower's engine: Flower SuperNodes). Same rounds, rows, run folder
        and checkpoints whatever the engine; ckpt_path and server as in fit."""
        run = self._build(model, datamodule, server, engine, self.reinitialize)
        config, file, checkpoint = run.resume_point(ckpt_path, self)
        if checkpoint and checkpoint.get("stopped_early"):
            stopped = checkpoint["stopped_early"]
            raise ConfigError(f"nothing to train: the run stopped early at round "
                              f"{stopped['round']} ({stopped['reason']}); start a new run "
                              "(without ckpt_path) to train it further")
        header = self.run_config or to_yaml(config)
        # the loggers get the full configuration where the CLI resolved one
        logged = yaml.safe_load(self.run_config) if self.run_config else config
        run.writer.open(file, lambda folder: write_header(folder, header, datamodule, run.notes,
                                                          self.verbose), logged)
        try:
            if checkpoint:
                self.rounds_done = self.rounds_saved = run.restore(checkpoint)
                self.history, self.totals = list(checkpoint["history"]), dict(checkpoint["totals"])
                self._load_callbacks(checkpoint.get("callbacks", {}))
                run.writer.announce("resuming", file, self.rounds_done)
            for probe in self.probes:
                probe.setup(self)
            for callback in self.callbacks:
                callback.on_fit_start(self, model)
            self._fit_rounds(self.rounds_done)
            summary = run.finish(self.history, {**self.totals, **self._stop_summary()})
            for callback in self.callbacks:
                callback.on_fit_end(self, model, summary)
        except BaseException as error:
            run.writer.close(failed=True, rounds_done=self.rounds_done)
            if isinstance(error, KeyboardInterrupt):
                run.writer.report_stop(self.rounds_done, self.rounds_saved,
                                       self.resume_command or run.resume_hint(self.command))
            raise
        finally:
            model.capture_logs(False)
        run.writer.close()
        return summary

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
        return self.evaluate_checkpoint(model, datamodule, ckpt_path, "validate")

    def test(self, model: FederatedClient, datamodule: FederatedDataModule,
             ckpt_path: str | None = "last") -> dict[str, float]:
        """Evaluate a run's checkpoint like validate and write test_metrics.json (the same
        arguments)."""
        return self.evaluate_checkpoint(model, datamodule, ckpt_path, "test")

    def evaluate_checkpoint(self, model: FederatedClient, datamodule: FederatedDataModule,
                            ckpt_path: str | None, stage: str) -> dict[str, float]:
        """validate / test: the checkpoint's model scored as fit scores an evaluated round."""
        if needs_launch(self.fabric):  # several processes: start them, each evaluates
            metrics: dict[str, float] = launch(self, "evaluate_checkpoint", model, datamodule,
                                               ckpt_path, stage)
            return metrics
        run = self._build(model, datamodule, None, None, reinit=False)  # the weights: loaded
        try:
            return run.evaluate_checkpoint(ckpt_path or "last", run.hyperparameters(self), stage)
        finally:
            model.capture_logs(False)

    def load_client(self, client_id: int, round_idx: int) -> FederatedClient:
        """The live module loaded as client ``client_id`` about to train in ``round_idx``, as
        the client runtime starts its training (seeds, download, private state, train mode,
        ``on_round_start``); for probes, on the process that owns it."""
        shared, message = self.server.download(client_id)
        self.run.runtime.start(TrainTask(client_id, round_idx, shared, message))
        return self.run.client

    # ================================================================= the run
    def _build(self, model: FederatedClient, datamodule: FederatedDataModule,
               server: ServerRule | None, engine: ClientEngine | None, reinit: bool) -> Federation:
        self.built = build_run(self, self.fabric, model, datamodule, server, engine, self, reinit)
        self.server = self.built.rule
        self.history = []
        self.round_seconds: list[float] = []  # each round's train + aggregate, in this process
        self.totals = {"seconds": 0.0, "bytes_up": 0, "bytes_down": 0}
        self.last_client_scores: dict[int, dict[str, Score]] = {}
        self.rounds_done = self.rounds_saved = 0
        self.should_stop, self.stop_reason = False, None
        self.stopped_early: dict[str, Any] | None = None
        return self.built

    def _fit_rounds(self, start_round: int) -> None:
        """Rounds ``start_round`` .. ``rounds - 1``; a first SIGINT / SIGTERM ends the loop after
        the round in progress, with a checkpoint of it (RunInterrupted); a callback's stop ends
        it the same way, as a finished run with the stop recorded."""
        run = self.run
        run.protocol.keep_from = start_round
        signals = StopSignals(announce=run.dist.is_writer)
        with (run.writer.progress(self.rounds) as progress,
              signals if run.engine.holds_clients else contextlib.nullcontext()):
            progress.advance_to(start_round)
            run.protocol.on_client_done = progress.client_done
            for round_idx in range(start_round, self.rounds):
                progress.start_round()
                for callback in self.callbacks:
                    callback.on_round_start(self, run.client, round_idx)
                row = self._run_round(round_idx)
                if row is not None:
                    self.history.append(row)
                    run.writer.append(row, self.last_client_scores)
                self.rounds_done = round_idx + 1
                progress.update(self.rounds_done, self.history[-1] if self.history else {})
                signalled, early = self._stop_requested(signals.requested)
                stop = signalled or early
                names = checkpoint_names(self.rounds_done, self.rounds, self.checkpoint_every,
                                         stop, row is not None and best_on_validation(self.history))
                if names:
                    run.checkpoint(self.rounds_done, names, run.hyperparameters(self),
                                   history=self.history, totals=self.totals,
                                   callbacks={c.state_key: c.state_dict() for c in self.callbacks},
                                   stopped_early=self.stopped_early)
                    if LAST in names:
                        self.rounds_saved = self.rounds_done
                    run.protocol.keep_from = self.rounds_saved
                if early and self.stopped_early is not None:
                    run.writer.report_early_stop(self.stopped_early)
                    return
                if stop and self.rounds_done < self.rounds:
                    raise RunInterrupted(self.rounds_done)

    def _stop_requested(self, signalled: bool) -> tuple[bool, bool]:
        """(a signal asked to stop, a callback stopped the run early) as rank 0 sees them, on
        every rank (rank 0 decides for all); an early stop is recorded in ``stopped_early``."""
        signalled, asked, reason = self.run.dist.broadcast(
            (signalled, self.should_stop, self.stop_reason))
        early = bool(asked) and self.rounds_done < self.rounds
        if early:
            self.stopped_early = {"round": self.rounds_done,
                                  "reason": reason or "a callback asked to stop"}
        return bool(signalled), early

    def _run_round(self, round_idx: int) -> dict[str, Any] | None:
        stats, row = self.run.protocol.run_round(round_idx)
        self.round_seconds.append(stats["seconds"])
        for key in self.totals:
            self.totals[key] += stats[key]
        if row is not None:
            self.last_client_scores = self.run.evaluator.last_client_scores
            for probe in self.probes:
                row.update(probe.on_round_end(self, round_idx))
        for callback in self.callbacks:  # before the row is written: a callback may refuse it
            callback.on_round_end(self, self.run.client, round_idx, stats if row is None else row)
        return row

    def _load_callbacks(self, states: Mapping[str, Any]) -> None:
        """Give each callback its state from a resumed checkpoint (where it has one)."""
        for callback in self.callbacks:
            if callback.state_key in states:
                callback.load_state_dict(states[callback.state_key])

    def _stop_summary(self) -> dict[str, Any]:
        """The summary's record of an early stop: its round and reason ({} for a full run)."""
        if self.stopped_early is None:
            return {}
        return {"stopped_early_round": self.stopped_early["round"],
                "stop_reason": self.stopped_early["reason"]}


__all__ = ["FederatedTrainer"]
