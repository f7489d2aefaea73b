"""The training loop: one client's local phases, driven like a Lightning training loop.

In the spirit of Fabric's build-your-own-trainer example, every training batch of every phase
runs through the LightningModule hooks in the order of Lightning's automatic optimization:

    on_train_start                                   (once per client per round)
      on_train_epoch_start
        on_train_batch_start(batch, i)               (returning -1 ends the epoch)
        training_step(batch, i)                      (None skips the step)
        on_before_zero_grad(opt); opt.zero_grad()
        on_before_backward(loss); fabric.backward(loss); on_after_backward()
        on_before_optimizer_step(opt)                (gradients unscaled under fp16)
        configure_gradient_clipping(opt, gradient_clip_val, gradient_clip_algorithm)
        opt.step()
        on_train_batch_end(outputs, batch, i)
        schedulers with interval "step" (every `frequency` batches)
      on_train_epoch_end
      schedulers with interval "epoch" (every `frequency` epochs)
    on_train_end

The step's gradients are freed right after ``opt.step()`` unless the module overrides a hook
that runs before the next ``zero_grad`` (see :func:`reads_stale_gradients`); Lightning frees
them at that ``zero_grad``, which is then skipped when it has nothing to zero and is torch's
own (see :func:`zero_gradients`). Hooks receive the torch optimizer ``configure_optimizers``
built.

``configure_optimizers`` may return any form Lightning accepts for automatic optimization:
an optimizer, a one-element list or tuple, ``([optimizer], [schedulers])``, or a dict
``{"optimizer": ..., "lr_scheduler": scheduler or {"scheduler", "interval", "frequency"}}``.
It is called at the start of every phase (a phase may train a subset of the parameters). With
``optimizer_state="persist"`` the optimizer's and schedulers' state of each (client, phase) is
kept between rounds and restored into the fresh optimizer, so SGD momentum, Adam moments and a
decaying learning rate carry over; with ``"fresh"`` (default, as PFLlib and the papers' code)
every round starts anew.

Never run: validation and test loops (``validation_step``, ``on_validation_*``), ``on_fit_*``,
checkpoint hooks, ``configure_callbacks``; manual optimization and several optimizers are
refused, as are schedulers that need a monitored metric (``ReduceLROnPlateau``).
"""

from __future__ import annotations

import contextlib
import fnmatch
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import lightning as L
import torch
from lightning.fabric import Fabric
from torch import Tensor, nn

from fedlight.clients.base import FederatedClient
from fedlight.core.client import Phase, Upload
from fedlight.core.errors import ConfigError, TrainingDiverged

#: ``trainer.optimizer_state`` and ``trainer.gradient_clip_algorithm`` values.
OPTIMIZER_STATES = ("fresh", "persist")
CLIP_ALGORITHMS = ("norm", "value")
Batch = tuple[Tensor, Tensor]


@dataclass
class SchedulerConfig:
    """A learning-rate scheduler with Lightning's ``interval`` and ``frequency``."""

    scheduler: Any
    interval: str = "epoch"
    frequency: int = 1


@dataclass
class TrainingResult:
    """One client's local training: its upload, summed loss, step count and (with
    ``optimizer_state="persist"``) the optimizer / scheduler state per phase."""

    upload: Upload
    loss_sum: Tensor
    steps: int
    optimizer_states: dict[int, dict[str, Any]] = field(default_factory=dict)


