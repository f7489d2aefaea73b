"""The client base class: a ``LightningModule`` that also knows how to federate.

A client declares, by state-dict name patterns (shell-style globs such as ``"model.head.*"``),
which of its parameters *and buffers* are shared (aggregated by the server) and which are
private (kept by the client between rounds). The orchestrator
(:class:`fedlight.federation.trainer.FederatedTrainer`) drives the optional federation hooks:

* :meth:`FederatedClient.on_round_start` receives the server's message;
* :meth:`FederatedClient.local_phases` gives the local schedule as :class:`Phase` objects;
* :meth:`FederatedClient.upload` says what leaves the client;
* :meth:`FederatedClient.on_round_end` does bookkeeping that must persist;
* :meth:`FederatedClient.configure_server` names the method's server rule (default: the
  weighted mean; a config's ``server:`` may replace it where the rule allows);
* :meth:`FederatedClient.evaluation_phases` fine-tunes a copy before scoring (Per-FedAvg,
  FedBABU); what it trains is thrown away.

Run alone (``lightning.Trainer().fit(client, datamodule)``) a client is an ordinary supervised
model and none of the hooks is needed.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import inspect
from collections.abc import Iterator, Sequence
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedlight.core.client import ClientContext, Partition, Phase, Upload, resolve_partition
from fedlight.core.errors import ConfigError
from fedlight.core.rules import ServerRule
from fedlight.models import BACKBONES, build_backbone, feature_size
from fedlight.server.mean import WeightedMean

OPTIMIZERS = ("sgd", "adam", "adamw")


class FederatedClient(L.LightningModule):
    """Base class of every fedlight method: FedAvg's behaviour with all hooks at their defaults.

    Args:
        backbone: a model-zoo name, e.g. ``"cnn"`` for the 4-layer CNN of FedAvg / GPFL, one
            of: {backbones}. Or your own ``nn.Module`` mapping a batch of inputs to
            ``num_classes`` logits (in YAML a ``class_path`` / ``init_args`` block): it is
            trained as given (seed its construction yourself). Methods that read the feature
            between body and classifier (FedPer, FedRep, GPFL, MOON, FedRoD, FedProto, ...)
            need it cut like the zoo's ``Backbone``, as submodules ``encoder`` (input ->
            feature) and ``head`` (feature -> logits); the feature size is its ``feature_dim``
            attribute where it has one, else the output size of one dry forward of
            ``encoder`` on zeros of ``input_shape`` (see :attr:`feature_dim`).
        num_classes: number of classes; linked from the data module by the CLI.
        input_shape: shape of one input sample; linked from the data module by the CLI.
        optimizer: ``"sgd"``, ``"adam"`` or ``"adamw"``.
        lr: learning rate.
        momentum: SGD momentum (ignored by Adam).
        weight_decay: L2 weight decay.
        extra_private: more glob patterns to keep private on top of the method's own, e.g.
            ``["model.head.*"]`` turns FedAvg into FedPer.
        backbone_kwargs: extra keyword arguments of the zoo backbone's constructor.
        vocab_size: number of token ids of a token-sequence data source (text, characters),
            handed to a zoo backbone as its vocab_size (not to your own module); linked from
            the data module by the CLI, None for other inputs.
    """

    #: When True the orchestrator measures personalized accuracy on each participant right
    #: after its local training (MAP's protocol); otherwise on every client from its stored
    #: state at evaluation rounds.
    evaluate_after_local_training: bool = False

    #: True when the method's training reads ``context.rounds`` (the planned number of rounds,
    #: e.g. MAP's HPM momentum uses it as T): a run resumed with another ``trainer.rounds``
    #: would then differ from a run planned that long, so the trainer refuses the change.
    reads_planned_rounds: bool = False

    #: True when the class's own ``training_step`` (and the other step methods it overrides:
    #: ``forward``, ``configure_optimizers``, ``optimizer_param_groups``, ``on_round_start``,
    #: ``on_round_end``) can train several clients at once (``trainer.batched_clients``):
    #: every per-client value the step reads is a parameter or a buffer (set at round start,
    #: not a Python attribute or the context), its Python branches depend only on
    #: :meth:`batch_key`, the phase and the constructor arguments, and its random draws come
    #: from a ``fedlight.core.noise.NoiseSource``. A class that overrides a step method
    #: declares it in its own body; a subclass that overrides one again without declaring it
    #: trains one client after another. The same holds for scoring several clients at once
    #: (``eval_outputs``, with the context-derived buffers built by :meth:`refresh_buffers`).
    batchable: bool = True

    #: True when the class's own ``training_step`` and ``forward`` (where it overrides them)
    #: honour :attr:`sample_weight`: every loss term and every logged value is a mean (or a
    #: sum) over the real samples only, through :meth:`sample_mean`, :meth:`cross_entropy` or
    #: :meth:`real_samples`, and no sample's output depends on another sample of the batch.
    #: The batched engine then pads a client's smaller last batch to the group's batch size
    #: with samples of weight 0, so every step of a group keeps one shape (one CUDA graph). A
    #: class that overrides either method declares it in its own body; undeclared, the padded
    #: steps run eagerly instead (never wrongly).
    sample_weighted: bool = True

    def __init__(
        self,
        backbone: str | nn.Module = "cnn",
        num_classes: int = 10,
        input_shape: Sequence[int] = (1, 28, 28),
        optimizer: str = "sgd",
        lr: float = 0.01,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        extra_private: Sequence[str] = (),
        backbone_kwargs: dict[str, Any] | None = None,
        vocab_size: int | None = None,
    ) -> None:
        super().__init__()
        if optimizer not in OPTIMIZERS:
            raise ConfigError(f"unknown optimizer {optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
        if lr <= 0:
            raise ConfigError(f"lr must be positive, got {lr}")
        own_module = isinstance(backbone, nn.Module)
        if own_module and backbone_kwargs:
            raise ConfigError(f"backbone_kwargs {dict(backbone_kwargs)} are for a zoo backbone's "
                              f"constructor; construct your {type(backbone).__name__} with them")
        # a module is saved with the state dict; hparams name its class (the run's record)
        self.save_hyperparameters(ignore=["backbone"] if own_module else None)
        if own_module:
            self.hparams["backbone"] = _class_path(backbone)
        self.construction = _outermost_init_arguments(self)
        self.num_classes = num_classes
        self.input_shape = tuple(input_shape)
        self.optimizer_name = optimizer
        self.lr = lr
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.extra_private = tuple(extra_private)
        #: the zoo name, or the class name of your own module
        self.backbone_name = type(backbone).__name__ if own_module else str(backbone)
        self.backbone_kwargs = dict(backbone_kwargs or {})
        if vocab_size is not None and not own_module:
            self.backbone_kwargs["vocab_size"] = vocab_size
        self.model = backbone if isinstance(backbone, nn.Module) else self.build_model()
        self.phase = "train"
        self.context: ClientContext | None = None
        self._federated_logs: dict[str, list[Tensor]] | None = None  # see capture_logs
        self._in_local_loop = False  # see local_loop
        self._partition: Partition | None = None
        #: 1 for each real sample of the batch being trained on, 0 for padding; None (every
        #: sample real) except inside the batched engine's padded steps (sample_weighted)
        self.sample_weight: Tensor | None = None

    # ----------------------------------------------------------------- construction
    def build_model(self) -> nn.Module:
        """The zoo backbone (``encoder`` + ``head``) named ``backbone`` (a module passed as
        ``backbone`` is used as given instead)."""
        return build_backbone(
            self.backbone_name, self.input_shape, self.num_classes, **self.backbone_kwargs
        )

    @functools.cached_property
    def feature_dim(self) -> int:
        """Size of the feature ``model.encoder`` outputs and ``model.head`` reads (see
        :func:`fedlight.models.feature_size`)."""
        return feature_size(self.model, self.input_shape, owner=type(self).__name__)

    # ----------------------------------------------------------------- partition
    def shared_patterns(self) -> list[str]:
        """Glob patterns of the shared (aggregated) state. Default: everything."""
        return ["*"]

    def private_patterns(self) -> list[str]:
        """Glob patterns of the private state; they win over :meth:`shared_patterns`."""
        return []

    @property
    def partition(self) -> Partition:
        """The resolved, checked shared / private split of ``state_dict()`` keys."""
        if self._partition is None:
            self._partition = resolve_partition(
                list(self.state_dict().keys()),
                self.shared_patterns(),
                [*self.private_patterns(), *self.extra_private],
                owner=type(self).__name__,
            )
        return self._partition

    @property
    def has_global_model(self) -> bool:
        """True when :meth:`global_forward` uses shared state only (a global model exists)."""
        return not self.partition.private

    def shared_state(self) -> dict[str, Tensor]:
        """Detached copies of the shared partition (what FedAvg sends)."""
        state = self.state_dict()
        return {k: state[k].detach().clone() for k in self.partition.shared}

    def client_state(self) -> dict[str, Tensor]:
        """Detached CPU copies of the private partition: what the orchestrator stores."""
        if not self.partition.private:
            return {}
        state = self.state_dict()
        return {k: state[k].detach().to("cpu", copy=True) for k in self.partition.private}

    # ----------------------------------------------------------------- federation hooks
    def on_round_start(self, round: int, message: dict[str, Any]) -> None:
        """Receive the server's message before local training. Default: nothing to do."""

    def local_phases(self, local_epochs: int) -> list[Phase]:
        """The local schedule. Default: one phase of ``local_epochs`` training everything."""
        return [Phase("train", local_epochs)]

    def upload(self) -> Upload:
        """What leaves the client: its shared state and its sample count."""
        weight = float(self.context.num_train_samples) if self.context else 1.0
        return Upload(state=self.shared_state(), weight=weight)

    def on_round_end(self) -> None:
        """Bookkeeping after local training (and the upload). Default: nothing."""

    def configure_server(self) -> ServerRule:
        """The method's server rule (a fresh object). Default: FedAvg's weighted mean, which a
        config may replace (``server: FedAdam``, ``DPFedAvg``, ``Krum``...). A method with
        server state returns its own rule, defined in its own file."""
        return WeightedMean()

    def refresh_buffers(self) -> None:
        """Build the buffers the method derives from the loaded state and :attr:`context`
        (which it otherwise builds lazily, at round start or at its first forward): the
        batched engine calls it on each loaded client before it stacks the client's state to
        score several clients at once. Default: nothing to build."""

    def evaluation_phases(self) -> list[Phase]:
        """Phases run on the client's training data right before it is scored (fine-tune at
        evaluation, e.g. Per-FedAvg's adaptation step); the result is scored, then discarded.
        Default: none."""
        return []

    # ----------------------------------------------------------------- prediction
    def forward(self, x: Tensor) -> Tensor:
        """Personalized prediction (logits)."""
        logits: Tensor = self.model(x)
        return logits

    def global_forward(self, x: Tensor) -> Tensor:
        """Prediction of the aggregated global model, where :attr:`has_global_model`."""
        logits: Tensor = self(x)
        return logits

    def eval_outputs(self, x: Tensor) -> dict[str, Tensor]:
        """Named logits to score; ``personalized`` is the headline. Methods may add more."""
        return {"personalized": self(x)}

    def attack_surfaces(self) -> dict[str, nn.Module]:
        """Modules beyond ``encoder`` and ``model`` that a server holding the shared part could
        run as a model, by name, for the DLG probe's ``surfaces`` (GPFL offers two). None here."""
        return {}

    # ----------------------------------------------------------------- training
    def train_class_counts(self) -> Tensor:
        """Label counts of this client's training split (uniform ones when unknown)."""
        if self.context is not None:
            return self.context.class_counts.to(self.device)
        return torch.ones(self.num_classes, device=self.device)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        loss = self.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    # ----------------------------------------------------------------- sample weights
    def sample_mean(self, values: Tensor) -> Tensor:
        """The mean of ``values`` (first dimension: the batch's samples) over the real samples
        and every other dimension: ``values.mean()`` when every sample is real."""
        return weighted_mean(values, self.sample_weight)

    def real_samples(self, values: Tensor) -> Tensor:
        """``values`` (first dimension: the batch's samples) with the padding's rows zeroed,
        for sums over the batch; ``values`` itself when every sample is real."""
        return weighted_samples(values, self.sample_weight)

    def cross_entropy(self, logits: Tensor, labels: Tensor) -> Tensor:
        """``F.cross_entropy(logits, labels)``, averaged over the real samples only."""
        if self.sample_weight is None:
            return F.cross_entropy(logits, labels)
        return self.sample_mean(F.cross_entropy(logits, labels, reduction="none"))

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._log_eval("val", batch)

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._log_eval("test", batch)

    def _log_eval(self, stage: str, batch: tuple[Tensor, Tensor]) -> None:
        x, y = batch
        logits = self(x)
        self.log(f"{stage}_loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log(f"{stage}_accuracy", (logits.argmax(-1) == y).float().mean(), prog_bar=True)

    def optimizer_param_groups(self) -> list[dict[str, Any]]:
        """Parameter groups of the optimizer; override to give modules their own settings."""
        return [{"params": list(self.parameters())}]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """Optimizer over the trainable parameters, from the constructor arguments."""
        groups = []
        for group in self.optimizer_param_groups():
            params = [p for p in group["params"] if p.requires_grad]
            if params:
                groups.append({**group, "params": params})
        if not groups:
            raise ConfigError(
                f"{type(self).__name__}: no trainable parameter in phase {self.phase!r}"
            )
        if self.optimizer_name == "sgd":
            return torch.optim.SGD(
                groups, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay
            )
        optimizer_class = torch.optim.Adam if self.optimizer_name == "adam" else torch.optim.AdamW
        return optimizer_class(groups, lr=self.lr, weight_decay=self.weight_decay)

    # ----------------------------------------------------------------- logging
    def log(self, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        """Lightning's ``log``, except while fedlight's orchestrator drives the module
        (:meth:`capture_logs`): then the values are kept on device and averaged per round
        (one host sync per round, not per step)."""
        if self._federated_logs is None:
            super().log(name, value, *args, **kwargs)
            return
        tensor = value.detach() if isinstance(value, Tensor) else torch.tensor(float(value))
        self._federated_logs.setdefault(name, []).append(tensor.float().reshape(()))

    def capture_logs(self, enabled: bool) -> None:
        """Start (``True``) or stop collecting ``self.log`` calls for the orchestrator."""
        self._federated_logs = {} if enabled else None

    @contextlib.contextmanager
    def local_loop(self) -> Iterator[None]:
        """Marks the module as driven by fedlight's local loop (gradients arrive unscaled;
        ``self.log`` is collected even outside a federated run, then dropped)."""
        capturing = self._federated_logs is not None
        self._in_local_loop = True
        if not capturing:
            self.capture_logs(True)
        try:
            yield
        finally:
            self._in_local_loop = False
            if not capturing:
                self.capture_logs(False)

    @contextlib.contextmanager
    def step_logs(self) -> Iterator[dict[str, list[Tensor]]]:
        """Collect what ``self.log`` receives into a fresh dict for the duration, and yield it
        (the batched engine returns one step's logged values from its vmapped step)."""
        saved = self._federated_logs
        self._federated_logs = {}
        try:
            yield self._federated_logs
        finally:
            self._federated_logs = saved

    def batch_key(self) -> tuple[Any, ...]:
        """What, besides the phase, selects the path this client's ``training_step`` takes
        (read after round start): clients train batched together only when their keys are
        equal. Default ``()``; e.g. MAP: whether the client has an HPM yet."""
        return ()

    def pop_federated_logs(self) -> dict[str, Tensor]:
        """Per-name means of what was logged since the last call (device tensors)."""
        logs = {k: torch.stack([v.to(vs[0].device) for v in vs]).mean() for k, vs in
                (self._federated_logs or {}).items() if vs}
        if self._federated_logs is not None:
            self._federated_logs = {}
        return logs

    def clip_gradients(self, optimizer: Any, gradient_clip_val: float | None = None,
                       gradient_clip_algorithm: str | None = None) -> None:
        """Lightning's ``clip_gradients``; in fedlight's local loop (gradients already unscaled)
        it clips the optimizer's parameters directly, and ``None`` / 0 means no clipping."""
        if not self._in_local_loop:
            super().clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
            return
        if not gradient_clip_val:
            return
        params = [p for group in optimizer.param_groups for p in group["params"]
                  if p.grad is not None]
        if (gradient_clip_algorithm or "norm") == "value":
            torch.nn.utils.clip_grad_value_(params, gradient_clip_val)
        else:
            torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)

    # ----------------------------------------------------------------- helpers for methods
    def named_parameters_matching(self, patterns: Sequence[str]) -> list[tuple[str, nn.Parameter]]:
        """Parameters whose names match any glob pattern."""
        return [(n, p) for n, p in self.named_parameters()
                if any(fnmatch.fnmatchcase(n, pat) for pat in patterns)]

    def state_keys_of_type(self, module_types: tuple[type[nn.Module], ...]) -> list[str]:
        """State-dict keys (parameters and buffers) that belong to modules of the given types,
        e.g. every BatchNorm key for FedBN: found by type, never by substring of a name."""
        keys = []
        for module_name, module in self.named_modules():
            if isinstance(module, module_types):
                prefix = f"{module_name}." if module_name else ""
                keys += [prefix + k for k in module.state_dict().keys()]
        return keys


# The valid backbones in --help, as registered when the model zoo was imported.
FederatedClient.__doc__ = (FederatedClient.__doc__ or "").replace(
    "{backbones}", ", ".join(sorted(BACKBONES)))


def weighted_mean(values: Tensor, weight: Tensor | None) -> Tensor:
    """The mean of ``values`` (first dimension: samples) over every dimension, each sample
    counted ``weight`` times (1 real, 0 padding); ``values.mean()`` where ``weight`` is None."""
    if weight is None:
        return values.mean()
    return (weighted_samples(values, weight).sum()
            / (weight.to(values.dtype).sum() * values[0].numel()))


def weighted_samples(values: Tensor, weight: Tensor | None) -> Tensor:
    """``values`` (first dimension: samples) with each sample's row multiplied by its
    ``weight``; ``values`` itself where ``weight`` is None."""
    if weight is None:
        return values
    return values * weight.to(values.dtype).reshape(-1, *([1] * (values.dim() - 1)))


def _class_path(obj: object) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _outermost_init_arguments(instance: object) -> dict[str, Any]:
    """The keyword arguments of the outermost ``__init__`` call building ``instance`` (the
    subclass's own constructor call), so the trainer can rebuild the client from its seed
    (``FederatedTrainer(reinitialize=True)``); ``hparams`` merges every class's arguments and
    cannot be passed back to a subclass that forwards some of them itself."""
    frame = inspect.currentframe()
    outer = None
    while frame is not None:
        if frame.f_code.co_name == "__init__" and frame.f_locals.get("self") is instance:
            outer = frame
        elif outer is not None:
            break
        frame = frame.f_back
    if outer is None:
        return {}
    info = inspect.getargvalues(outer)
    arguments = {name: info.locals[name] for name in info.args[1:]}
    if info.keywords:
        arguments.update(info.locals[info.keywords])
    return arguments
