"""The trainer's options (``trainer:`` in a config) and every check of them.

:class:`TrainerOptions` is the base of :class:`~fedlight.federation.trainer.FederatedTrainer`:
its constructor is the trainer's (the command line's ``--trainer.*`` options come from its
signature and docstring), checks every value and keeps it under its own name. A bad value is
one :class:`~fedlight.core.errors.ConfigError` naming ``trainer.<option>`` and what is valid.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from fedlight.core.errors import ConfigError
from fedlight.core.rules import WEIGHTINGS
from fedlight.federation.callbacks import RoundCallback, check_callbacks
from fedlight.federation.memory_format import check_memory_format
from fedlight.federation.outputs.loggers import LOGGERS, LoggerName
from fedlight.federation.probes import Probe
from fedlight.federation.processes.fabric import PRECISIONS, STRATEGIES
from fedlight.federation.state.stores import STORAGES
from fedlight.federation.training_loop import CLIP_ALGORITHMS, OPTIMIZER_STATES


class TrainerOptions:
    """The options of a federated run (the trainer section of a config), checked on construction.

    Args:
        rounds: communication rounds.
        join_ratio: share of clients sampled each round (1.0 = all).
        random_join_ratio: draw each round's share anew, uniformly between join_ratio and 1
            (PFLlib's random_join_ratio, GPFL's Table 4: rho in [0.5, 1] is join_ratio 0.5
            with this on): the count of participants is drawn from max(1, round(join_ratio *
            N)) .. N from (seed, round), so a resumed run draws the same. Clients and server
            rules that read the join ratio (MAP's HPM, DP's accountant) see its mean.
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
        max_local_steps: at most this many optimizer steps per client and round, counted over
            all its local phases in order (a phase reached after the cap trains no step; the
            upload is still taken after its phase), on top of any phase's own limit; the
            fine-tuning of evaluation phases is not counted; batched_clients then trains one
            client after another. None = no cap. Where to privatize caps Shakespeare at 250.
        batch_size: local mini-batch size.
        drop_last: each local epoch drops its trailing batch when it is smaller than
            batch_size, as PFLlib's training loaders (torch's drop_last=True) do; a client
            with fewer samples than one batch still trains on them as one batch. False
            (default) keeps it; a trailing batch of one sample is dropped either way
            (BatchNorm cannot train on one sample).
        optimizer_state: fresh (a new optimizer every round) or persist (each client's
            optimizer and scheduler state is kept between rounds and in checkpoints).
        gradient_clip_val: clip gradients to this norm (or value) before each optimizer step,
            through the module's configure_gradient_clipping; None = no clipping.
        gradient_clip_algorithm: norm or value.
        eval_every: evaluate every this many rounds (the last round always is).
        eval_batch_size: batch size of evaluation.
        report_last: the summary's mean_last_<metric> (summary.json, the final table,
            fedlight report and sweep tables: "mean last-<n>") averages this many last
            evaluated rounds. Where to privatize selects on the mean of the last 5.
        per_client_scores: write per_client_rounds.csv in the run folder: one row per client
            and evaluated round with the client's scores (accuracy, loss, AUC, macro-F1 and
            test samples of each of its models: personalized, val_personalized where
            data.val_fraction > 0, a method's other heads) and the name of its domain or group
            where the data has one; appended each evaluated round, cut back to the checkpoint
            on resume. fedlight sweep turns it on for every run.
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
        wandb_labels: W&B config keys that label the run, each also a ``key=value`` tag
            (fedlight sweep labels its runs with sweep, method, setting and seed).
        checkpoint_every: write checkpoints/last.ckpt every this many rounds (and at the end).
        progress_bar: show a progress bar over rounds.
        verbose: print the partition table and the final summary table.
        probes: callbacks run after each evaluated round that add metric columns, e.g.
            DLGProbe (gradient-inversion leakage).
        callbacks: round callbacks (fedlight.federation.callbacks.RoundCallback, Lightning's
            shape): hooks at the start and end of fit and of each round, with the round's
            metrics; e.g. EarlyStopping (stop when a metric has not improved for patience
            evaluations; the stop is recorded in the checkpoint).
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
            one vectorized computation (the method's own training_step vmapped over their
            stacked parameters and buffers; see fedlight/federation/engines/batched.py), and
            scores the clients the same way (their eval_outputs vmapped):
            FedAvg, FedPer, FedRep, FedBN, GPFL, MAP / FedRS / FedPHP, FedPick, Privatize,
            AutoSA / AutoCS / AutoHS, FedRoD, Ditto, FedProto and every method that keeps the
            base step; the others train one client after another with a one-line note.
            Results agree with the loop's to float tolerance. ``measure``: at the first
            round, the first steps of the run's own clients are timed each way (the loop,
            batched, and batched with CUDA graphs where cuda_graphs allows them), with no
            effect on the results, and the fastest trains the run; one line gives each
            way's seconds per client step and the choice, which the run folder records
            (engine_choice.json and the checkpoints: a resumed run keeps it). ``auto``
            (default): on a GPU ``measure``, with as many clients at once as its free memory
            holds (all of a round's where they fit); on a CPU one after another without
            measuring (batched is slower there: 1.6x the loop with K = 4,
            benchmarks/batched.py). 1: one client after another. Where batched clients
            fail in the first round they train (an error other than a fedlight user
            error), that round is trained again with the loop from the same state and the
            run goes on with the loop, with one line naming the cause.
        cuda_graphs: with batched clients on a GPU at 32-true precision, capture the batched
            step once in a CUDA graph and replay it (steps whose clients all train a full
            batch); False runs every step eagerly.

    The server side is the client's own rule (configure_server), or the server given to
    fit (YAML: a top-level server: section) where the method allows it.
    """

    def __init__(
        self,
        rounds: int = 100,
        join_ratio: float = 1.0,
        random_join_ratio: bool = False,
        drop_rate: float = 0.0,
        weighting: Literal["samples", "uniform"] = "samples",
        seed: int = 0,
        reinitialize: bool = True,
        local_epochs: int = 1,
        max_local_steps: int | None = None,
        batch_size: int = 10,
        drop_last: bool = False,
        optimizer_state: Literal["fresh", "persist"] = "fresh",
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: Literal["norm", "value"] = "norm",
        eval_every: int = 1,
        eval_batch_size: int = 512,
        report_last: int = 10,
        per_client_scores: bool = False,
        evaluate_after_local_training: bool | None = None,
        share_class_counts: bool = True,
        default_root_dir: str = "runs",
        run_name: str | None = None,
        logger: LoggerName | list[LoggerName] | bool = "csv",
        wandb_project: str = "fedlight",
        wandb_group: str | None = None,
        wandb_labels: dict[str, str | int | float] | None = None,
        checkpoint_every: int = 10,
        progress_bar: bool = True,
        verbose: bool = True,
        probes: list[Probe] | None = None,
        callbacks: list[RoundCallback] | None = None,
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
        batched_clients: int | Literal["auto", "measure"] = "auto",
        cuda_graphs: bool = True,
    ) -> None:
        check_counts(rounds=rounds, local_epochs=local_epochs, batch_size=batch_size,
                     eval_every=eval_every, checkpoint_every=checkpoint_every,
                     eval_batch_size=eval_batch_size, workers_per_device=workers_per_device)
        check_batched_clients(batched_clients)
        check_sharing(join_ratio, drop_rate, weighting)
        check_protocol(max_local_steps, report_last, drop_last)
        check_processes(strategy, precision, threads, client_state_storage)
        check_training_loop(optimizer_state, gradient_clip_val, gradient_clip_algorithm)
        self.rounds, self.join_ratio, self.drop_rate = rounds, join_ratio, drop_rate
        self.weighting, self.seed, self.reinitialize = weighting, seed, reinitialize
        self.local_epochs, self.batch_size, self.drop_last = local_epochs, batch_size, drop_last
        self.local_options: dict[str, Any] = dict(
            optimizer_state=optimizer_state, gradient_clip_val=gradient_clip_val,
            gradient_clip_algorithm=gradient_clip_algorithm)
        self.eval_every, self.eval_batch_size = eval_every, eval_batch_size
        self.evaluate_after_local_training = evaluate_after_local_training
        self.share_class_counts = share_class_counts
        self.random_join_ratio, self.max_local_steps = random_join_ratio, max_local_steps
        self.report_last, self.per_client_scores = report_last, per_client_scores
        self.default_root_dir, self.run_name = Path(default_root_dir), run_name
        self.loggers = normalize_loggers(logger)
        self.wandb_project, self.wandb_group = wandb_project, wandb_group
        self.wandb_labels = dict(wandb_labels or {})
        self.checkpoint_every = checkpoint_every
        self.progress_bar, self.verbose = progress_bar, verbose
        self.probes = list(probes or [])
        self.callbacks = check_callbacks(callbacks)
        self.accelerator, self.devices, self.num_nodes = accelerator, devices, num_nodes
        self.precision, self.strategy = str(precision), strategy
        self.client_state_storage, self.client_state_dir = client_state_storage, client_state_dir
        self.threads = threads
        self.workers_per_device = workers_per_device
        self.memory_format = check_memory_format(memory_format)
        self.batched_clients, self.cuda_graphs = batched_clients, bool(cuda_graphs)

    @classmethod
    def from_saved(cls, trainer: dict[str, Any]) -> TrainerOptions:
        """The options of a saved run's trainer section (a checkpoint's ``config["trainer"]``);
        what it does not record keeps its default."""
        known = inspect.signature(cls.__init__).parameters
        return cls(**{key: value for key, value in trainer.items() if key in known})


def check_counts(**counts: int) -> None:
    """Refuse a count below 1."""
    for name, value in counts.items():
        if value < 1:
            raise ConfigError(f"trainer.{name} must be at least 1, got {value}")


def check_batched_clients(batched_clients: int | str) -> None:
    """Refuse a ``batched_clients`` that is neither ``auto``, ``measure`` nor a positive
    integer."""
    if batched_clients in ("auto", "measure"):
        return
    if isinstance(batched_clients, bool) or not isinstance(batched_clients, int) or (
            batched_clients < 1):
        raise ConfigError(f"trainer.batched_clients must be 'auto' or a positive integer, got "
                          f"{batched_clients!r} (1 trains clients one after another); "
                          "'measure' times both ways on the run's first steps and keeps the "
                          "faster")


def check_sharing(join_ratio: float, drop_rate: float, weighting: str) -> None:
    """Refuse a join ratio outside (0, 1], a drop rate outside [0, 1) and an unknown
    weighting."""
    if not 0 < join_ratio <= 1:
        raise ConfigError(f"trainer.join_ratio must be in (0, 1], got {join_ratio}")
    if not 0 <= drop_rate < 1:
        raise ConfigError(f"trainer.drop_rate must be in [0, 1), got {drop_rate}")
    if weighting not in WEIGHTINGS:
        raise ConfigError(f"trainer.weighting: unknown weighting {weighting!r}; valid: "
                          f"{', '.join(WEIGHTINGS)}")


#: ``trainer.threads`` values that are not a thread count.
THREAD_RULES = ("auto", None)


def check_protocol(max_local_steps: int | None, report_last: int, drop_last: bool) -> None:
    """Refuse a step cap that is not a positive integer or None, a reporting window below 1
    and a ``drop_last`` that is not a boolean."""
    if max_local_steps is not None and (isinstance(max_local_steps, bool) or not isinstance(
            max_local_steps, int) or max_local_steps < 1):
        raise ConfigError(f"trainer.max_local_steps must be a positive integer or None (no "
                          f"cap), got {max_local_steps!r}")
    if isinstance(report_last, bool) or not isinstance(report_last, int) or report_last < 1:
        raise ConfigError(f"trainer.report_last must be an integer >= 1 (evaluated rounds "
                          f"averaged in mean_last_*), got {report_last!r}")
    if not isinstance(drop_last, bool):
        raise ConfigError(f"trainer.drop_last must be true or false, got {drop_last!r}")


#: Options added after runs were checkpointed, at the value that computes what runs computed
#: before they existed: a run records them (and a resume compares them) only at another
#: value, so checkpoints written before they existed still resume.
ADDED_OPTION_DEFAULTS: dict[str, Any] = {"random_join_ratio": False, "max_local_steps": None,
                                         "drop_last": False}


def added_options(options: TrainerOptions) -> dict[str, Any]:
    """The ADDED_OPTION_DEFAULTS options that ``options`` sets to another value."""
    return {name: getattr(options, name) for name, default in ADDED_OPTION_DEFAULTS.items()
            if getattr(options, name) != default}


def check_processes(strategy: str, precision: str, threads: int | str | None,
                    client_state_storage: str) -> None:
    """Refuse what the processes of a run cannot be: a sharding strategy, a precision that does
    not keep float32 weights, a thread count below 1 and an unknown state storage."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"trainer.strategy: unknown strategy {strategy!r}; valid: "
                          f"{', '.join(STRATEGIES)} (the sharding strategies split ONE model "
                          "across devices; fedlight runs different clients on different processes)")
    if str(precision) not in PRECISIONS:
        # methods compute on their data outside the training step (prototypes, GPFL's
        # conditions, Per-FedAvg's functional steps) with float32 inputs, which a float16 /
        # float64 model rejects
        raise ConfigError(f"trainer.precision {precision!r} is not supported; valid: "
                          f"{', '.join(PRECISIONS)} (fedlight trains float32 weights; the "
                          "'-true' half / double precisions and transformer-engine do not run)")
    check_threads(threads)
    if client_state_storage not in STORAGES:
        raise ConfigError(f"trainer.client_state_storage: unknown client_state_storage "
                          f"{client_state_storage!r}; valid: {', '.join(STORAGES)}")


