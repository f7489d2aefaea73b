"""FederatedTrainer: wires the pieces of a federated run and holds the round loop.

Each round the round protocol (protocol.py) samples the participants, hands their tasks to the
engine that carries out the clients' work (the simulator's LocalEngine in round.py, or Flower's
SuperNodes through fedlight.flower), reduces their results through the server rule, evaluates
and returns the row; the trainer runs the probes, writes the row and checkpoints (run.py,
checkpointing.py). In the simulator one live client module per process plays every client in
turn (population.py holds their private states); every random draw is a pure function of
(seed, round, client), so a resumed run equals an uninterrupted one and results do not depend
on the order, process or engine in which clients are trained.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor

from fedlight import __version__
from fedlight.clients.base import FederatedClient
from fedlight.core.errors import ConfigError
from fedlight.data.datamodule import FederatedDataModule
from fedlight.federation.batched import BatchedEngine, batching_refusal
from fedlight.federation.checkpoint import BEST, LAST, load_checkpoint
from fedlight.federation.checkpointing import RunCheckpoints
from fedlight.federation.distributed import Distributed
from fedlight.federation.evaluation import Evaluator, Score
from fedlight.federation.interrupt import RunInterrupted, StopSignals
from fedlight.federation.launch import (
    check_scale_options,
    check_threads,
    devices_note,
    launch,
    make_fabric,
    needs_launch,
)
from fedlight.federation.local import LocalLoop
from fedlight.federation.memory_format import apply_memory_format, check_memory_format, on_device
from fedlight.federation.outputs import LoggerName, normalize_loggers
from fedlight.federation.population import Population, seed_global_rngs
from fedlight.federation.precision import ClientGradScale, precision_hint
from fedlight.federation.probes import Probe
from fedlight.federation.protocol import ClientEngine, OwnedClients, RoundGradScale, RoundProtocol
from fedlight.federation.round import LocalEngine
from fedlight.federation.run import (
    SIMULATOR,
    RunWriter,
    default_run_name,
    describe_run,
    to_yaml,
)
from fedlight.federation.sampling import derive_seed, sample_clients
from fedlight.federation.server import ServerContext, ServerRule, resolve_rule
from fedlight.federation.setup import MOVED_OPTIONS, check_moved, check_options, prepare_run


class FederatedTrainer(RunCheckpoints):
    """Runs federated training of a FederatedClient over a FederatedDataModule.

    Args:
        rounds: communication rounds.
        join_ratio: share of clients sampled each round (1.0 = all).
        drop_rate: share of each round's sampled clients that train but fail to report (their
            upload is not aggregated; their private state update is kept). Drawn from (seed,
            round); at least one client reports. Logged as dropped when positive.
        weighting: aggregation weights, samples (sample counts) or uniform.
        seed: seed of model initialization, client sampling, batch order and every random
            draw of a method.
        reinitialize: re-initialize the client's weights from seed at the start of fit
            (as the CLI does), so the same seed gives the same run from Python too; False
            trains the module's current weights (e.g. pre-trained ones).
        local_epochs: local epochs E; a method's local_phases splits them.
        batch_size: local mini-batch size.
        optimizer_state: fresh (a new optimizer every round) or persist (each client's
            optimizer and scheduler state is kept between rounds and in checkpoints).
        gradient_clip_val: clip gradients to this norm (or value) before each optimizer step,
            through the module's configure_gradient_clipping; None = no clipping.
        gradient_clip_algorithm: norm or value.
        eval_every: evaluate every this many rounds (the last round always is).
        eval_batch_size: batch size of evaluation.
        evaluate_after_local_training: score each participant's personalized accuracy right
            after its local training (MAP's protocol) whatever the method; False scores every
            client from its stored state; None (default) keeps the method's own choice (MAP and
            Privatize: after training; the others: stored state).
        share_class_counts: clients send the per-class true positive, false positive and false
            negative counts of their test split with their scores, which the *_macro_f1
            columns pool. Those counts give away a client's test label histogram: a
            deployment (Flower) that must keep it on the clients sets False, and the
            personalized macro-F1 columns are then empty (NaN).
        default_root_dir: runs are written to <default_root_dir>/<run name>/.
        run_name: the run folder's name; default <method>-<source>-<partition>-s<seed>
            (-v2, -v3... appended when that folder exists).
        logger: csv (always on), plus tensorboard and / or wandb: one name or a list, e.g.
            [tensorboard, wandb].
        wandb_project: W&B project (offline when no API key is set).
        wandb_group: W&B group of the run; default <method>-<source>-<partition> (fedlight
            sweep groups its runs under the sweep's name).
        checkpoint_every: write checkpoints/last.ckpt every this many rounds (and at the end).
        progress_bar: show a progress bar over rounds.
        verbose: print the partition table and the final summary table.
        probes: callbacks run after each evaluated round that add metric columns, e.g.
            DLGProbe (gradient-inversion leakage).
        accelerator: Fabric accelerator (auto, cpu, cuda, ...).
        devices: Fabric devices; more than one runs one process per device, each training
            the sampled clients it owns (owners balance the clients' training samples);
            results do not depend on the number of processes. Default ``auto``: on CPU one
            process per core that is idle at start (sampled over 0.25 s; the rest are left to
            the programs using them, since a process sharing its core sets every round's
            pace), started by fork on Linux: 10 rounds of FedAvg on real CIFAR-10 took 80.3 s
            with 2 processes against 143.6 s with one on 2 idle cores; on GPUs every visible
            GPU. A number fixes the count (1: one process).
        num_nodes: Fabric nodes (multi-node runs are started by torchrun or SLURM).
        precision: Fabric precision: 32-true, 16-mixed or bf16-mixed (also 32, 16, bf16).
        workers_per_device: processes per device (default 1); more lets several processes
            share one GPU, each training its own clients (results as with one process).
        strategy: how several processes start: auto / ddp (re-runs the command per rank),
            ddp_spawn / ddp_fork (from Python).
        client_state_storage: where private states live between rounds: memory or
            disk (one sparse memory-mapped file).
        client_state_dir: folder of the disk store's file; default default_root_dir.
        memory_format: the memory format of image batches and convolution weights: auto
            (channels_last on a CPU where every backbone of the model trains faster in it,
            see Backbone.channels_last; the default format otherwise), channels_last or
            contiguous. Results agree to float tolerance, not bit for bit.
        threads: torch intra-op threads per process: a count, ``auto`` (1 on CPU, torch's
            default on accelerators; robust when other programs share the cores) or None
            (torch's default).
        batched_clients: the simulator trains up to this many of a round's participants as
            one vectorized computation (torch.func.vmap over their stacked parameters; see
            fedlight/federation/batched.py), for methods whose local step is the base
            cross-entropy step (FedAvg, FedPer, LG-FedAvg, FedRep, FedBABU, Local...; the
            others, and models with BatchNorm or dropout, train one client after another with
            a one-line note). Meant for GPUs, where one small client's step leaves the device
            idle; on a CPU it is slower (1.6x the loop with K = 4: benchmarks/batched.py).
            Results agree with the loop's to float tolerance. 1 (default): one client after
            another.

    The server side is the client's own rule (configure_server), or the server given to
    fit (YAML: a top-level server: section) where the method allows it. Client-level DP
    and the DLG probe moved out of the trainer: server: DPFedAvg and
    trainer.probes: [DLGProbe].
    """

    def __init__(
        self,
        rounds: int = 100,
        join_ratio: float = 1.0,
        drop_rate: float = 0.0,
        weighting: Literal["samples", "uniform"] = "samples",
        seed: int = 0,
        reinitialize: bool = True,
        local_epochs: int = 1,
        batch_size: int = 10,
        optimizer_state: Literal["fresh", "persist"] = "fresh",
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: Literal["norm", "value"] = "norm",
        eval_every: int = 1,
        eval_batch_size: int = 512,
        evaluate_after_local_training: bool | None = None,
        share_class_counts: bool = True,
        default_root_dir: str = "runs",
        run_name: str | None = None,
        logger: LoggerName | list[LoggerName] | bool = "csv",
        wandb_project: str = "fedlight",
        wandb_group: str | None = None,
        checkpoint_every: int = 10,
        progress_bar: bool = True,
        verbose: bool = True,
        probes: list[Probe] | None = None,
        accelerator: str = "auto",
        devices: int | str = "auto",
        num_nodes: int = 1,
        precision: str = "32-true",
        strategy: str = "auto",
        client_state_storage: Literal["memory", "disk"] = "memory",
        client_state_dir: str | None = None,
        threads: int | str | None = "auto",
        workers_per_device: int = 1,
        memory_format: Literal["auto", "channels_last", "contiguous"] = "auto",
        batched_clients: int = 1,
        **moved: Any,
    ) -> None:
        check_moved(moved)
        check_options(join_ratio, weighting, rounds=rounds, local_epochs=local_epochs,
                      batch_size=batch_size, eval_every=eval_every,
                      checkpoint_every=checkpoint_every, eval_batch_size=eval_batch_size,
                      workers_per_device=workers_per_device)
        check_scale_options(strategy, drop_rate, client_state_storage)
        self.rounds, self.join_ratio, self.drop_rate = rounds, join_ratio, drop_rate
        self.weighting, self.seed, self.reinitialize = weighting, seed, reinitialize
        self.local_epochs, self.batch_size = local_epochs, batch_size
        self.local_options = dict(optimizer_state=optimizer_state,
                                  gradient_clip_val=gradient_clip_val,
                                  gradient_clip_algorithm=gradient_clip_algorithm)
        LocalLoop(None, batch_size, **self.local_options)  # type: ignore[arg-type]  # validate
        self.eval_every, self.eval_batch_size = eval_every, eval_batch_size
        self.evaluate_after_local_training = evaluate_after_local_training
        self.share_class_counts = share_class_counts
        self.default_root_dir = Path(default_root_dir)
        self.run_name = run_name
        self.loggers = normalize_loggers(logger)
        self.wandb_project, self.wandb_group = wandb_project, wandb_group
        self.checkpoint_every = checkpoint_every
        self.progress_bar, self.verbose = progress_bar, verbose
        self.probes = list(probes or [])
        self.client_state_storage, self.client_state_dir = client_state_storage, client_state_dir
        self.threads = check_threads(threads)
        self.memory_format = check_memory_format(memory_format)
        if isinstance(batched_clients, bool) or not isinstance(batched_clients, int) or (
                batched_clients < 1):
            raise ConfigError(f"trainer.batched_clients must be a positive integer, got "
                             f"{batched_clients!r} (1 trains clients one after another)")
        self.batched_clients = batched_clients
        self.precision = precision
        self.devices = devices
        self.fabric = make_fabric(accelerator, devices, num_nodes, precision, strategy,
                                  workers_per_device)
        self.run_config: str | None = None  # the resolved YAML, set by the CLI
        self.command: str | None = None  # the command line that started the run, set by the CLI
        self.history: list[dict[str, Any]] = []
        self.launched_run_dir: Path | None = None  # the run folder of a launched fit

    @property
    def global_state(self) -> dict[str, Tensor]:
        """The server's current global shared state."""
        return self.server.global_state

    @property
    def message(self) -> dict[str, Any]:
        """What the server sends with the global state (prototypes, control variates...)."""
        return self.server.message

    @property
    def client_states(self) -> Any:
        """Each trained client's stored private state ({client: {key: tensor}}); after a run
        in other processes (devices > 1 with a spawn / fork launcher), read from the run's last
        checkpoint; {} before fit."""
        if hasattr(self, "population"):
            return self.population.states
        checkpoint = None if self.run_dir is None else self.run_dir / "checkpoints" / LAST
        if checkpoint is not None and checkpoint.is_file():
            return load_checkpoint(checkpoint)["client_states"]
        return {}

    @property
    def run_dir(self) -> Path | None:
        """The folder of the current (or last) run; None before fit."""
        folder = getattr(getattr(self, "writer", None), "folder", None)
        if folder is not None:
            return Path(folder.path)
        return self.launched_run_dir

    @property
    def participations(self) -> list[int]:
        """How many rounds each client has trained in (as counted by this process)."""
        return self.population.participations

    # ================================================================= public API
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
            summary = launch(self, "fit", model, datamodule, ckpt_path, server)
            self.launched_run_dir = Path(summary["run_dir"])
            return summary
        return self.federate(model, datamodule, None, ckpt_path, server)

    def federate(self, model: FederatedClient, datamodule: FederatedDataModule,
                 engine: ClientEngine | None, ckpt_path: str | None = None,
                 server: ServerRule | None = None) -> dict[str, Any]:
        """fit, with the clients' work carried out by engine (None: the simulator in this
        process; fedlight.flower's engine: Flower SuperNodes). Same rounds, rows, run folder
        and checkpoints whatever the engine; ckpt_path and server as in fit."""
        self._prepare(model, datamodule, server, engine)
        checkpoint_file = self.writer.checkpoint_file(ckpt_path) if ckpt_path else None
        checkpoint = (self.dist.share_checkpoint(lambda: load_checkpoint(checkpoint_file))
                      if ckpt_path else None)
        if checkpoint:
            self._check_checkpoint(checkpoint)
        self.writer.open(checkpoint_file, self._write_header, self._hyperparameters())
        self.rounds_done = self.rounds_saved = 0
        try:
            if checkpoint:
                self.rounds_done = self.rounds_saved = self._restore(checkpoint)
                self.writer.announce("resuming", checkpoint_file, self.rounds_done)
            for probe in self.probes:
                probe.setup(self)
            self._fit_rounds(self.rounds_done)
            summary = self._finish()
        except BaseException as error:
            self.writer.close(failed=True, rounds_done=self.rounds_done)
            if isinstance(error, KeyboardInterrupt):
                self.writer.report_stop(self.rounds_done, self.rounds_saved, self._resume_hint())
            raise
        finally:
            self.client.capture_logs(False)
        self.writer.close()
        return summary

    def load_client(self, client_id: int, round_idx: int) -> FederatedClient:
        """The live module loaded as client ``client_id`` about to train in ``round_idx`` (its
        download and private state, train mode, ``on_round_start`` called, the global random
        generators seeded as for its training); for probes, on the process that owns it."""
        seed_global_rngs(derive_seed(self.seed, round_idx, client_id), self.fabric.device)
        shared, message = self.server.download(client_id)
        self.population.start_training(self.client, client_id, round_idx, shared, message)
        return self.client

    # ================================================================= set-up
    def _prepare(self, model: FederatedClient, datamodule: FederatedDataModule,
                 server: ServerRule | None = None, engine: ClientEngine | None = None,
                 reinit: bool | None = None) -> None:
        """Set up one run (fit, federate, or the evaluation of a checkpoint with reinit False:
        the checkpoint holds the weights; trainer.reinitialize itself is never changed)."""
        if engine is not None:
            engine.attach(self)
        prepare_run(model, datamodule, self.seed,
                    self.reinitialize if reinit is None else reinit, self.threads,
                    self.fabric.device)
        method = type(model).__name__
        if self.evaluate_after_local_training is not None:
            model.evaluate_after_local_training = self.evaluate_after_local_training
        self.server = resolve_rule(model.configure_server(), server, method)
        self.client, self.datamodule = model, datamodule
        self.num_clients = datamodule.num_clients
        self.dist = Distributed(self.fabric, [datamodule.client_train_size(i)
                                              for i in range(self.num_clients)])
        self.fabric.setup_module(model)
        device = self.fabric.device
        memory_format = apply_memory_format(model, self.memory_format, device)
        self.channels_last = memory_format == torch.channels_last
        model.capture_logs(True)
        state = model.state_dict()
        # Every process starts from rank 0's initial model, however it was built.
        initial_shared = self.dist.broadcast(
            {k: state[k].detach().clone() for k in model.partition.shared}, device)
        self.server.setup(initial_shared, ServerContext(
            self.num_clients, self.rounds, self.join_ratio, self.seed, self.weighting,
            datamodule.public_inputs()))
        holds_clients = engine is None or engine.holds_clients
        self.population = Population(
            datamodule, self.dist if holds_clients else OwnedClients(self.fabric, ()),
            self.dist.broadcast(model.client_state()), self.client_state_storage,
            self.client_state_dir or self.default_root_dir, self.rounds, self.join_ratio,
            self.batch_size, memory_format)
        self.loop = LocalLoop(self.fabric, self.batch_size, **self.local_options)
        self.evaluator = Evaluator(
            self.fabric, self.dist, self.population, self.loop,
            on_device(datamodule.global_test(), device, memory_format), self.eval_batch_size,
            self.seed)
        self.batching_note: str | None = None
        self.engine = engine or self._local_engine(model)
        self.engine_name = getattr(self.engine, "name", SIMULATOR)
        self.grad_scale = RoundGradScale(ClientGradScale(self.fabric).initial)
        self.protocol = RoundProtocol(
            self.server, self.engine, self.evaluator, self.dist, model, self.num_clients,
            self.rounds, self.join_ratio, self.drop_rate, self.weighting, self.seed,
            self.eval_every, self.grad_scale)
        self.writer = RunWriter(
            self.dist, self.default_root_dir,
            self.run_name or default_run_name(model, datamodule, self.seed, self.engine_name),
            self.loggers,
            self.wandb_group or f"{method}-{datamodule.source}-{datamodule.partition}",
            self.wandb_project, self.progress_bar, self.verbose)
        self.history = []
        self.last_client_scores: dict[int, dict[str, Score]] = {}
        self.round_seconds: list[float] = []  # train + aggregate time of each round run here
        self.totals = {"seconds": 0.0, "bytes_up": 0, "bytes_down": 0}

    def _local_engine(self, model: FederatedClient) -> LocalEngine:
        """The simulator's engine: batched where asked and the method qualifies (else the
        one-line reason is kept for the run's header)."""
        engine_args = (self.fabric, model, self.population, self.loop, self.evaluator,
                       self.seed, self.local_epochs, self.share_class_counts)
        if self.batched_clients == 1:
            return LocalEngine(*engine_args)
        refusal = batching_refusal(model, self.precision, self.local_options["optimizer_state"],
                                   self.local_options["gradient_clip_val"])
        if refusal is None:
            return BatchedEngine(*engine_args, group_size=self.batched_clients)
        self.batching_note = (f"fedlight: batched_clients: {self.batched_clients} not used, "
                              f"clients train one after another ({refusal})")
        return LocalEngine(*engine_args)

    def _write_header(self, folder: Any) -> None:
        # The first line says which fedlight wrote the run (a YAML comment: the file still
        # runs as fedlight fit -c <run>/config.yaml).
        folder.write_text("config.yaml", f"# fedlight=={__version__}\n"
                          + (self.run_config or to_yaml(self._hyperparameters())))
        self.datamodule.save_partition(folder.path)
        if self.verbose:
            print(self.datamodule.stats_table())
            device = self.fabric.device
            for hint in (devices_note(self.devices, self.fabric.world_size, device),
                         precision_hint(self.precision, device),
                         self.batching_note):
                if hint:
                    print(hint)

    def _hyperparameters(self) -> dict[str, Any]:
        fields = ("rounds", "join_ratio", "local_epochs", "batch_size", "eval_every", "seed",
                  "weighting", "drop_rate", "reinitialize", "threads")
        # the evaluation protocol only where set, so runs that leave it to the method resume
        # from checkpoints written before the option existed
        protocol = ({} if self.evaluate_after_local_training is None else
                    {"evaluate_after_local_training": self.evaluate_after_local_training})
        # the memory format changes float results: stored where it is not the default format,
        # so runs from before the option resume
        layout: dict[str, Any] = {"memory_format": "channels_last"} if self.channels_last else {}
        if isinstance(self.engine, BatchedEngine):  # likewise batched training
            layout["batched_clients"] = self.batched_clients
        return describe_run(self.client, self.datamodule, self.server,
                            {**{k: getattr(self, k) for k in fields}, **self.local_options,
                             "precision": self.precision, **protocol, **layout},
                            self.engine_name)

    # ================================================================= the round loop
    def _fit_rounds(self, start_round: int) -> None:
        """Rounds ``start_round`` .. ``rounds - 1``; a first SIGINT / SIGTERM ends the loop after
        the round in progress, with a checkpoint of it (RunInterrupted)."""
        self.protocol.keep_from = start_round
        signals = StopSignals(announce=self.dist.is_writer)
        with (self.writer.progress(self.rounds) as progress,
              signals if self.engine.holds_clients else contextlib.nullcontext()):
            progress.advance_to(start_round)
            for round_idx in range(start_round, self.rounds):
                row = self._run_round(round_idx)
                if row is not None:
                    self.history.append(row)
                    self.writer.append(row)
                self.rounds_done = round_idx + 1
                progress.update(self.rounds_done, self.history[-1] if self.history else {})
                stop = bool(self.dist.broadcast(signals.requested))  # rank 0 decides for all
                names = [BEST] if row is not None and self._best_on_validation(row) else []
                if stop or self.rounds_done % self.checkpoint_every == 0 or (
                        self.rounds_done == self.rounds):
                    names.append(LAST)
                if names:
                    self._save_checkpoint(self.rounds_done, names)
                    self.protocol.keep_from = self.rounds_saved
                if stop and self.rounds_done < self.rounds:
                    raise RunInterrupted(self.rounds_done)

    def _resume_hint(self) -> str:
        hint = getattr(self.engine, "resume_hint", None)
        if hint:
            return hint
        if self.command:
            return f"{self.command} --ckpt_path last"
        return "fit(...) with the same configuration and ckpt_path='last'"

    def _run_round(self, round_idx: int) -> dict[str, Any] | None:
        stats, row = self.protocol.run_round(round_idx)
        self.round_seconds.append(stats["seconds"])
        for key in self.totals:
            self.totals[key] += stats[key]
        if row is None:
            return None
        self.last_client_scores = self.evaluator.last_client_scores
        for probe in self.probes:
            row.update(probe.on_round_end(self, round_idx))
        return row

    # ================================================================= the end
    def _finish(self) -> dict[str, Any]:
        rounds_done = self.history[-1]["round"] if self.history else 0
        return self.writer.finish(self.history, {
            "method": type(self.client).__name__,
            "server": type(self.server).__name__,
            "engine": self.engine_name,
            "rounds": rounds_done,
            "num_clients": self.num_clients,
            "seconds": self.totals["seconds"],
            "bytes_up": self.totals["bytes_up"],
            "bytes_down": self.totals["bytes_down"],
            **self.server.summary(rounds_done),
        }, self.evaluator.per_client_rows())


__all__ = ["MOVED_OPTIONS", "FederatedTrainer", "derive_seed", "sample_clients"]