def parse_optimizers(configured: Any, owner: str = "client"
                     ) -> tuple[torch.optim.Optimizer, list[SchedulerConfig]]:
    """The optimizer and scheduler configs of a ``configure_optimizers`` return value.

    Raises:
        TypeError: a form Lightning's automatic optimization does not accept, several
            optimizers, or a scheduler that needs a monitored metric.
    """
    optimizer, schedulers = _split(configured, owner)
    configs = []
    for entry in schedulers:
        config = (SchedulerConfig(**{k: v for k, v in entry.items()
                                     if k in ("scheduler", "interval", "frequency")})
                  if isinstance(entry, dict) else SchedulerConfig(entry))
        if config.interval not in ("step", "epoch"):
            raise TypeError(f"{owner}: lr_scheduler interval must be 'step' or 'epoch', got "
                            f"{config.interval!r}")
        if isinstance(config.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            raise TypeError(f"{owner}: ReduceLROnPlateau needs a monitored validation metric, "
                            "which federated local training does not have")
        configs.append(config)
    return optimizer, configs


def _split(configured: Any, owner: str) -> tuple[torch.optim.Optimizer, list[Any]]:
    if isinstance(configured, torch.optim.Optimizer):
        return configured, []
    if isinstance(configured, dict) and "optimizer" in configured:
        scheduler = configured.get("lr_scheduler")
        return configured["optimizer"], [] if scheduler is None else [scheduler]
    if isinstance(configured, (list, tuple)):
        if len(configured) == 2 and all(isinstance(p, (list, tuple)) for p in configured):
            optimizers, schedulers = configured
            if len(optimizers) == 1:
                return optimizers[0], list(schedulers)
        elif len(configured) == 1:
            return _split(configured[0], owner)
    raise TypeError(f"{owner}.configure_optimizers must return one optimizer, optionally with "
                    "schedulers (an optimizer, [optimizer], ([optimizer], [schedulers]) or "
                    f"{{'optimizer': ..., 'lr_scheduler': ...}}); got {type(configured).__name__}"
                    " (several optimizers need manual optimization, which fedlight does not run)")


@contextlib.contextmanager
def only_trainable(client: nn.Module, patterns: Sequence[str] | None) -> Iterator[None]:
    """Freeze every parameter whose name matches none of ``patterns`` for the duration."""
    if patterns is None:
        yield
        return
    named = list(client.named_parameters())
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(n, pattern) for n, _ in named):
            raise ConfigError(f"{type(client).__name__}: phase pattern {pattern!r} matches no "
                             "parameter")
    previous = {n: p.requires_grad for n, p in named}
    for name, param in named:
        param.requires_grad_(previous[name] and any(fnmatch.fnmatchcase(name, p) for p in patterns))
    try:
        yield
    finally:
        for name, param in named:
            param.requires_grad_(previous[name])


