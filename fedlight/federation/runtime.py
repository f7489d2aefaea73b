"""The client runtime: the one way a client's state is loaded into the module, the client
trained on a task and scored, whatever carries the clients' work out (the simulator's engines,
a Flower SuperNode, the analyses of a finished run). The module is set up before
(client_setup.py).

:class:`ClientRuntime` owns the client module that plays every client this process serves in
turn, the :class:`~fedlight.federation.population.Population` of those clients (their data,
their private-state store), the local loop and the fp16 loss scale. :meth:`ClientRuntime.load`
is the only code that loads a client's shared and private state into the module, and
:meth:`ClientRuntime.upload_index` the only choice of the phase the upload is taken after.
Its two steps are the
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
from fedlight.compat.grad_scaler import restart_growth
from fedlight.core.client import Phase, Upload, upload_phase
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
from fedlight.federation.options import TrainerOptions
from fedlight.federation.population import Population
from fedlight.federation.processes.collectives import Distributed
from fedlight.federation.training_loop import TrainingLoop

Batch = tuple[Tensor, Tensor]
_EVAL_STREAM = 0x4556414C  # tags the fine-tune-at-evaluation stream apart from training


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
    """Loads, trains and scores the clients this process serves (module docstring), wired
    from the trainer's options: the data and private states of the clients ``owned`` names
    (:class:`Population`, kept in ``options.client_state_storage``), the local loop and the
    fp16 loss scale. The simulator, a Flower node and the analyses of a saved run all build
    it here, on a module set up by client_setup.py, so they train a client alike.

    Args:
        fabric: the process's Fabric (device, precision).
        client: the client module, set up (client_setup.set_up_client).
        datamodule: the run's data, set up.
        owned: which clients this process serves (Distributed; OwnedClients for a node).
        initial_private: the module's private state before training (what a client that
            never trained starts from).
        options: the trainer's options.
        memory_format: the memory format of the image batches (set_up_client's).
        storage: the private-state store, ``memory`` or ``disk`` (the simulator passes
            ``trainer.client_state_storage``; a node and an analysis keep theirs in memory).
        storage_dir: the folder of a ``disk`` store (None: the temporary folder).
    """

    def __init__(self, fabric: Fabric, client: FederatedClient,
                 datamodule: FederatedDataModule, owned: Distributed,
                 initial_private: dict[str, Tensor], options: TrainerOptions,
                 memory_format: torch.memory_format = torch.contiguous_format,
                 storage: str = "memory", storage_dir: str | Path | None = None) -> None:
        join_ratio = mean_join_ratio(datamodule.num_clients, options.join_ratio,
                                     options.random_join_ratio)
        self.fabric, self.client = fabric, client
        self.population = Population(datamodule, owned, initial_private, storage, storage_dir,
                                     options.rounds, join_ratio, options.batch_size,
                                     options.drop_last, memory_format)
        self.loop = TrainingLoop(fabric, options.batch_size,
                                 max_local_steps=options.max_local_steps,
                                 **options.local_options)
        self.seed, self.local_epochs = options.seed, options.local_epochs
        self.eval_batch_size = options.eval_batch_size
        self.share_class_counts = options.share_class_counts
        self.grad_scale = ClientGradScale(fabric)

    # ----------------------------------------------------------------- loading
    def load(self, client_id: int, round_idx: int, shared: Mapping[str, Tensor],
             private: Mapping[str, Tensor] | None = None) -> FederatedClient:
        """Put client ``client_id`` into the live module as it is at round ``round_idx``:
        ``shared`` (what the server sent) plus its private state (its stored one, or
        ``private`` where given), and its context. The one place a client's state is loaded
        into a module: training, scoring, every engine, Flower nodes and the analyses."""
        population = self.population
        own = population.states.get(client_id, population.initial_private)
        self.client.load_state_dict({**shared, **(own if private is None else private)},
                                    strict=True)
        self.client.context = population.context(client_id, round_idx)
        return self.client

    def load_global(self, shared: Mapping[str, Tensor]) -> FederatedClient:
        """Put the global model into the live module: ``shared`` (the aggregated state) plus
        the initial private state (what ``global_forward`` predicts with)."""
        self.client.load_state_dict({**shared, **self.population.initial_private}, strict=True)
        return self.client

    @staticmethod
    def upload_index(phases: Sequence[Phase]) -> int:
        """Which of ``phases`` the upload is taken after: the one that asks for it
        (``upload_after``), else the last. Every engine and the leakage probe ask here."""
        return upload_phase(phases)

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
        self.load(task.client_id, task.round_idx, task.shared)
        self.client.train()
        self.client.on_round_start(task.round_idx, task.message)
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
        phases = self.phases()
        result = self.loop.fit(self.client,
                               lambda: self.batches(task.client_id, started.generator),
                               phases, self.upload_index(phases),
                               self.population.optimizer_states.get(task.client_id))
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
            self.load(client_id, round_idx, shared)
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


__all__ = ["ClientGradScale", "ClientRound", "ClientRuntime", "private_scores", "python_state"]
