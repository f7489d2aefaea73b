"""Batched clients: several participants of a round trained as one vectorized computation.

The simulator trains a round's clients one after another on one live module. On a GPU a small
model's step for one client (a batch of 10 CIFAR images through a 4-layer CNN) leaves most of
the device idle, so ``trainer.batched_clients: K`` trains up to K clients at once instead: their
parameters are stacked into one tensor per parameter (client k's values in row k), and the
method's loss is mapped over the clients with ``torch.func.vmap`` of ``functional_call`` (each
row sees only its own client's batch), so one backward and one optimizer step update every
client. The optimizers fedlight builds (SGD with momentum and weight decay, Adam, AdamW) update
element by element with hyper-parameters shared by the clients, so one optimizer over the
stacked tensors updates each row exactly as the client's own optimizer would.

Each client keeps its own batches: the same shuffled order drawn from the same seed as the
loop (``ClientRuntime.batches``), its own number of steps (a client whose data is used up stops: its
rows are kept from then on) and its own last, smaller batch (padded, the padding weighted 0 in
the mean). So the result equals the loop's to float tolerance (the per-sample losses are
summed in another order), not bit for bit, and it does not depend on K.

A method qualifies when its local step is the base class's: cross-entropy of ``forward`` (the
model's logits) with the base optimizer, no loop hook or round hook overridden (upload and
local_phases may be), on a model without buffers (BatchNorm keeps running statistics per
client) or dropout (whose masks would differ from the loop's), at 32-bit or bf16 precision
(16-mixed keeps one loss scaler per client), with fresh optimizers and no gradient clipping.
Of the shipped methods: FedAvg, FedPer, LG-FedAvg, FedRep, FedBABU, Local, FedAWS, FedDF,
SCARS and FedBN (the last only on a backbone without BatchNorm). Any other method, or any
other setting, trains one client after another, with a one-line note.

Measured on a CPU it is slower (the 4-layer CNN on 3x32x32, batch 10, one thread: a round
takes 1.6x the loop's time with K = 4 and 3.2x with K = 20, since vmap turns the convolutions
into grouped ones, which oneDNN runs slower than K separate ones), so it is meant for GPUs;
``benchmarks/batched.py`` times it, and ``benchmarks/gpu.py`` runs that on a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, vmap

from fedlight.clients.base import FederatedClient
from fedlight.core.client import Phase, upload_phase
from fedlight.core.messages import ClientResult, TrainTask
from fedlight.federation.engines.local import LocalEngine
from fedlight.federation.local_loop import (
    LocalLoop,
    check_phases,
    non_finite_loss,
    only_trainable,
    overrides,
    parse_optimizers,
    scale_lr,
)
from fedlight.federation.runtime import ClientRuntime

Batch = tuple[Tensor, Tensor]
Rows = dict[str, Tensor]

#: the methods of FederatedClient that make its local step: a client overriding one of them
#: computes something else, which only its own training_step can run
BASE_STEP = ("training_step", "forward", "configure_optimizers", "optimizer_param_groups",
             "on_round_start", "on_round_end")
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
    method = type(client).__name__
    for name in BASE_STEP:
        if overrides(client, name, FederatedClient):
            return f"{method} overrides {name}"
    for name in LOOP_HOOKS:
        if overrides(client, name):
            return f"{method} overrides the loop hook {name}"
    buffer = next((name for name, _ in client.named_buffers()), None)
    if buffer is not None:
        return f"its model has buffers ({buffer}: BatchNorm keeps statistics per client)"
    if any(isinstance(m, DROPOUT) and m.p > 0 for m in client.modules()):
        return "its model has dropout"
    if str(precision).startswith("16"):
        return "precision 16-mixed keeps one loss scaler per client"
    if optimizer_state != "fresh":
        return "optimizer_state persist keeps one optimizer state per client"
    if gradient_clip_val is not None:
        return "gradient clipping works on one client's gradients"
    return None


@dataclass
class PreparedClient:
    """A participant loaded and planned: its parameters before training, its phases and, per
    phase, the batches the loop would draw for it in order."""

    task: TrainTask
    start: Rows
    phases: list[Phase]
    batches: list[list[Batch]]
    rows: list[Rows] = field(default_factory=list)  # its parameters after each phase
    loss_sum: Tensor = field(default_factory=lambda: torch.zeros(()))
    steps: int = 0


def phase_batches(epoch_batches: Callable[[], Iterable[Batch]], phase: Phase) -> list[Batch]:
    """The batches one phase of the loop trains on, one epoch after another of
    ``epoch_batches()`` as the loop draws them (none after ``max_steps``)."""
    budget = phase.max_steps if phase.max_steps is not None else float("inf")
    batches: list[Batch] = []
    for _ in range(phase.epochs):
        if len(batches) >= budget:
            break
        for batch in epoch_batches():
            if len(batches) >= budget:
                break
            batches.append(batch)
    return batches


def stack_batches(batches: Sequence[Batch], batch_size: int) -> tuple[Tensor, Tensor, Tensor]:
    """One step's batches of the active clients as [clients, batch_size, ...] inputs, labels
    and sample weights (1 for a sample, 0 for the padding of a smaller last batch)."""
    x0, y0 = batches[0]
    inputs = x0.new_zeros((len(batches), batch_size, *x0.shape[1:]))
    labels = y0.new_zeros((len(batches), batch_size))
    weights = torch.zeros((len(batches), batch_size), device=x0.device)
    for row, (x, y) in enumerate(batches):
        inputs[row, :len(y)] = x
        labels[row, :len(y)] = y
        weights[row, :len(y)] = 1.0
    return inputs, labels, weights


class BatchedEngine(LocalEngine):
    """LocalEngine training up to ``group_size`` participants at once (module docstring):
    each participant is started, drawn and finished by the client runtime, as in the loop;
    only the local steps in between are one computation for the group.

    Args:
        runtime: the client runtime of this process.
        group_size: clients per batched computation (K).
    """

    def __init__(self, runtime: ClientRuntime, group_size: int) -> None:
        super().__init__(runtime)
        self.group_size = group_size

    def train(self, tasks: Sequence[TrainTask]) -> Iterator[ClientResult]:
        """Train the tasks group by group, yielding results in task order."""
        runtime = self.runtime
        for start in range(0, len(tasks), self.group_size):
            group = [self.prepare(task) for task in tasks[start:start + self.group_size]]
            for phases in unique(p.phases for p in group):
                train_stacked(runtime.client, runtime.loop,
                              [p for p in group if p.phases == phases], runtime.loop.batch_size)
            for prepared in group:
                yield self.finish(prepared)

    def prepare(self, task: TrainTask) -> PreparedClient:
        """Start a participant through the runtime and draw its batches."""
        runtime = self.runtime
        generator = runtime.start(task)
        phases = runtime.phases()
        check_phases(runtime.client, phases)
        batches = [phase_batches(lambda: runtime.batches(task.client_id, generator), phase)
                   for phase in phases]
        start = {n: p.detach().clone() for n, p in runtime.client.named_parameters()}
        return PreparedClient(task, start, phases, batches)

    def finish(self, prepared: PreparedClient) -> ClientResult:
        """Load a trained participant into the live module, take its upload after the phase
        that asks for it, and end its round through the runtime."""
        task, runtime = prepared.task, self.runtime
        client = runtime.client
        runtime.population.load(client, task.client_id, task.round_idx, task.shared)
        load_rows(client, prepared.rows[upload_phase(prepared.phases)])
        upload = client.upload()
        load_rows(client, prepared.rows[-1])
        logs = {"train_loss": prepared.loss_sum / prepared.steps} if prepared.steps else {}
        return runtime.finish(task, upload, prepared.loss_sum, prepared.steps, {}, logs)


def unique(items: Iterator[list[Phase]]) -> list[list[Phase]]:
    """The distinct schedules, in first-seen order (clients of one schedule train together)."""
    seen: list[list[Phase]] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def load_rows(client: nn.Module, rows: Rows) -> None:
    """Write one client's parameters into the live module."""
    with torch.no_grad():
        for name, param in client.named_parameters():
            param.copy_(rows[name])


