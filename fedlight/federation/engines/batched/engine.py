"""Batched clients: several participants of a round trained as one vectorized computation.

The simulator trains a round's clients one after another on one live module. On a GPU a small
model's step for one client (a batch of 10 CIFAR images through a 4-layer CNN) leaves most of
the device idle and is bound by kernel launches, so ``trainer.batched_clients`` trains up to K
clients at once instead (``auto``, the default: on a GPU as many as fit in its free memory,
on a CPU one after another, which is faster there).

How a step is made: the clients' parameters and buffers are stacked, one tensor per name with
client k's values in row k, and the method's own ``training_step`` runs on them through
``torch.func.functional_call`` mapped over the rows with ``vmap`` (``stacked_step.py``), so a
method is never written twice. Per-client values the step reads (BatchNorm statistics,
frozen teachers, MAP's class scales, GPFL's conditional inputs, Ditto's received weights,
noise keys) are buffers, stacked like the weights. One backward and one optimizer over the
stacked tensors update every client: the optimizers fedlight builds (SGD with momentum and
weight decay, Adam, AdamW) update element by element with hyper-parameters shared by the
clients, exactly as each client's own optimizer would. Random draws come from each client's
:class:`~fedlight.core.noise.NoiseSource` (keyed from ``(seed, round, client)`` in both
engines), so a client draws the same noise batched as in the loop, whoever shares its batch.

Each client keeps its own batches: the same shuffled order from the same seed as the loop
(drawn through ``ClientRuntime.batches``), its own number of steps (a client whose data is
used up stops: its rows are kept from then on) and its own smaller last batch (the clients
whose batch at a step has another size run as a separate vmapped call of that size, and the
optimizer steps once for all). So the result equals the loop's to float tolerance (sums run
in another order), not bit for bit, and it does not depend on K.

No per-step overhead on a GPU: each phase of a group trains in a :class:`Workspace` whose
tensors (stacked parameters and buffers, optimizer state, input buffers, loss and log sums)
live at fixed addresses and are reused from round to round (loaded with ``copy_``, optimizer
state zeroed: SGD's momentum and Adam's moments start from zero exactly as a fresh
optimizer's); its full steps (every client active at the full batch size) are captured once
in a CUDA graph and replayed (``graphs.py``; 32-true precision, ``trainer.cuda_graphs``);
losses and logged values add up on the device and are read once per group; the optimizers
are built with ``foreach`` on a GPU (``capturable`` Adam under graphs).

What qualifies (:func:`batching_refusal`): a method whose step methods are the base class's or
declared ``batchable`` by the class that overrides them (FedAvg, FedPer, LG-FedAvg, FedRep,
FedBABU, Local, FedAWS, FedDF, SCARS, FedBN, GPFL, MAP / FedRS / FedPHP, FedPick, Privatize,
AutoSA / AutoCS / AutoHS, FedRoD, Ditto, FedProto), no Lightning loop hook overridden, no
``torch.nn.Dropout`` (``fedlight.core.noise.Dropout`` instead), at 32-bit or bf16 precision
(16-mixed keeps one loss scaler per client), with fresh optimizers and no gradient clipping.
Clients whose phases (names, trainable parameters, learning-rate scale) or
``batch_key()`` differ train in separate groups. Anything else trains one client after
another, with a one-line note.

Scoring is batched the same way: every client to score (its download plus its private state,
or its state right after training for methods scored then, such as MAP) is loaded, its
context-derived buffers built (``refresh_buffers``), and up to K clients' states are stacked
and run through the method's own ``eval_outputs`` mapped over the rows
(``StackedOutputs``); each client's test split is cut into the loop's evaluation batches,
padded to the longest client's, and scored as the loop scores it
(``ClientRuntime.score_together``). Methods that fine-tune before scoring (FedBABU,
Per-FedAvg) or override ``eval_outputs`` without declaring it batchable are scored one
after another (:func:`scoring_refusal`); the run's header line says which.

Measured on a CPU it is slower (the 4-layer CNN on 3x32x32, batch 10, one thread: a round
takes 1.6x the loop's time with K = 4 and 3.2x with K = 20, since vmap turns the convolutions
into grouped ones, which oneDNN runs slower than K separate ones), so it is meant for GPUs;
``benchmarks/batched.py`` times it, and ``benchmarks/gpu.py`` runs that on a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Any

import torch
from torch import Tensor, nn

from fedlight.clients.base import FederatedClient
from fedlight.core.client import Phase, upload_phase
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ClientResult, Score, State, TrainTask
from fedlight.federation.engines.graphs import Capture, ReplayedStep, cuda_graph
from fedlight.federation.engines.local import LocalEngine
from fedlight.federation.engines.stacked_step import StackedOutputs, StackedStep
from fedlight.federation.local_loop import (
    LocalLoop,
    check_phases,
    non_finite_loss,
    only_trainable,
    overrides,
    parse_optimizers,
    scale_lr,
    step_budget,
)
from fedlight.federation.runtime import ClientRuntime

Batch = tuple[Tensor, Tensor]
Rows = dict[str, Tensor]

#: the methods that make a client's local step: a class overriding one of them declares
#: ``batchable = True`` in its own body when its step can run vmapped (FederatedClient.batchable)
STEP_METHODS = ("training_step", "forward", "configure_optimizers", "optimizer_param_groups",
                "on_round_start", "on_round_end")
#: the methods that make a client's scores (scored batched where undeclared_step allows)
SCORING_METHODS = ("eval_outputs", "forward")
#: Lightning's hooks of the training loop (none of them runs in a batched step)
LOOP_HOOKS = ("on_train_start", "on_train_end", "on_train_epoch_start", "on_train_epoch_end",
              "on_train_batch_start", "on_train_batch_end", "on_before_zero_grad",
              "on_before_backward", "on_after_backward", "on_before_optimizer_step",
              "configure_gradient_clipping", "lr_scheduler_step", "optimizer_step")
DROPOUT = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout,
           nn.FeatureAlphaDropout)


def batching_refusal(client: FederatedClient, precision: str, optimizer_state: str,
                     gradient_clip_val: float | None) -> str | None:
    """Why ``client`` cannot train batched in this setting (see the module docstring), or
    None when it can."""
    undeclared = undeclared_step(client)
    if undeclared is not None:
        return undeclared
    for name in LOOP_HOOKS:
        if overrides(client, name):
            return f"{type(client).__name__} overrides the loop hook {name}"
    dropout = next((type(m).__name__ for m in client.modules()
                    if isinstance(m, DROPOUT) and m.p > 0), None)
    if dropout is not None:
        return (f"its model has torch's {dropout}, whose masks come from one global generator "
                "(fedlight.core.noise.Dropout draws per client)")
    if str(precision).startswith("16"):
        return "precision 16-mixed keeps one loss scaler per client"
    if optimizer_state != "fresh":
        return "optimizer_state persist keeps one optimizer state per client"
    if gradient_clip_val is not None:
        return "gradient clipping works on one client's gradients"
    return None


def scoring_refusal(client: FederatedClient) -> str | None:
    """Why the batched engine scores ``client``'s clients one after another (its evaluation
    phases fine-tune each client first; ``eval_outputs`` overridden without a ``batchable``
    declaration), or None when it scores them together."""
    if client.evaluation_phases():
        return f"{type(client).__name__} fine-tunes each client before scoring it"
    return undeclared_step(client, SCORING_METHODS)


def undeclared_step(client: FederatedClient,
                    methods: Sequence[str] = STEP_METHODS) -> str | None:
    """The first of ``methods`` overridden (by a class, or on the instance) without a
    ``batchable = True`` declaration in the overriding class's own body, as a reason."""
    for name in methods:
        if name in vars(client):
            return f"{type(client).__name__} overrides {name} on the instance"
    for cls in type(client).__mro__:
        if cls is FederatedClient:
            break
        own = vars(cls)
        overridden = [name for name in methods if name in own]
        if overridden and own.get("batchable") is not True:
            return f"{cls.__name__} overrides {overridden[0]} (not declared batchable)"
    return None