def check_threads(threads: int | str | None) -> int | str | None:
    """Return ``threads`` when it is ``auto``, None or a count of at least 1; otherwise raise
    ConfigError naming it and the valid values."""
    valid = threads in THREAD_RULES or (isinstance(threads, int) and not isinstance(threads, bool)
                                        and threads >= 1)
    if not valid:
        raise ConfigError(f"trainer.threads must be 'auto', None or an integer >= 1, got "
                          f"{threads!r}")
    return threads


def check_training_loop(optimizer_state: str, gradient_clip_val: float | None,
                     gradient_clip_algorithm: str) -> None:
    """Refuse an unknown optimizer state, clip algorithm or a clip value that is not
    positive."""
    if optimizer_state not in OPTIMIZER_STATES:
        raise ConfigError(f"trainer.optimizer_state: unknown optimizer_state {optimizer_state!r}; "
                          f"valid: {', '.join(OPTIMIZER_STATES)}")
    if gradient_clip_algorithm not in CLIP_ALGORITHMS:
        raise ConfigError(f"trainer.gradient_clip_algorithm: unknown gradient_clip_algorithm "
                          f"{gradient_clip_algorithm!r}; valid: {', '.join(CLIP_ALGORITHMS)}")
    if gradient_clip_val is not None and gradient_clip_val <= 0:
        raise ConfigError(f"trainer.gradient_clip_val must be positive, got {gradient_clip_val}")


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


__all__ = ["ADDED_OPTION_DEFAULTS", "THREAD_RULES", "TrainerOptions", "added_options",
           "check_counts", "check_training_loop", "check_processes", "check_protocol",
           "check_sharing", "check_threads", "normalize_loggers"]