def train_stacked(client: FederatedClient, loop: LocalLoop, group: Sequence[PreparedClient],
                  batch_size: int) -> None:
    """Train ``group`` (clients of one schedule) phase by phase as one computation; fills each
    one's ``rows``, ``loss_sum`` and ``steps``."""
    device = loop.fabric.device
    current = [p.start for p in group]
    for prepared in group:
        prepared.loss_sum = torch.zeros((), device=device)
    for index, phase in enumerate(group[0].phases):
        losses = torch.zeros(len(group), device=device)
        current = train_phase(client, loop, phase, current,
                              [p.batches[index] for p in group], batch_size, losses)
        for prepared, rows, loss in zip(group, current, losses.unbind(), strict=True):
            if not torch.isfinite(loss):
                raise non_finite_loss(client, phase, (prepared.task.client_id,
                                                      prepared.task.round_idx))
            prepared.rows.append(rows)
            prepared.loss_sum = prepared.loss_sum + loss
            prepared.steps += len(prepared.batches[index])


def stacked_optimizer(client: FederatedClient, phase: Phase,
                      stacked: Mapping[str, Tensor]) -> torch.optim.Optimizer:
    """The optimizer the client builds for ``phase``, over the stacked tensors instead of its
    own parameters (same class, groups and hyper-parameters)."""
    client.phase = phase.name
    optimizer, schedulers = parse_optimizers(client.configure_optimizers(),
                                             type(client).__name__)
    scale_lr(optimizer, schedulers, phase.lr_scale)
    names = {id(p): n for n, p in client.named_parameters()}
    groups = [{**group, "params": [stacked[names[id(p)]] for p in group["params"]]}
              for group in optimizer.param_groups]
    return type(optimizer)(groups, **optimizer.defaults)