@dataclass
class PreparedClient:
    """A participant loaded and planned: its parameters and buffers before training, its
    phases, the key of the group it trains in and, per phase, the batches the loop would
    draw for it in order; after training, its state after each phase, loss sum, steps and
    logged means."""

    task: TrainTask
    start: Rows
    phases: list[Phase]
    key: Hashable
    batches: list[list[Batch]]
    rows: list[Rows] = field(default_factory=list)
    loss_sum: Tensor = field(default_factory=lambda: torch.zeros(()))
    steps: int = 0
    logs: dict[str, Tensor] = field(default_factory=dict)


def phase_batches(epoch_batches: Callable[[], Iterable[Batch]], phase: Phase,
                  step_limit: int | None = None) -> list[Batch]:
    """The batches one phase of the loop trains on, one epoch after another of
    ``epoch_batches()`` as the loop draws them (none after ``max_steps`` or ``step_limit``,
    the steps ``max_local_steps`` leaves)."""
    budget = step_budget(phase.max_steps, step_limit)
    batches: list[Batch] = []
    for _ in range(phase.epochs):
        if len(batches) >= budget:
            break
        for batch in epoch_batches():
            if len(batches) >= budget:
                break
            batches.append(batch)
    return batches


def schedule_signature(phases: Sequence[Phase]) -> tuple[Any, ...]:
    """What of a schedule a vmapped step shares: each phase's name, trainable parameters,
    learning-rate scale and upload point (epochs and step caps only shape the batches)."""
    return tuple((p.name, p.trainable, p.lr_scale, p.upload_after) for p in phases)


