"""Building a run: the client module prepared and placed, the server rule chosen and set up,
this process's clients, the client runtime, the engine, the round protocol and the writer of
the run folder, wired together as one :class:`Federation` (what FederatedTrainer drives), and the
run's state as a checkpoint holds it."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from lightning.fabric import Fabric

from fedlight.clients.base import FederatedClient
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ClientEngine, EngineHost
from fedlight.core.rules import ServerContext, ServerRule
from fedlight.core.seeding import mean_join_ratio
from fedlight.data.datamodule import FederatedDataModule
from fedlight.federation.client_setup import set_up_client
from fedlight.federation.engines.batched import (
    batching_refusal,
    padding_refusal,
    scoring_refusal,
    step_capture,
    steps_note,
)
from fedlight.federation.engines.choice import (
    BATCHED,
    CHOICE_FILE,
    GRAPHS,
    LOOP,
    ChosenEngine,
    make_engine,
)
from fedlight.federation.engines.sequential import SequentialEngine
from fedlight.federation.evaluation import Evaluator
from fedlight.federation.memory_format import on_device
from fedlight.federation.options import TrainerOptions, added_options
from fedlight.federation.outputs.checkpoints import (
    check_evaluable,
    check_resumable,
    load_checkpoint,
    run_checkpoint,
)
from fedlight.federation.outputs.describe import describe_run
from fedlight.federation.outputs.writer import RunWriter, default_run_name
from fedlight.federation.population import Population
from fedlight.federation.processes.collectives import Distributed, OwnedClients
from fedlight.federation.processes.cpus import devices_note, precision_hint
from fedlight.federation.protocol import RoundGradScale, RoundProtocol
from fedlight.federation.runtime import ClientRuntime


@dataclass
class Federation:
    """The federation one run drives, wired by :func:`build_run`: the client module, its
    data, the server rule, this process's clients (population and runtime), the evaluator,
    the engine, the round protocol and the writer of the run folder."""

    client: FederatedClient
    datamodule: FederatedDataModule
    rule: ServerRule
    dist: Distributed
    population: Population
    runtime: ClientRuntime
    evaluator: Evaluator
    served: ClientEngine  # the engine as built (a ChosenEngine holds the one in use)
    grad_scale: RoundGradScale
    protocol: RoundProtocol
    writer: RunWriter
    channels_last: bool
    notes: list[str]  # one line each, printed under the partition table (verbose)

    @property
    def method(self) -> str:
        return type(self.client).__name__

    @property
    def engine(self) -> ClientEngine:
        """The engine that carries the clients' work out now (of a chosen one: the engine of
        the way chosen, see engines/choice.py)."""
        engine = self.served
        return engine.current if isinstance(engine, ChosenEngine) else engine

    @property
    def engine_choice(self) -> dict[str, Any] | None:
        """The record of the way the clients train, where the engine chose it (None before
        the choice, and for engines that do not choose)."""
        engine = self.served
        if isinstance(engine, ChosenEngine) and engine.choice is not None:
            return engine.choice.record()
        return None

    def hyperparameters(self, options: TrainerOptions) -> dict[str, Any]:
        """What the run logs, checkpoints and (from Python) writes as config.yaml; a resume
        must match it (outputs/checkpoints.py)."""
        fields = ("rounds", "join_ratio", "local_epochs", "batch_size", "eval_every", "seed",
                  "weighting", "drop_rate", "reinitialize", "threads", "precision",
                  "evaluate_after_local_training")
        trainer = {**{k: getattr(options, k) for k in fields}, **options.local_options,
                   "memory_format": "channels_last" if self.channels_last else "contiguous",
                   "batched_clients": (options.batched_clients
                                       if isinstance(self.served, ChosenEngine)
                                       else 1),
                   **added_options(options)}
        return describe_run(self.client, self.datamodule, self.rule, trainer, self.engine.name)

    def checkpoint(self, rounds_done: int, names: list[str], config: dict[str, Any],
                   **extra: Any) -> None:
        """Write the state after ``rounds_done`` rounds to ``checkpoints/<name>`` for each
        name (a collective: every rank takes part; a failed write, such as a full disk, is
        raised on every rank)."""
        population = self.population.checkpoint()
        choice = self.engine_choice
        if choice is not None:
            extra = {**extra, "engine_choice": choice}

        def write() -> None:
            state = run_checkpoint(rounds_done, self.method, self.rule, population,
                                   grad_scale=self.grad_scale.value, config=config, **extra)
            for name in names:
                self.writer.save_checkpoint(state, name)

        self.dist.from_writer(write)

    def restore(self, checkpoint: dict[str, Any], states_only: bool = False) -> int:
        """Load the rule's, the clients' (and, unless ``states_only``, the loss scale's, the
        metrics file's and the per-client file's, and the way its clients trained where the
        engine chose it) state from ``checkpoint``; returns its rounds done."""
        engine = self.served
        if (not states_only and isinstance(engine, ChosenEngine)
                and checkpoint.get("engine_choice")):
            engine.keep(checkpoint["engine_choice"])
        self.rule.load_state_dict(checkpoint["server"])
        self.rule.to(self.dist.device)
        self.population.restore(checkpoint)
        rounds_done = int(checkpoint["rounds_done"])
        if not states_only:
            self.grad_scale.load(checkpoint["grad_scale"])
            self.writer.opened.write_history(checkpoint["history"])
            self.writer.opened.cut_client_rows(rounds_done)
        return rounds_done

    def resume_point(self, ckpt_path: str | None, options: TrainerOptions
                     ) -> tuple[dict[str, Any], Path | None, dict[str, Any] | None]:
        """The run's :meth:`hyperparameters` under ``options``, the checkpoint file
        ``ckpt_path`` names and its content on this process (its clients' states), checked
        as resumable with them to ``options.rounds``; file and content None for a fresh
        run."""
        config = self.hyperparameters(options)
        if not ckpt_path:
            return config, None, None
        file = self.writer.checkpoint_file(ckpt_path)
        checkpoint = self.dist.share_checkpoint(lambda: load_checkpoint(file))
        check_resumable(checkpoint, self.method, type(self.rule).__name__, config,
                        options.rounds, self.client.reads_planned_rounds)
        return config, file, checkpoint

    def resume_hint(self, command: str | None) -> str:
        """How a user resumes this run once it stopped."""
        if self.engine.resume_hint:
            return self.engine.resume_hint
        if command:
            return f"{command} --ckpt_path last"
        return "fit(...) with the same configuration and ckpt_path='last'"

    def evaluate_checkpoint(self, ckpt_path: str, config: dict[str, Any],
                            stage: str) -> dict[str, float]:
        """validate / test: the model of the checkpoint ``ckpt_path`` names (``config`` is
        the run's, checked against it) scored as fit scores an evaluated round; test writes
        test_metrics.json."""
        file = self.writer.checkpoint_file(ckpt_path)
        checkpoint = self.dist.share_checkpoint(lambda: load_checkpoint(file))
        check_evaluable(checkpoint, self.method, config)
        self.writer.open_existing(file)
        rounds_done = self.restore(checkpoint, states_only=True)
        self.writer.announce("evaluating", file, rounds_done)
        metrics: dict[str, float] = self.protocol.evaluate(rounds_done, None)
        self.writer.print_metrics(stage, metrics)
        if stage == "test":
            self.writer.opened.write_json("test_metrics.json", metrics)
        return metrics

    def finish(self, history: list[dict[str, Any]], totals: dict[str, Any]) -> dict[str, Any]:
        """The run's summary (written with the closing files by the writer)."""
        rounds_done = history[-1]["round"] if history else 0
        return self.writer.finish(history, {
            "method": self.method, "server": type(self.rule).__name__,
            "engine": self.engine.name, "rounds": rounds_done,
            "num_clients": self.datamodule.num_clients, **totals,
            **self.rule.summary(rounds_done),
        }, self.evaluator.per_client_rows())


def build_run(options: TrainerOptions, fabric: Fabric, model: FederatedClient,
              datamodule: FederatedDataModule, server: ServerRule | None,
              engine: ClientEngine | None, host: EngineHost, reinit: bool) -> Federation:
    """Wire one run of ``model`` over ``datamodule`` (``engine`` None: the simulator's;
    ``server`` None: the method's own rule; ``reinit`` False keeps the module's weights, as
    when a checkpoint is evaluated)."""
    if engine is not None:
        engine.attach(host)  # an engine refuses what it cannot run before anything is built
    device = fabric.device
    memory_format = set_up_client(options, fabric, model, datamodule, reinit)
    rule = resolve_rule(model.configure_server(), server, type(model).__name__)
    dist = Distributed(fabric, [datamodule.client_train_size(i)
                                for i in range(datamodule.num_clients)])
    state, private = model.state_dict(), model.client_state()
    # Every process starts from rank 0's initial model, however it was built.
    initial_shared = dist.broadcast({k: state[k].detach().clone()
                                     for k in model.partition.shared}, device)
    initial_private = dist.broadcast(private)
    join_ratio = mean_join_ratio(datamodule.num_clients, options.join_ratio,
                                 options.random_join_ratio)
    rule.setup(initial_shared,
               ServerContext(datamodule.num_clients, options.rounds, join_ratio,
                             options.seed, options.weighting, datamodule.public_inputs()))
    holds_clients = engine is None or engine.holds_clients
    runtime = ClientRuntime(fabric, model, datamodule,
                            dist if holds_clients else OwnedClients(fabric, ()),
                            initial_private, options, memory_format,
                            options.client_state_storage,
                            options.client_state_dir or options.default_root_dir)
    population = runtime.population
    evaluator = Evaluator(fabric, dist, runtime.load_global,
                          on_device(datamodule.global_test(), device, memory_format),
                          options.eval_batch_size)
    notes = [note for note in (devices_note(options.devices, fabric.world_size, device),
                               precision_hint(options.precision, device)) if note]
    if engine is None:
        engine, batching_note = simulator_engine(options, runtime,
                                                 say if dist.is_writer and options.verbose
                                                 else quiet)
        notes += [batching_note] if batching_note else []
    grad_scale = RoundGradScale(runtime.grad_scale.initial)
    protocol = RoundProtocol(rule, engine, evaluator, dist, model, datamodule.num_clients,
                             options.rounds, options.join_ratio, options.drop_rate,
                             options.weighting, options.seed, options.eval_every, grad_scale,
                             options.random_join_ratio)
    method = type(model).__name__
    writer = RunWriter(
        dist, options.default_root_dir,
        options.run_name or default_run_name(model, datamodule, options.seed, engine.name),
        options.loggers,
        options.wandb_group or f"{method}-{datamodule.source.name}-{datamodule.partition.name}",
        options.wandb_project, options.progress_bar, options.verbose, options.report_last,
        options.per_client_scores,
        datamodule.client_names() if options.per_client_scores else None,
        options.wandb_labels)
    if isinstance(engine, ChosenEngine):
        engine.record = lambda record: writer.opened.write_json(CHOICE_FILE, record)
    return Federation(model, datamodule, rule, dist, population, runtime, evaluator, engine,
               grad_scale, protocol, writer, memory_format == torch.channels_last, notes)


def say(line: str) -> None:
    """Print one line of the run's own (flushed: a progress bar may follow)."""
    print(line, flush=True)


def warn(line: str) -> None:
    """Print one line on stderr, whatever the run's verbosity and rank."""
    print(line, file=sys.stderr, flush=True)


def quiet(line: str) -> None:
    """Print nothing (a run that is not verbose, a rank that does not write)."""


def simulator_engine(options: TrainerOptions, runtime: ClientRuntime,
                     say: Callable[[str], None] = say) -> tuple[ClientEngine, str | None]:
    """The simulator's engine: the loop where asked (``batched_clients: 1``), on a CPU with
    ``auto`` and where the method does not qualify for batched clients; otherwise a
    :class:`~fedlight.federation.engines.choice.ChosenEngine` of ``batched_clients: K``'s
    batched way, or of the fastest way measured at the first round (``measure``, ``auto`` on
    a GPU; ``say`` prints the measurement's line). With the one line for the run's header
    saying which and why (None when the loop was asked for)."""
    requested = options.batched_clients
    if requested == 1:
        return SequentialEngine(runtime), None
    device = runtime.fabric.device
    if requested == "auto" and device.type != "cuda":
        return SequentialEngine(runtime), ("fedlight: clients train one after another "
                                      f"(batched_clients: auto on {device.type}, where the "
                                      "loop is faster)")
    refusal = batching_refusal(runtime.client, options.precision,
                               options.local_options["optimizer_state"],
                               options.local_options["gradient_clip_val"])
    if refusal is not None:
        return SequentialEngine(runtime), (f"fedlight: batched_clients: {requested} not used, "
                                      f"clients train one after another ({refusal})")
    group_size = None if isinstance(requested, str) else int(requested)
    graphs = options.cuda_graphs and step_capture(runtime.fabric, True) is not None
    batched = GRAPHS if graphs else BATCHED
    measured = isinstance(requested, str)
    ways = (LOOP, BATCHED, GRAPHS) if measured and graphs else (
        (LOOP, BATCHED) if measured else (batched,))
    engine = ChosenEngine(runtime, ways, say, warn,
                          lambda way: make_engine(way, runtime, group_size))
    size = (f"up to {group_size} at once" if group_size is not None
            else "as many at once as the device's free memory holds")
    steps = steps_note(graphs, padding_refusal(runtime.client))
    scored = "scored together" if scoring_refusal(runtime.client) is None else (
        f"scored one after another: {scoring_refusal(runtime.client)}")
    if measured:
        return engine, (f"fedlight: batched_clients: {requested}: the first steps of round 1 "
                        f"are timed {' / '.join(ways)} and the fastest trains the run "
                        f"(batched: {size}, {scored})")
    return engine, f"fedlight: clients train batched, {size} ({steps}), {scored}"


def resolve_rule(default: ServerRule, override: ServerRule | None, method: str) -> ServerRule:
    """The rule a run uses: the client's default, or a fresh copy of the config's override
    where the default accepts it (wrappers such as DP are put around the default). The copy
    keeps an override object that serves several runs (a config parsed once, a rule passed to
    fit twice) from carrying one run's state (momentum, moments, a wrapped rule) into the next.

    Raises:
        ConfigError: the method's own rule cannot be replaced by override.
    """
    if override is None:
        return default
    rule = copy.deepcopy(override).wrap_default(default)
    if not default.accepts(rule):
        raise ConfigError(
            f"{method} aggregates with its own server rule {type(default).__name__}, which "
            f"server: {type(override).__name__} cannot replace; drop the server section or "
            f"use a {type(default).__name__} subclass")
    return rule


__all__ = ["Federation", "build_run", "resolve_rule", "simulator_engine"]