def train_phase(client: FederatedClient, loop: LocalLoop, phase: Phase, start: Sequence[Rows],
                batches: Sequence[Sequence[Batch]], batch_size: int,
                losses: Tensor) -> list[Rows]:
    """One phase of every client of a group; returns each one's parameters after it and adds
    its step losses to its entry of ``losses``."""
    fabric = loop.fabric
    with only_trainable(client, phase.trainable):
        trainable = {n for n, p in client.named_parameters() if p.requires_grad}
        stacked = {n: torch.stack([rows[n] for rows in start]).requires_grad_(n in trainable)
                   for n in start[0]}
        optimizer = stacked_optimizer(client, phase, stacked)
    step = vmap(client_loss(client))
    final: list[Rows | None] = [None] * len(start)
    for t in range(max((len(b) for b in batches), default=0) + 1):
        for k, client_batches in enumerate(batches):
            if len(client_batches) == t:  # this client's data is used up: keep its rows
                final[k] = {n: v[k].detach().clone() for n, v in stacked.items()}
        active = [k for k, b in enumerate(batches) if t < len(b)]
        if not active:
            break
        index = torch.tensor(active, device=fabric.device)
        # while every client trains, the stacked tensors go in as they are (no copy per step)
        params = stacked if len(active) == len(batches) else {
            n: v.index_select(0, index) for n, v in stacked.items()}
        inputs, labels, weights = stack_batches([batches[k][t] for k in active], batch_size)
        with fabric.autocast():
            step_losses = step(params, inputs, labels, weights)
        fabric.backward(step_losses.sum())
        fabric.strategy.optimizer_step(optimizer)
        optimizer.zero_grad(set_to_none=True)
        losses.index_add_(0, index, step_losses.detach().float())
    return [rows for rows in final if rows is not None]


def client_loss(client: nn.Module) -> Callable[[Rows, Tensor, Tensor, Tensor], Tensor]:
    """The base training_step's loss of one client from its parameters: the mean cross-entropy
    of its logits over the real samples of its batch."""
    def loss(params: Rows, inputs: Tensor, labels: Tensor, weights: Tensor) -> Tensor:
        per_sample = F.cross_entropy(functional_call(client, params, (inputs,)), labels,
                                     reduction="none")
        return (per_sample * weights).sum() / weights.sum()
    return loss


__all__ = ["BatchedEngine", "batching_refusal", "phase_batches", "stack_batches"]