def client_state(client: nn.Module) -> Rows:
    """Detached copies of the module's parameters and buffers (non-persistent ones too)."""
    return {name: tensor.detach().clone()
            for name, tensor in chain(client.named_parameters(), client.named_buffers())}


def load_rows(client: nn.Module, rows: Rows) -> None:
    """Write one client's parameters and buffers into the live module."""
    with torch.no_grad():
        for name, tensor in chain(client.named_parameters(), client.named_buffers()):
            tensor.copy_(rows[name])


def device_rows(members: Sequence[int], device: torch.device) -> Tensor:
    """The row indices ``members`` on ``device``; to a GPU from pinned memory without
    blocking (a plain host-to-device copy of pageable memory waits for the queued work)."""
    index = torch.tensor(list(members), dtype=torch.long)
    if device.type == "cuda":
        return index.pin_memory().to(device, non_blocking=True)
    return index.to(device)


def resettable(optimizer: torch.optim.Optimizer) -> bool:
    """Whether zeroing the optimizer's state tensors makes it a fresh one exactly: SGD
    without dampening (momentum 0 x 0 + g = g, its first step), Adam and AdamW."""
    if type(optimizer) is torch.optim.SGD:
        return all(group["dampening"] == 0 for group in optimizer.param_groups)
    return type(optimizer) in (torch.optim.Adam, torch.optim.AdamW)


def reset_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """Make ``optimizer`` fresh: its state zeroed in place where :func:`resettable` (the
    tensors keep their addresses), dropped otherwise."""
    if not resettable(optimizer):
        optimizer.state.clear()
        return
    with torch.no_grad():
        for state in optimizer.state.values():
            for value in state.values():
                if isinstance(value, Tensor):
                    value.zero_()


def stacked_optimizer(client: FederatedClient, phase: Phase, stacked: Rows,
                      device: torch.device, capturable: bool) -> torch.optim.Optimizer:
    """The optimizer the client builds for ``phase``, over the stacked tensors instead of its
    own parameters (same class, groups and hyper-parameters; ``foreach`` on a GPU, and
    ``capturable`` where it is to run in a CUDA graph)."""
    client.phase = phase.name
    optimizer, schedulers = parse_optimizers(client.configure_optimizers(),
                                             type(client).__name__)
    if schedulers:
        raise ConfigError(f"{type(client).__name__}: batched clients train without "
                          "learning-rate schedulers; set trainer.batched_clients: 1")
    scale_lr(optimizer, schedulers, phase.lr_scale)
    names = {id(p): n for n, p in client.named_parameters()}
    groups = [{**group, "params": [stacked[names[id(p)]] for p in group["params"]]}
              for group in optimizer.param_groups]
    defaults = dict(optimizer.defaults)
    if device.type == "cuda" and "foreach" in defaults:
        defaults["foreach"] = True
    if capturable and "capturable" in defaults:
        defaults["capturable"] = True
    return type(optimizer)(groups, **defaults)