class TrainingLoop:
    """Trains a client's local phases with Fabric (precision, device, backward).

    Args:
        fabric: the run's (launched) Fabric; the client must have been set up with it.
        batch_size: local mini-batch size.
        gradient_clip_val: clip gradients to this norm (or value) before every optimizer step,
            through the module's ``configure_gradient_clipping``; ``None`` = no clipping.
        gradient_clip_algorithm: ``norm`` or ``value``.
        optimizer_state: ``fresh`` (new optimizer every round) or ``persist`` (see module doc).
        max_local_steps: at most this many optimizer steps in one :meth:`fit`, counted over
            its phases in order (a phase reached after the cap trains no step); ``None`` = no
            cap. A phase's own ``max_steps`` still applies within it.
    """

    def __init__(self, fabric: Fabric, batch_size: int = 10,
                 gradient_clip_val: float | None = None, gradient_clip_algorithm: str = "norm",
                 optimizer_state: str = "fresh", max_local_steps: int | None = None) -> None:
        self.fabric = fabric
        self.batch_size = batch_size
        self.max_local_steps = max_local_steps
        self.gradient_clip_val = gradient_clip_val
        self.gradient_clip_algorithm = gradient_clip_algorithm
        self.persist = optimizer_state == "persist"

    def fit(self, client: FederatedClient, epoch_batches: Callable[[], Iterable[Batch]],
            phases: Sequence[Phase], uploads_after: int,
            optimizer_states: dict[int, dict[str, Any]] | None = None) -> TrainingResult:
        """Run ``phases``, each epoch over ``epoch_batches()``, and take the upload after
        phase number ``uploads_after`` (the client runtime's choice: ClientRuntime.upload_index);
        stop training after ``max_local_steps`` steps in all."""
        check_phases(client, phases)
        saved = dict(optimizer_states or {})
        upload: Upload | None = None
        loss_sum = torch.zeros((), device=self.fabric.device)
        steps = 0
        client.on_train_start()
        for index, phase in enumerate(phases):
            left = None if self.max_local_steps is None else self.max_local_steps - steps
            phase_loss, phase_steps, state = self.run_phase(client, phase, epoch_batches,
                                                            saved.get(index), step_limit=left)
            if not torch.isfinite(phase_loss):
                context = client.context
                raise non_finite_loss(client, phase, None if context is None else (
                    context.client_id, context.round))
            if state is not None:
                saved[index] = state
            loss_sum += phase_loss
            steps += phase_steps
            if index == uploads_after:
                upload = client.upload()
        client.on_train_end()
        assert upload is not None
        return TrainingResult(upload, loss_sum, steps, saved if self.persist else {})

    def run_phase(self, client: FederatedClient, phase: Phase,
                  epoch_batches: Callable[[], Iterable[Batch]],
                  optimizer_state: dict[str, Any] | None = None,
                  optimizer: torch.optim.Optimizer | None = None,
                  step_limit: int | None = None,
                  ) -> tuple[Tensor, int, dict[str, Any] | None]:
        """Train one phase: ``phase.epochs`` passes over ``epoch_batches()``, ending after
        ``phase.max_steps`` or ``step_limit`` steps, whichever comes first (None: no limit).
        ``optimizer`` replaces ``configure_optimizers`` (e.g. a plain SGD step for an attack
        probe).
        Returns the summed loss, the number of optimizer steps and, with ``persist``, the
        optimizer / scheduler state to restore next time."""
        client.phase = phase.name
        losses: list[Tensor] = []  # summed once per phase: one op, not one per step
        steps = 0
        with only_trainable(client, phase.trainable), client.local_loop():
            if optimizer is None:
                optimizer, schedulers = parse_optimizers(client.configure_optimizers(),
                                                         type(client).__name__)
                scale_lr(optimizer, schedulers, phase.lr_scale)
            else:
                schedulers = []
            if self.persist and optimizer_state is not None:
                optimizer.load_state_dict(optimizer_state["optimizer"])
                for config, state in zip(schedulers, optimizer_state["schedulers"], strict=True):
                    config.scheduler.load_state_dict(state)
            # Fabric sets the optimizer up for its strategy; the steps below then call the
            # strategy directly on the torch optimizer: _FabricOptimizer.step makes a
            # runtime-Protocol isinstance check per call and its zero_grad resolves every
            # attribute through __getattr__ (~25 us a step: 5 % of a small MLP's step on CPU).
            optimizer = self.fabric.setup_optimizers(optimizer).optimizer  # type: ignore[union-attr]
            release_grads = not reads_stale_gradients(client)
            budget = step_budget(phase.max_steps, step_limit)
            for epoch in range(phase.epochs):
                if steps >= budget:
                    break
                client.on_train_epoch_start()
                for batch_idx, batch in enumerate(epoch_batches()):
                    if steps >= budget or client.on_train_batch_start(batch, batch_idx) == -1:
                        break
                    loss = self._step(client, optimizer, batch, batch_idx, release_grads)
                    if loss is not None:
                        losses.append(loss)
                        steps += 1
                    _step_schedulers(client, schedulers, "step", batch_idx)
                client.on_train_epoch_end()
                _step_schedulers(client, schedulers, "epoch", epoch)
            free_gradients(optimizer)
        state = ({"optimizer": _cpu_copy(optimizer.state_dict()),
                  "schedulers": [_cpu_copy(c.scheduler.state_dict()) for c in schedulers]}
                 if self.persist else None)
        loss_sum = (torch.stack(losses).sum() if losses
                    else torch.zeros((), device=self.fabric.device))
        return loss_sum, steps, state

    def _step(self, client: FederatedClient, optimizer: torch.optim.Optimizer, batch: Batch,
              batch_idx: int, release_grads: bool = False) -> Tensor | None:
        with self.fabric.autocast():  # a direct training_step call bypasses Fabric's forward
            output = client.training_step(batch, batch_idx)
        loss = output["loss"] if isinstance(output, dict) else output
        if loss is not None:
            client.on_before_zero_grad(optimizer)
            zero_gradients(optimizer)
            client.on_before_backward(loss)
            self.fabric.backward(loss)
            client.on_after_backward()
            # fp16: hooks and clipping see unscaled gradients (no-op for other precisions)
            self.fabric.strategy.precision.unscale_gradients(optimizer)
            client.on_before_optimizer_step(optimizer)
            client.configure_gradient_clipping(optimizer, self.gradient_clip_val,
                                               self.gradient_clip_algorithm)
            self.fabric.strategy.optimizer_step(optimizer)  # precision-aware (fp16 scaler)
            if release_grads:
                free_gradients(optimizer)
        client.on_train_batch_end(output, batch, batch_idx)
        return None if loss is None else loss.detach().float()


