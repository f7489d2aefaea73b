"""The client runtime: the one way a client module is prepared for a run, trained on a task
and scored, whatever carries the clients' work out (the simulator's engines, a Flower
SuperNode).

:class:`ClientRuntime` owns the client module that plays every client this process serves in
turn, the :class:`~fedlight.federation.population.Population` of those clients (their data,
their private-state store), the local loop and the fp16 loss scale. Its two steps are the
places every engine goes through: :meth:`ClientRuntime.train` (one task: seed from
``(seed, round, client)``, load, local phases, keep the private state, score where the task
asks) and :meth:`ClientRuntime.batches` (the batches a client trains on, in the order its
seed draws them). :meth:`ClientRuntime.score` scores a client, sending its per-class counts
only where the run shares them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric import Fabric
from torch import Tensor

from fedlight.clients.base import FederatedClient
from fedlight.compat import restart_growth
from fedlight.core.client import Phase, Upload
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ClientResult, Score, TrainTask
from fedlight.core.noise import reseed_noise
from fedlight.core.seeding import derive_seed, mean_join_ratio, seed_global_rngs
from fedlight.data.datamodule import FederatedDataModule, iterate_batches
from fedlight.federation.evaluation import (
    device_scores,
    read_scores,
    score_outputs,
    stacked_batch_outputs,
)
from fedlight.federation.memory_format import apply_memory_format
from fedlight.federation.options import TrainerOptions
from fedlight.federation.population import Population
from fedlight.federation.processes.collectives import Distributed
from fedlight.federation.processes.cpus import apply_threads
from fedlight.federation.training_loop import TrainingLoop

Batch = tuple[Tensor, Tensor]
_EVAL_STREAM = 0x4556414C  # tags the fine-tune-at-evaluation stream apart from training


def prepare_client(model: FederatedClient, datamodule: FederatedDataModule, seed: int,
                   reinit: bool, threads: int | str | None, device: torch.device) -> None:
    """What every run does before round 1, on the server side and on every client side: set
    torch's threads (trainer.threads), set up the data, check the class count and the shared /
    private patterns, and re-initialize the model from seed (reinit)."""
    if not isinstance(model, FederatedClient):
        raise TypeError(f"model must be a fedlight FederatedClient, got {type(model).__name__}")
    apply_threads(threads, device)
    datamodule.setup("fit")
    if model.num_classes != datamodule.num_classes:
        raise ConfigError(f"model has {model.num_classes} classes but data source "
                          f"{datamodule.source!r} has {datamodule.num_classes}")
    _ = model.partition  # resolve and check the shared / private patterns now
    if reinit:
        reinitialize(model, seed)


def reinitialize(client: FederatedClient, seed: int) -> None:
    """Give ``client`` the weights a construction right after ``torch.manual_seed(seed)`` gives
    (what the CLI does), without touching the global RNG state.

    The client is rebuilt with the arguments of its own constructor call and its state copied
    over, so every method's own initialization (zero-initialized heads, copies) is kept.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fresh = type(client)(**client.construction)
    client.load_state_dict(fresh.state_dict())


def place_client(model: FederatedClient, fabric: Fabric, memory_format: str) -> torch.memory_format:
    """Set the module up with Fabric (device, precision), put its weights in the run's memory
    format (returned: the image batches' format) and collect what it logs per round."""
    fabric.setup_module(model)
    placed = apply_memory_format(model, memory_format, fabric.device)
    model.capture_logs(True)
    return placed


class ClientGradScale:
    """The loss scale of Fabric's GradScaler (precision: 16-mixed on GPU) around one client's
    local training.

    Fabric's precision plugin holds one GradScaler per process, and the optimizer is rebuilt
    for every client and phase. Kept running across clients, the scale a client starts from
    would depend on which clients its process trained before it (so on the number of processes,
    on the order of training and on the engine); reset for every client, each local training
    would again waste its first steps backing off from 2**16. So each client starts from the
    scale the server side sends (start) and reports the scale it ended with (end). Without a
    scaler (32-bit, bf16) both are no-ops and the scale is None.
    """

    def __init__(self, fabric: Fabric) -> None:
        self.scaler = getattr(fabric.strategy.precision, "scaler", None)

    @property
    def initial(self) -> float | None:
        """The scaler's scale before any training (the run's first round starts from it)."""
        return float(self.scaler.get_scale()) if self.scaler is not None else None

    def start(self, value: float | None) -> None:
        """Start a client's training from scale value, growth counter at 0."""
        if self.scaler is not None and value is not None:
            restart_growth(self.scaler, value)

    def end(self) -> float | None:
        """The scale after a client's training."""
        return float(self.scaler.get_scale()) if self.scaler is not None else None


def private_scores(scores: Mapping[str, Score], share_class_counts: bool) -> dict[str, Score]:
    """scores as they may leave a client: without the per-class counts (which give away the
    client's test label histogram) unless the run shares them (trainer.share_class_counts)."""
    if share_class_counts:
        return dict(scores)
    return {name: dataclasses.replace(score, class_counts=[]) for name, score in scores.items()}