class Workspace:
    """One phase of a group of K clients: its tensors at fixed addresses (stacked parameters
    and buffers, optimizer, input buffers, loss and log sums), reused from round to round.

    Args:
        client: the live module (its methods build the optimizer and the step).
        loop: the local loop (Fabric: device, precision, backward).
        phase: the phase.
        template: name -> ``[K, ...]`` tensors giving every shape.
        sample: one batch, giving the input shape and dtypes.
        capture: how full steps are captured (None: eager).
    """

    def __init__(self, client: FederatedClient, loop: LocalLoop, phase: Phase, template: Rows,
                 sample: Batch, capture: Capture | None) -> None:
        self.fabric = loop.fabric
        device = self.fabric.device
        params = dict(client.named_parameters())
        with only_trainable(client, phase.trainable):
            trainable = {n for n, p in params.items() if p.requires_grad}
            self.params = {n: torch.zeros_like(template[n]).requires_grad_(n in trainable)
                           for n in params}
            self.optimizer = stacked_optimizer(client, phase, self.params, device,
                                               capture is not None)
        self.buffers = {n: torch.zeros_like(template[n]) for n in template if n not in params}
        self.reusable = resettable(self.optimizer)
        self.step = StackedStep(client)
        self.size = next(iter(template.values())).shape[0]
        x, y = sample
        self.batch_size = loop.batch_size
        self.inputs = x.new_zeros((self.size, self.batch_size, *x.shape[1:]))
        self.labels = y.new_zeros((self.size, self.batch_size))
        self.loss_sum = torch.zeros(self.size, device=device, dtype=torch.float32)
        self.log_sums: dict[str, Tensor] = {}
        self.log_counts: dict[str, list[int]] = {}
        self.snapshots: dict[int, Rows] = {}
        self.full = ReplayedStep(self._full_step, capture if self.reusable else None)

    # ----------------------------------------------------------------- one round
    def load(self, state: Rows) -> None:
        """Start a round from ``state`` (name -> ``[K, ...]``): tensors copied in place, a
        fresh optimizer, sums at zero."""
        with torch.no_grad():
            for name, tensor in chain(self.params.items(), self.buffers.items()):
                tensor.copy_(state[name])
            for total in self.log_sums.values():
                total.zero_()
            self.loss_sum.zero_()
        reset_optimizer(self.optimizer)
        self.log_counts = {name: [0] * self.size for name in self.log_counts}
        self.snapshots = {}

    def train(self, batches: Sequence[Sequence[Batch]]) -> None:
        """Every step of the phase, client k on ``batches[k]`` (module docstring)."""
        steps = max((len(b) for b in batches), default=0)
        for t in range(steps + 1):
            for k, own in enumerate(batches):
                if len(own) == t and t < steps:  # data used up: keep its rows from here on
                    self.snapshots[k] = {n: v[k].detach().clone() for n, v in self.params.items()}
            active = [k for k, own in enumerate(batches) if t < len(own)]
            if not active:
                break
            sizes: dict[int, list[int]] = {}
            for k in active:
                sizes.setdefault(len(batches[k][t][1]), []).append(k)
            if len(active) == self.size and list(sizes) == [self.batch_size]:
                torch.stack([own[t][0] for own in batches], out=self.inputs)
                torch.stack([own[t][1] for own in batches], out=self.labels)
                self.full()
            else:
                self._mixed_step([(members, torch.stack([batches[k][t][0] for k in members]),
                                   torch.stack([batches[k][t][1] for k in members]))
                                  for members in sizes.values()])
            self._count(active)

    def result(self) -> Rows:
        """Every client's parameters and buffers after the phase (new tensors)."""
        state = {n: v.detach().clone() for n, v in chain(self.params.items(),
                                                         self.buffers.items())}
        for k, rows in self.snapshots.items():
            for name, value in rows.items():
                state[name][k] = value
        return state

    def logged_means(self, k: int) -> dict[str, tuple[Tensor, int]]:
        """Client k's logged sums and counts by name (names it logged at least once)."""
        return {name: (self.log_sums[name][k], counts[k])
                for name, counts in self.log_counts.items() if counts[k]}

    # ----------------------------------------------------------------- steps
    def _full_step(self) -> None:
        """Every client at the full batch size: what a CUDA graph captures."""
        self.optimizer.zero_grad(set_to_none=True)
        self._forward_backward(None, self.inputs, self.labels)
        self.fabric.strategy.optimizer_step(self.optimizer)

    def _mixed_step(self, parts: Sequence[tuple[list[int], Tensor, Tensor]]) -> None:
        """One optimizer step for clients whose batches differ in size: one vmapped call per
        size (gradients of distinct rows add up), eagerly."""
        self.optimizer.zero_grad(set_to_none=True)
        device = self.loss_sum.device
        for members, inputs, labels in parts:
            rows = None if len(members) == self.size else device_rows(members, device)
            self._forward_backward(rows, inputs, labels)
        self.fabric.strategy.optimizer_step(self.optimizer)

    def _forward_backward(self, rows: Tensor | None, inputs: Tensor, labels: Tensor) -> None:
        """The vmapped step of the clients ``rows`` (None: all), its backward, and its losses
        and logged values added to the sums; buffers the step changed written back."""
        params = self.params if rows is None else {
            n: v.index_select(0, rows) for n, v in self.params.items()}
        buffers = self.buffers if rows is None else {
            n: v.index_select(0, rows) for n, v in self.buffers.items()}
        with self.fabric.autocast():
            losses, logs = self.step({**params, **buffers}, inputs, labels)
        self.fabric.backward(losses.sum())
        with torch.no_grad():
            for name in logs:
                if name not in self.log_sums:
                    self.log_sums[name] = torch.zeros_like(self.loss_sum)
                    self.log_counts[name] = [0] * self.size
            if rows is None:
                self.loss_sum.add_(losses.detach().float())
                for name, value in logs.items():
                    self.log_sums[name].add_(value.float())
                return
            for name, value in buffers.items():
                self.buffers[name].index_copy_(0, rows, value)
            self.loss_sum.index_add_(0, rows, losses.detach().float())
            for name, value in logs.items():
                self.log_sums[name].index_add_(0, rows, value.float())

    def _count(self, active: Sequence[int]) -> None:
        for name, count in self.step.counts.items():
            for k in active:
                self.log_counts[name][k] += count