def step_budget(*limits: int | None) -> float:
    """The smallest of ``limits`` that is not None (infinity when all are None)."""
    return min((limit for limit in limits if limit is not None), default=float("inf"))


def zero_gradients(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.zero_grad(set_to_none=True)``, skipped where it would do nothing: a stock
    ``zero_grad`` with no gradient set. Why: torch's ``zero_grad`` enters a profiler range and
    dynamo's disable wrapper (~6 us a call on CPU, most of a small model's per-step overhead),
    and after :func:`free_gradients` there is nothing to zero. An optimizer class that
    overrides ``zero_grad`` is always called."""
    if type(optimizer).zero_grad is not torch.optim.Optimizer.zero_grad or any(
            p.grad is not None for group in optimizer.param_groups for p in group["params"]):
        optimizer.zero_grad(set_to_none=True)


def free_gradients(optimizer: torch.optim.Optimizer) -> None:
    """Set the gradients of the optimizer's parameters to ``None`` (what the loop does after a
    step to free their memory, not a Lightning hook point: a custom ``zero_grad`` is not run)."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            param.grad = None


#: hooks that run between an optimizer step and the next step's zero_grad
_HOOKS_AFTER_STEP = ("on_train_batch_end", "lr_scheduler_step", "on_train_epoch_end",
                     "on_train_epoch_start", "on_train_batch_start", "on_before_zero_grad")


def reads_stale_gradients(client: nn.Module) -> bool:
    """Whether ``client`` overrides a hook that could read the gradients a step leaves behind.

    Lightning keeps a step's gradients until the next step's ``zero_grad``, i.e. through the
    next forward; the loop frees them right after the optimizer step instead when no hook
    in between is overridden: the next forward then reuses their memory rather than
    allocating anew (~0.1 ms a step measured in isolation on a small CNN). With any of these
    hooks overridden, Lightning's timing is kept exactly."""
    return any(overrides(client, name) for name in _HOOKS_AFTER_STEP)


def overrides(client: nn.Module, name: str, base: type = L.LightningModule) -> bool:
    """Whether ``client`` replaces ``base``'s method ``name``; a hook set on the instance (a
    bound method or a plain function) counts as replaced."""
    return getattr(getattr(client, name), "__func__", None) is not getattr(base, name)


def check_phases(client: nn.Module, phases: Sequence[Phase]) -> None:
    """A local schedule needs at least one phase (ValueError naming the method)."""
    if not phases:
        raise ValueError(f"{type(client).__name__}: a local schedule needs at least one phase")


def non_finite_loss(client: nn.Module, phase: Phase,
                    where: tuple[int, int] | None) -> TrainingDiverged:
    """The error of a phase whose summed loss is not finite; ``where``: (client, round)."""
    place = f"client {where[0]} in round {where[1] + 1}, " if where is not None else ""
    return TrainingDiverged(
        f"non-finite training loss for {place}phase {phase.name!r} "
        f"(lr={getattr(client, 'lr', '?')}); lower the learning rate or check the data")


def scale_lr(optimizer: torch.optim.Optimizer, schedulers: list[SchedulerConfig],
              scale: float) -> None:
    """Multiply every learning rate (and the schedulers' base rates) by a phase's ``lr_scale``."""
    if scale == 1.0:
        return
    for group in optimizer.param_groups:
        group["lr"] *= scale
        if "initial_lr" in group:
            group["initial_lr"] *= scale
    for config in schedulers:
        if hasattr(config.scheduler, "base_lrs"):
            config.scheduler.base_lrs = [lr * scale for lr in config.scheduler.base_lrs]


def _step_schedulers(client: FederatedClient, schedulers: list[SchedulerConfig], interval: str,
                     index: int) -> None:
    for config in schedulers:
        if config.interval == interval and (index + 1) % config.frequency == 0:
            client.lr_scheduler_step(config.scheduler, None)


def _cpu_copy(obj: Any) -> Any:
    if isinstance(obj, Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _cpu_copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_cpu_copy(v) for v in obj]
    return obj


__all__ = ["CLIP_ALGORITHMS", "OPTIMIZER_STATES", "SchedulerConfig", "TrainingLoop",
           "TrainingResult", "check_phases", "free_gradients", "non_finite_loss",
           "only_trainable", "overrides", "parse_optimizers", "reads_stale_gradients", "scale_lr",
           "step_budget", "zero_gradients"]