#: the attributes of a module that are torch's and Lightning's machinery (registries of
#: parameters, buffers, submodules and hooks; the trainer's references), not a client's own
_MACHINERY: set[str] = set()


def python_state(client: FederatedClient) -> dict[str, Any]:
    """The client module's own Python attributes (what a start sets: its context, what
    ``on_round_start`` computed), by reference: neither torch's and Lightning's machinery
    nor the logs being collected."""
    if not _MACHINERY:
        _MACHINERY.update(vars(L.LightningModule()), ("_federated_logs", "_in_local_loop"))
    return {name: value for name, value in vars(client).items() if name not in _MACHINERY}


@dataclasses.dataclass
class ClientRound:
    """A client started for its round (:meth:`ClientRuntime.begin`): its task, its batch-order
    generator and its Python attributes as the start left them (:func:`python_state`)."""

    task: TrainTask
    generator: torch.Generator
    attributes: dict[str, Any]


class ClientRuntime:
    """Prepares, trains and scores the clients this process serves (module docstring).

    Args:
        fabric: the process's Fabric (device, precision).
        client: the client module, placed (place_client).
        population: the clients' data and private states.
        loop: the local loop.
        seed: the run's seed.
        local_epochs: local epochs E.
        eval_batch_size: batch size of scoring.
        share_class_counts: whether scores leave with their per-class counts.
    """

    def __init__(self, fabric: Fabric, client: FederatedClient, population: Population,
                 loop: TrainingLoop, seed: int, local_epochs: int, eval_batch_size: int = 512,
                 share_class_counts: bool = True) -> None:
        self.fabric, self.client, self.population, self.loop = fabric, client, population, loop
        self.seed, self.local_epochs = seed, local_epochs
        self.eval_batch_size, self.share_class_counts = eval_batch_size, share_class_counts
        self.grad_scale = ClientGradScale(fabric)

    # ----------------------------------------------------------------- training
    def batches(self, client_id: int, generator: torch.Generator) -> Iterator[Batch]:
        """One epoch of ``client_id``'s training batches, shuffled by ``generator`` and, with
        ``data.augment``, each augmented on its device as it is drawn, from the same
        ``generator`` (after the epoch's order): so a client's augmentations are a function of
        ``(seed, round, client)``, differ across clients and rounds, repeat on resume and come
        in the same order whichever engine draws them. Evaluation data, and the training data
        a method reads itself (``context.train_data``: MAP's BatchNorm re-estimation,
        prototypes), are never augmented; the fine-tuning of evaluation phases trains on
        augmented batches like local training."""
        batches = iterate_batches(*self.population.train_data[client_id], self.loop.batch_size,
                                  generator, drop_last=self.population.drop_last)
        augmentation = self.population.augmentation
        if augmentation is None:
            return batches
        return ((augmentation(x, generator), y) for x, y in batches)

    def start(self, task: TrainTask) -> torch.Generator:
        """Load the task's client for training: the global generators and its batch order
        seeded from ``(seed, round, client)``, the round's loss scale, the download and its
        private state, train mode, ``on_round_start``. Returns the batch-order generator."""
        seed = derive_seed(self.seed, task.round_idx, task.client_id)
        self.grad_scale.start(task.loss_scale)
        seed_global_rngs(seed, self.fabric.device)
        reseed_noise(self.client, seed)
        self.population.start_training(self.client, task.client_id, task.round_idx,
                                       task.shared, task.message)
        return torch.Generator().manual_seed(seed)

    def begin(self, task: TrainTask) -> ClientRound:
        """:meth:`start` the task's client, once for its round, and return the round's handle
        (:class:`ClientRound`): :meth:`resume` makes the live module that client again
        (another client may have been started in between), :meth:`finish` ends the round."""
        generator = self.start(task)
        return ClientRound(task, generator, python_state(self.client))

    def resume(self, started: ClientRound) -> None:
        """Make the live module the client of ``started`` again, as its start left it: its
        Python attributes (context, what ``on_round_start`` set) and train mode; its
        parameters and buffers are the caller's to load."""
        vars(self.client).update(started.attributes)
        self.client.train()

    def train(self, task: TrainTask) -> ClientResult:
        """One client's round: local training from the task's download, then its scores
        where the task asks for them."""
        started = self.begin(task)
        result = self.loop.fit(self.client,
                               lambda: self.batches(task.client_id, started.generator),
                               self.phases(), self.population.optimizer_states.get(task.client_id))
        return self.finish(started, result.upload, result.loss_sum, result.steps,
                           result.optimizer_states)

    def phases(self) -> list[Phase]:
        """The loaded client's local schedule."""
        return self.client.local_phases(self.local_epochs)

    def finish(self, started: ClientRound, upload: Upload, loss_sum: Tensor, steps: int,
               optimizer_states: dict[int, dict[str, Any]],
               logs: Mapping[str, Tensor] | None = None) -> ClientResult:
        """End the round of the client ``started`` (:meth:`begin`), trained and in the live
        module: ``on_round_end``, its private and optimizer state kept, its logged values
        (``logs``, where given, adds what the steps logged), its scores where its task asks
        (``started.task``), the loss scale it ended with."""
        task = started.task
        self.client.on_round_end()
        self.population.finish_training(self.client, task.client_id, optimizer_states)
        logged = self.client.pop_federated_logs()
        scores = self.score(task.client_id, task.round_idx) if task.score else {}
        return ClientResult(task.client_id, upload, loss_sum, steps,
                            {**logged, **(logs or {})}, scores, self.grad_scale.end())

    # ----------------------------------------------------------------- scoring
    def score(self, client_id: int, round_idx: int,
              shared: Mapping[str, Tensor] | None = None) -> dict[str, Score]:
        """Score ``client_id`` (loaded from ``shared`` + its private state, or as the module
        holds it now when ``shared`` is None) on its test split (and validation split), after
        its evaluation phases if it has any; per-class counts only where the run shares them."""
        client = self.client
        if shared is not None:
            self.population.load(client, client_id, round_idx, shared)
        phases = client.evaluation_phases()
        if phases:
            self._fine_tune(client_id, round_idx, phases)
        client.eval()
        return self._score_splits([client_id], lambda xs, ys: [
            score_outputs(client.eval_outputs, xs[0], ys[0], self.eval_batch_size)])[0]

    def score_together(self, client_ids: Sequence[int],
                       outputs_fn: Callable[[Tensor], Mapping[str, Tensor]]
                       ) -> list[dict[str, Score]]:
        """Score ``client_ids`` whose models answer together: ``outputs_fn`` maps inputs
        ``[K, b, ...]`` to each name's logits ``[K, b, C]``, row k from ``client_ids[k]``'s
        model (the batched engine's vmapped ``eval_outputs``). The same scores as
        :meth:`score` of each (to float tolerance), on the same splits and batches, read
        from the device once per split for all the clients."""
        return self._score_splits(client_ids, lambda xs, ys: read_scores([
            device_scores(outputs, y, self.eval_batch_size) for outputs, y in zip(
                stacked_batch_outputs(outputs_fn, xs, self.eval_batch_size), ys, strict=True)],
            [len(y) for y in ys]))

    def _score_splits(self, client_ids: Sequence[int],
                      score_fn: Callable[[list[Tensor], list[Tensor]], list[dict[str, Score]]]
                      ) -> list[dict[str, Score]]:
        """Each client's scores on its test split and, where ``data.val_fraction`` gave it
        one, its validation split (names prefixed ``val_``); ``score_fn(xs, ys)`` scores the
        clients' ``(x, y)`` of one split. Per-class counts only where the run shares them."""
        results: list[dict[str, Score]] = [{} for _ in client_ids]
        with self.fabric.autocast():
            for prefix, data in (("", self.population.test_data),
                                 ("val_", self.population.val_data)):
                xs = [data[client_id][0] for client_id in client_ids]
                ys = [data[client_id][1] for client_id in client_ids]
                if prefix and not any(len(y) for y in ys):
                    continue
                for result, scores in zip(results, score_fn(xs, ys), strict=True):
                    result.update({prefix + name: score for name, score in scores.items()})
        return [private_scores(result, self.share_class_counts) for result in results]

    def _fine_tune(self, client_id: int, round_idx: int, phases: list[Phase]) -> None:
        """The client's evaluation phases (fine-tuning that is scored, then thrown away), on
        batches drawn from ``(seed, round, client)`` on a stream of their own."""
        seed = derive_seed(self.seed, round_idx, client_id, _EVAL_STREAM)
        generator = torch.Generator().manual_seed(seed)
        reseed_noise(self.client, seed)
        self.client.train()
        for phase in phases:
            self.loop.run_phase(self.client, phase,
                                lambda: self.batches(client_id, generator))
        self.client.pop_federated_logs()  # fine-tuning losses are not the round's training losses