def step_capture(fabric: Any, graphs: bool) -> Capture | None:
    """How full steps are captured: CUDA graphs on a GPU at 32-true precision (autocast's
    cast cache does not survive a capture) where ``graphs``, else None (eager)."""
    precision = str(getattr(fabric.strategy.precision, "precision", "32-true"))
    if graphs and fabric.device.type == "cuda" and precision == "32-true":
        return cuda_graph
    return None


class BatchedEngine(LocalEngine):
    """LocalEngine training up to ``group_size`` participants at once (module docstring):
    each participant is started, drawn and finished by the client runtime, as in the loop;
    only the local steps in between are one computation for the group.

    Args:
        runtime: the client runtime of this process.
        group_size: clients per batched computation (K); None: from the device's free memory
            at the first round (all of a round's clients where they fit).
        graphs: capture full steps in CUDA graphs (on a GPU at 32-true precision).
    """

    def __init__(self, runtime: ClientRuntime, group_size: int | None,
                 graphs: bool = True) -> None:
        super().__init__(runtime)
        self.group_size = group_size
        self.capture = step_capture(runtime.fabric, graphs)
        self.workspaces: dict[Hashable, Workspace] = {}
        self.scoring_refusal = scoring_refusal(runtime.client)
        self.scoring = None if self.scoring_refusal else StackedOutputs(runtime.client)

    def train(self, tasks: Sequence[TrainTask]) -> Iterator[ClientResult]:
        """Train the tasks group by group, yielding results in task order."""
        pending = list(tasks)
        while pending:
            size = self.group_size or self.choose_group_size(pending)
            chunk, pending = pending[:size], pending[size:]
            prepared = [self.prepare(task) for task in chunk]
            keys: list[Hashable] = []
            for item in prepared:
                if item.key not in keys:
                    keys.append(item.key)
            for key in keys:
                self.train_group([p for p in prepared if p.key == key])
            yield from self.finish_group(prepared)

    def finish_group(self, prepared: Sequence[PreparedClient]) -> list[ClientResult]:
        """Finish each participant in task order (:meth:`finish`); those whose task asks for
        scores are scored together afterwards, each on its state after its round's end."""
        if self.scoring is None:
            return [self.finish(item) for item in prepared]
        results: list[ClientResult] = []
        scored: dict[int, Rows] = {}
        for item in prepared:
            results.append(self.finish(item, score=False))
            if item.task.score:
                scored[len(results) - 1] = self.scoring_state()
        scores = self.score_states([results[i].client_id for i in scored], list(scored.values()))
        for index, client_scores in zip(scored, scores, strict=True):
            results[index] = replace(results[index], scores=client_scores)
        return results

    def evaluate(self, round_idx: int,
                 downloads: Mapping[int, State]) -> dict[int, dict[str, Score]]:
        """Score every client of ``downloads`` (its download plus its private state), up to
        the group size at once through the vmapped ``eval_outputs``; one after another where
        :func:`scoring_refusal` says why."""
        if self.scoring is None:
            return super().evaluate(round_idx, downloads)
        runtime, ids = self.runtime, list(downloads)
        size = self.group_size or len(ids)
        scores: dict[int, dict[str, Score]] = {}
        for start in range(0, len(ids), size):
            chunk = ids[start:start + size]
            states = []
            for client_id in chunk:
                runtime.population.load(runtime.client, client_id, round_idx,
                                        downloads[client_id])
                states.append(self.scoring_state())
            scores.update(zip(chunk, self.score_states(chunk, states), strict=True))
        return scores

    def scoring_state(self) -> Rows:
        """The loaded client's parameters and buffers as it is scored (its context-derived
        buffers built first)."""
        self.runtime.client.refresh_buffers()
        return client_state(self.runtime.client)

    def score_states(self, client_ids: Sequence[int],
                     states: Sequence[Rows]) -> list[dict[str, Score]]:
        """Score the clients whose parameters and buffers are ``states`` together (the live
        module in eval mode); on running out of device memory, in halves."""
        if not client_ids:
            return []
        assert self.scoring is not None
        scoring = self.scoring
        stacked = {name: torch.stack([state[name] for state in states]) for name in states[0]}
        self.runtime.client.eval()
        try:
            return self.runtime.score_together(client_ids,
                                               lambda inputs: scoring(stacked, inputs))
        except torch.OutOfMemoryError:
            if len(client_ids) == 1:
                raise
            del stacked
            torch.cuda.empty_cache()
            half = len(client_ids) // 2
            return (self.score_states(client_ids[:half], states[:half])
                    + self.score_states(client_ids[half:], states[half:]))

    def choose_group_size(self, tasks: Sequence[TrainTask]) -> int:
        """K for ``group_size=None``: every task where the device's free memory holds them
        (an estimate per client: :func:`client_bytes`), kept for the run."""
        runtime = self.runtime
        device = runtime.fabric.device
        if device.type != "cuda":
            self.group_size = len(tasks)
            return self.group_size
        free, _ = torch.cuda.mem_get_info(device)
        x, _ = runtime.population.train_data[tasks[0].client_id]
        per_client = client_bytes(runtime.client, x[:runtime.loop.batch_size],
                                  x.numel() * x.element_size() * runtime.local_epochs)
        self.group_size = group_size_for(per_client, free, len(tasks))
        return self.group_size

    def prepare(self, task: TrainTask) -> PreparedClient:
        """Start a participant through the runtime and draw its batches."""
        runtime = self.runtime
        generator = runtime.start(task)
        phases = runtime.phases()
        check_phases(runtime.client, phases)
        batches: list[list[Batch]] = []
        left = runtime.loop.max_local_steps
        for phase in phases:
            batches.append(phase_batches(lambda: runtime.batches(task.client_id, generator),
                                         phase, left))
            left = None if left is None else left - len(batches[-1])
        key = (schedule_signature(phases), runtime.client.batch_key())
        return PreparedClient(task, client_state(runtime.client), phases, key, batches)

    def train_group(self, group: Sequence[PreparedClient]) -> None:
        """Train ``group`` (one key) as one computation; on running out of device memory,
        in halves (and with half the group size from then on)."""
        try:
            self._train_group(group)
        except torch.OutOfMemoryError:
            if len(group) == 1:
                raise
            self.group_size = max(1, len(group) // 2)
            self.workspaces.clear()
            torch.cuda.empty_cache()
            for start in range(0, len(group), self.group_size):
                self.train_group(group[start:start + self.group_size])

    def _train_group(self, group: Sequence[PreparedClient]) -> None:
        runtime = self.runtime
        runtime.start(group[0].task)  # the live module's Python state: a member's
        client = runtime.client
        state = {n: torch.stack([p.start[n] for p in group]) for n in group[0].start}
        after: list[Rows] = []
        losses: list[Tensor] = []
        logged: list[dict[str, tuple[Tensor, int]]] = [{} for _ in group]
        for index, phase in enumerate(group[0].phases):
            batches = [p.batches[index] for p in group]
            workspace = self.workspace(index, group, state, batches)
            client.phase = phase.name
            workspace.load(state)
            workspace.train(batches)
            state = workspace.result()
            after.append(state)
            losses.append(workspace.loss_sum.clone())
            for k, totals in enumerate(logged):
                for name, (total, count) in workspace.logged_means(k).items():
                    previous, seen = totals.get(name, (0.0, 0))
                    totals[name] = (total + previous, count + seen)
        phase_losses = torch.stack(losses)  # [phases, K]
        finite = torch.isfinite(phase_losses).cpu()  # the group's one read on the host
        for k, prepared in enumerate(group):
            if not finite[:, k].all():
                phase = group[0].phases[int((~finite[:, k]).nonzero()[0])]
                raise non_finite_loss(client, phase, (prepared.task.client_id,
                                                      prepared.task.round_idx))
            prepared.rows = [{n: v[k] for n, v in rows.items()} for rows in after]
            prepared.loss_sum = phase_losses[:, k].sum()
            prepared.steps = sum(len(b) for b in prepared.batches)
            prepared.logs = {name: total / count for name, (total, count) in logged[k].items()}

    def workspace(self, index: int, group: Sequence[PreparedClient], state: Rows,
                  batches: Sequence[Sequence[Batch]]) -> Workspace:
        """The cached workspace of phase ``index`` for this group's key and size (a new one,
        not cached, where the optimizer cannot be reset in place)."""
        sample = next((b[0] for b in batches if b), (torch.zeros(1), torch.zeros(1)))
        key = (group[0].key, index, len(group), tuple(sample[0].shape[1:]), sample[0].dtype)
        workspace = self.workspaces.get(key)
        if workspace is None:
            phase = group[0].phases[index]
            workspace = Workspace(self.runtime.client, self.runtime.loop, phase, state, sample,
                                  self.capture)
            if workspace.reusable:
                self.workspaces[key] = workspace
        return workspace

    def finish(self, prepared: PreparedClient, score: bool = True) -> ClientResult:
        """Load a trained participant into the live module (started again, so its Python
        state is its own), take its upload after the phase that asks for it, and end its
        round through the runtime (scored there where its task asks and ``score``)."""
        runtime = self.runtime
        task = prepared.task if score else replace(prepared.task, score=False)
        client = runtime.client
        client.pop_federated_logs()
        runtime.start(task)
        load_rows(client, prepared.rows[upload_phase(prepared.phases)])
        upload = client.upload()
        load_rows(client, prepared.rows[-1])
        return runtime.finish(task, upload, prepared.loss_sum, prepared.steps, {}, prepared.logs)


def group_size_for(per_client: int, free: int, participants: int) -> int:
    """Clients per group: as many as half the ``free`` bytes hold at ``per_client`` bytes
    each (the rest is the allocator's slack and the evaluation's), between 1 and the
    ``participants``."""
    return max(1, min(participants, free // (2 * max(per_client, 1))))


def client_bytes(client: nn.Module, batch: Tensor, data_bytes: int) -> int:
    """Device memory one more client of a group needs, estimated: its parameters and buffers
    six times (stacked, gradient, two optimizer moments, state before and after a phase),
    three times the activations of one batch (kept for backward, and their gradients; the
    outputs of every leaf module in a forward pass, margin for what a method adds) and its
    batches (``data_bytes``)."""
    state = sum(t.numel() * t.element_size()
                for t in chain(client.parameters(), client.buffers()))
    return 6 * state + 3 * activation_bytes(client, batch) + data_bytes


def activation_bytes(client: nn.Module, batch: Tensor) -> int:
    """Bytes of the outputs of every leaf module in one forward pass of ``batch`` (eval mode,
    no gradient: nothing of the client changes)."""
    total = 0

    def count(module: nn.Module, inputs: Any, output: Any) -> None:
        nonlocal total
        if isinstance(output, Tensor):
            total += output.numel() * output.element_size()

    leaves = [m for m in client.modules() if not any(True for _ in m.children())]
    handles = [m.register_forward_hook(count) for m in leaves]
    training = client.training
    try:
        client.eval()
        with torch.no_grad():
            client(batch)
    finally:
        for handle in handles:
            handle.remove()
        client.train(training)
    return total


__all__ = ["BatchedEngine", "Workspace", "activation_bytes", "batching_refusal",
           "client_bytes", "group_size_for", "phase_batches", "schedule_signature",
           "scoring_refusal", "step_capture"]