def build_client_runtime(fabric: Fabric, client: FederatedClient,
                         datamodule: FederatedDataModule, dist: Distributed,
                         initial_private: dict[str, Tensor], options: TrainerOptions,
                         memory_format: torch.memory_format = torch.contiguous_format,
                         storage: str = "memory",
                         storage_dir: str | Path | None = None) -> ClientRuntime:
    """The client side of a process, wired from the trainer's options: the data and private
    states of the clients ``dist`` owns (``Population``, kept in ``storage``), the local loop
    and the runtime that trains and scores them. The simulator, a Flower node and the analyses
    of a saved run all build it here, so they train a client alike."""
    join_ratio = mean_join_ratio(datamodule.num_clients, options.join_ratio,
                                 options.random_join_ratio)
    population = Population(datamodule, dist, initial_private, storage, storage_dir,
                            options.rounds, join_ratio, options.batch_size, options.drop_last,
                            memory_format)
    loop = TrainingLoop(fabric, options.batch_size, max_local_steps=options.max_local_steps,
                     **options.local_options)
    return ClientRuntime(fabric, client, population, loop, options.seed, options.local_epochs,
                         options.eval_batch_size, options.share_class_counts)


__all__ = ["ClientGradScale", "ClientRound", "ClientRuntime", "build_client_runtime",
           "place_client", "prepare_client", "private_scores", "python_state", "reinitialize"]
