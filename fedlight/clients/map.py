"""MAP: Li, Zhan et al., "MAP: Model Aggregation and Personalization in Federated Learning with
Incomplete Classes", IEEE TKDE 2024 (arXiv:2404.09232), and its two precursors by the same
authors, FedRS (KDD 2021) and FedPHP (ECML-PKDD 2021), as ablations of it (their classes:
``fedlight/clients/fedrs.py``, ``fedlight/clients/fedphp.py``).

Every client trains the shared full model in two phases. Phase 1 ("rs") uses the *restricted
softmax*: the logit of every class the client never observed is scaled by ``a`` (Eq. 8), which
slows down how fast the proxies of missing classes are pushed away; the model at the end of
phase 1 is the upload. Phase 2 ("personalize") continues from it with the plain softmax and
``(1 - lambda) CE + lambda L_kt`` (Eq. 13), ``L_kt`` transferring knowledge from the client's
frozen *inherited private model* (HPM); the result is the personalized model, which is folded
into the HPM by a client-specific moving average (Eq. 10). The server takes the uniform mean of
the uploads (Algorithm 1; set ``trainer.weighting: uniform``).

    FedRS  = MAP with ``kt="none"``   (restricted softmax only, no HPM)
    FedPHP = MAP with ``rs_alpha=1``  (HPM only, plain softmax everywhere)
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedlight.clients.base import FederatedClient, weighted_mean
from fedlight.clients.restricted_softmax import RestrictedSoftmax
from fedlight.core.client import Phase
from fedlight.core.errors import ConfigError
from fedlight.data.datamodule import batches_per_epoch, iterate_batches

KT_LOSSES = ("kd", "mmd", "none")
KD_FORMS = ("paper", "code")
HPM_INITS = ("none", "initial")
SCHEDULES = ("code", "paper")
CODE_PERSONALIZE_LR_SCALE = 0.2  # the released code's learning rate of the personalization
CODE_PERSONALIZE_MIN_STEPS = 5  # ... and its step count, max(int(0.1 x local steps), 5)
MMD_BANDWIDTH_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0)


# ===================================================================== pure functions
def kd_loss(student_logits: Tensor, teacher_logits: Tensor, tau: float = 4.0,
            weight: Tensor | None = None) -> Tensor:
    """MAP's Eq. 11: ``tau^2 * mean_i KL(softmax(g_hpm,i / tau) || softmax(g_i / tau))``
    (the mean over the samples of ``weight`` 1, where given: a padded batch).

    Written out from log-softmaxes (``F.kl_div`` has no vmap rule: batched clients would
    run it once per client)."""
    log_teacher = F.log_softmax(teacher_logits.detach() / tau, dim=-1)
    log_student = F.log_softmax(student_logits / tau, dim=-1)
    divergence = log_teacher.exp() * (log_teacher - log_student)
    if weight is not None:
        return tau * tau * weighted_mean(divergence.sum(-1), weight)
    return tau * tau * divergence.sum() / student_logits.shape[0]


def kd_loss_code(student_logits: Tensor, teacher_logits: Tensor, tau: float = 4.0,
                 weight: Tensor | None = None) -> Tensor:
    """The KD term of the authors' released code: ``mean_i CE(softmax(g_hpm,i / tau), g_i)``
    (over the samples of ``weight`` 1, where given).

    Only the teacher is softened and there is no ``tau^2``: the student's plain log-softmax
    against the teacher's softened distribution (``kd_form="code"``)."""
    teacher = F.softmax(teacher_logits.detach() / tau, dim=-1)
    cross = teacher * F.log_softmax(student_logits, dim=-1)
    if weight is not None:
        return -weighted_mean(cross.sum(-1), weight)
    return -cross.sum() / student_logits.shape[0]


def mmd_loss(
    features: Tensor, teacher_features: Tensor,
    bandwidth_factors: Sequence[float] = MMD_BANDWIDTH_FACTORS, weight: Tensor | None = None,
) -> Tensor:
    """MAP's Eq. 12: squared MMD between two feature batches under a sum of Gaussian kernels.

    The kernels are ``exp(-||u - v||^2 / (b * s))`` for ``s`` in ``bandwidth_factors``, with ``b``
    the mean pairwise squared distance of the pooled batch (the diagonal excluded; no gradient
    flows through ``b``). The estimate is the biased (V-statistic) one,
    ``mean K(x, x') + mean K(y, y') - 2 mean K(x, y)``: zero for identical batches, positive
    otherwise. ``teacher_features`` are detached. With ``weight`` (1 per real sample, 0 per
    padding) the padding's rows and columns count for nothing.
    """
    x = features.flatten(1)
    y = teacher_features.detach().flatten(1).to(x.dtype)
    pooled = torch.cat([x, y])
    distances = torch.cdist(pooled, pooled).pow(2)
    b = x.shape[0]
    if weight is not None:
        return weighted_mmd(distances, bandwidth_factors, weight.to(x.dtype), b)
    n = pooled.shape[0]
    bandwidth = (distances.detach().sum() / max(n * n - n, 1)).clamp_min(1e-12)
    kernel = gaussian_kernels(distances, bandwidth, bandwidth_factors)
    return kernel[:b, :b].mean() + kernel[b:, b:].mean() - 2 * kernel[:b, b:].mean()


def gaussian_kernels(distances: Tensor, bandwidth: Tensor,
                     bandwidth_factors: Sequence[float]) -> Tensor:
    """``sum_s exp(-distances / (bandwidth * s))`` over ``bandwidth_factors``."""
    kernel: Tensor = sum(torch.exp(-distances / (bandwidth * s)) for s in bandwidth_factors)
    return kernel


def weighted_mmd(distances: Tensor, bandwidth_factors: Sequence[float], weight: Tensor,
                 b: int) -> Tensor:
    """:func:`mmd_loss` over the real samples of a padded batch: ``distances`` of the pooled
    ``2b`` features, ``weight`` the ``b`` samples' weights (0 or 1). Every sum and count of
    the unweighted estimate runs over real pairs."""
    pairs = torch.cat([weight, weight])
    pair_weights = pairs[:, None] * pairs[None, :]
    n = pairs.sum()
    bandwidth = ((distances.detach() * pair_weights).sum()
                 / (n * n - n).clamp_min(1)).clamp_min(1e-12)
    kernel = gaussian_kernels(distances, bandwidth, bandwidth_factors) * pair_weights
    real = weight.sum()
    return (kernel[:b, :b].sum() + kernel[b:, b:].sum() - 2 * kernel[:b, b:].sum()) / (
        real * real)


def hpm_momentum(selections: int, join_ratio: float, rounds: int, mu: float = 0.9,
                 cap: float = 1.0) -> float:
    """The client-specific momentum ``mu_k = clip(mu * z_k / (Q * T), 0, cap)`` of the HPM update.

    Args:
        selections: ``z_k``, the times the client was selected *before* the current round
            (Algorithm 1 updates the HPM, step 14, before it adjusts ``mu_k``, step 15), so the
            first update has ``mu_k = 0``: the HPM is then the personalized model itself.
        join_ratio: ``Q``.
        rounds: ``T``.
        mu: the macro momentum.
        cap: the upper clip (the paper: 1, which freezes the HPM for good once
            ``mu z_k >= Q T``; the authors' code: 0.9).
    """
    return min(max(mu * selections / (join_ratio * rounds), 0.0), cap)


# ===================================================================== the client
class MAP(RestrictedSoftmax, FederatedClient):
    """MAP client (IEEE TKDE 2024, arXiv:2404.09232): restricted softmax + inherited private model.

    Modules: ``model`` is the shared full model (encoder + head, aggregated); ``hpm`` is a
    frozen deep copy of it (``requires_grad=False``, always in eval mode), private to the
    client, with the private buffer ``hpm_updates`` (how many times it was updated, i.e. ``z_k``,
    equal to ``context.participations``; 0 means "no HPM yet"). Both persist per client through
    the private partition and in checkpoints. With ``kt="none"`` there is no ``hpm`` at all
    (nothing would read it) and the client keeps no private state.

    Local schedule of ``E = trainer.local_epochs`` epochs (:meth:`local_phases`), two phases:

    1. ``"rs"``: CE on the restricted logits ``a_c * g_c``. The scale multiplies the whole
       logit, bias included (the paper omits the bias), so with ``a = 0`` no gradient at all
       reaches a missing class's row of the head. A class is observed when it occurs at least
       once in the client's training split. The upload is snapshotted here.
    2. ``"personalize"``: continuing from the upload, ``(1 - lamda) CE(g, y) + lamda L_kt``
       with the plain softmax. Before the client has an HPM (its first participation) the loss
       is the plain ``CE(g, y)`` (under ``hpm_init: initial`` the initial model teaches). Each
       phase gets a fresh optimizer (the SGD momentum buffer restarts), as the phases use
       different losses and learning rates.

    How long each phase is, ``schedule``:

    * ``"code"`` (default; the authors' released code, which produced the paper's tables):
      ``rs`` runs all ``E`` epochs, then ``personalize`` runs ``max(floor(0.1 S), 5)``
      optimizer steps (the code's ``max(int(0.1 * S), 5)``), ``S`` the steps of the ``rs``
      phase (whole epochs over the client's data, the last one cut at that step count), at
      0.2 x the learning rate. The upload thus
      gets FedAvg's full local work. This is the default because it is the form that
      reproduces the paper's claim that MAP aggregates at least as well as FedAvg: under the
      paper's form, clients of ~40 samples upload after half of FedAvg's steps and MAP's
      aggregation accuracy falls below FedAvg's (measured with fedlight).
    * ``"paper"`` (Algorithm 1): ``rs`` for ``ceil(E / 2)`` epochs (an odd ``E`` puts the extra
      epoch here), ``personalize`` for the remaining ``E - ceil(E / 2)`` at the full learning
      rate; ``E = 1`` gives no personalization phase (the personalized model is the upload).

    ``rs_epochs``, ``personalize_epochs`` and ``personalize_lr_scale`` override the schedule's
    values when set (``personalize_epochs`` then counts whole epochs; 0 skips the phase;
    ``rs_epochs: 0`` with ``personalize_epochs >= 1`` skips phase 1, and the upload is then the
    personalized model: the original FedPHP, see :class:`~fedlight.clients.fedphp.FedPHP`).

    ``L_kt``: ``"kd"`` (Eq. 11, ``tau^2 * mean KL(softmax(g_hpm / tau) || softmax(g / tau))``,
    ``tau = 4``) or ``"mmd"`` (Eq. 12, between the encoder outputs of the model and of the HPM,
    5 Gaussian kernels with bandwidths ``b x {1/4, 1/2, 1, 2, 4}``, ``b`` the mean pairwise
    squared distance of the pooled batch, no gradient through ``b``).

    Round end (:meth:`on_round_end`): ``hpm <- (1 - mu_k) personalized + mu_k hpm`` over every
    parameter and floating buffer, ``mu_k = clip(mu z_k / (Q T), 0, mu_cap)`` with ``z_k`` the
    earlier selections of the client (the first update copies the personalized model); then the
    HPM's BatchNorm running statistics are re-estimated on the client's training data (a
    cumulative average over its batches in order; nothing happens without BatchNorm).

    Evaluation: ``evaluate_after_local_training = True``: the personalization accuracy is each
    participant's personalized model on its local test split right after local training (the
    paper's protocol), with ``hpm_accuracy`` (the updated HPM, the model Algorithm 1 returns per
    client) beside it. The aggregation accuracy is the shared model on the global test set
    (:meth:`global_forward`); the HPM is private but never used by it, so
    :attr:`has_global_model` is True. Under ``fedlight validate/test`` (every client from its
    stored state, no local training) ``personalized`` is the global model and ``hpm`` the stored
    HPM.

    Paper form against the authors' code (``lxcnju/MAP``, ``algorithms/fedap.py``), the other
    differences, each a switch: the code scales *every* logit by ``a`` (``rs_mode: all``, a
    global temperature; default ``hard``, the paper's Eq. 8, since the code's form is not a
    restricted softmax at all), caps ``mu_k`` at 0.9 (``mu_cap: 0.9``; default 1, the paper's,
    under which a client selected ``Q T / mu`` times keeps its HPM frozen for good), takes the
    sample-weighted mean of the uploads (``trainer.weighting: samples``), softens only the
    teacher in KD and drops ``tau^2`` (``kd_form: code``; default ``paper``, Eq. 11), starts
    every client's HPM as the initial global model, so that a client's first participation
    already distills from it (``hpm_init: initial``; default ``none``: the paper applies no
    transfer before the HPM is stored), warms the learning rate up as ``min(r / 5, 1)`` in
    round ``r = 1, 2, ...`` (``lr_warmup_rounds: 5``; the paper is silent, default 0) and clips
    gradients at norm 100 (``trainer.gradient_clip_val: 100``). From the same initial weights
    and batches, MAP, FedRS and FedPHP with these switches run the authors' classes' rounds
    (``benchmarks/map_vs_authors.py``, ``benchmarks/results/same_start.md``,
    ``docs/authors_code.md``).
    ``configs/map/mnist5k_incomplete_authors_code.yaml`` sets the switches of the code.

    Args:
        rs_alpha: ``a`` in ``[0, 1]``, the logit scale of missing classes (paper: 0.9; 1 is the
            plain softmax).
        rs_mode: ``"hard"`` (MAP's Eq. 8, default), ``"soft"`` (FedRS's
            ``a + (1 - a) p_c / max p``) or ``"all"`` (the released code: every logit times
            ``a``).
        complete_classes: ``a_c = m_c / sum_j m_j`` (Sec. 5.4, complete classes); overrides
            ``rs_alpha`` and ``rs_mode``.
        kt: ``"kd"``, ``"mmd"`` or ``"none"`` (no transfer and no HPM: FedRS).
        lamda: ``lambda`` in ``[0, 1]``, the weight of ``L_kt`` (paper: 0.01).
        tau: KD temperature (paper: 4).
        mu: the macro momentum of the HPM update (paper: 0.9).
        mu_cap: the upper clip of ``mu_k``, in ``(0, 1]`` (paper: 1, default; code: 0.9).
        schedule: ``"code"`` (default) or ``"paper"``: the phase lengths, see above.
        rs_epochs: epochs of phase 1; ``None`` = the schedule's (code: ``E``, paper:
            ``ceil(E / 2)``); 0 (with ``personalize_epochs >= 1``) skips it.
        personalize_epochs: epochs of phase 2; ``None`` = the schedule's (code:
            ``max(floor(0.1 S), 5)`` steps, paper: ``E - rs_epochs`` epochs); 0 skips it.
        personalize_lr_scale: learning-rate multiplier of phase 2; ``None`` = the schedule's
            (code: 0.2, paper: 1).
        kd_form: ``"paper"`` (Eq. 11, default) or ``"code"`` (:func:`kd_loss_code`).
        hpm_init: ``"none"`` (default, the paper: no transfer before the client's first HPM)
            or ``"initial"`` (the code: the HPM starts as the initial model and teaches from
            the client's first participation).
        lr_warmup_rounds: ``W``; every phase's learning rate is scaled by
            ``min((t + 1) / W, 1)`` in round ``t = 0, 1, ...`` (the code: 5); 0 (default) none.
        **kwargs: the base arguments (``backbone``, ``lr``, ...); see
            :class:`~fedlight.clients.base.FederatedClient`.

    Raises:
        ValueError: an unknown ``rs_mode``, ``kt`` or ``schedule``, or a value out of its
            range.
    """

    evaluate_after_local_training = True
    reads_planned_rounds = True  # HPM momentum: mu * selections / (join_ratio * T)
    batchable = True  # a_c and the HPM are buffers / parameters; whether it exists: batch_key
    sample_weighted = True  # CE, KD and MMD over the real samples only

    def __init__(
        self,
        rs_alpha: float = 0.9,
        rs_mode: str = "hard",
        complete_classes: bool = False,
        kt: str = "kd",
        lamda: float = 0.01,
        tau: float = 4.0,
        mu: float = 0.9,
        mu_cap: float = 1.0,
        schedule: str = "code",
        rs_epochs: int | None = None,
        personalize_epochs: int | None = None,
        personalize_lr_scale: float | None = None,
        kd_form: str = "paper",
        hpm_init: str = "none",
        lr_warmup_rounds: int = 0,
        **kwargs: Any,
    ) -> None:
        _check_range("lamda", lamda, 0.0, 1.0)
        if kt not in KT_LOSSES:
            raise ConfigError(f"unknown kt {kt!r}; valid: {', '.join(KT_LOSSES)}")
        if not tau > 0:
            raise ConfigError(f"tau (KD temperature) must be positive, got {tau}")
        if not mu >= 0:
            raise ConfigError(f"mu (macro momentum) must be >= 0, got {mu}")
        if not 0 < mu_cap <= 1:
            raise ConfigError(f"mu_cap must be in (0, 1], got {mu_cap}")
        if schedule not in SCHEDULES:
            raise ConfigError(f"unknown schedule {schedule!r}; valid: {', '.join(SCHEDULES)}")
        if rs_epochs is not None and rs_epochs < 0:
            raise ConfigError(f"rs_epochs must be >= 0 (or null for the schedule's), got "
                             f"{rs_epochs}")
        if rs_epochs == 0 and not (personalize_epochs or 0) >= 1:
            raise ConfigError(f"rs_epochs: 0 needs personalize_epochs >= 1 (some local "
                             f"training), got {personalize_epochs}")
        if kd_form not in KD_FORMS:
            raise ConfigError(f"unknown kd_form {kd_form!r}; valid: {', '.join(KD_FORMS)}")
        if hpm_init not in HPM_INITS:
            raise ConfigError(f"unknown hpm_init {hpm_init!r}; valid: {', '.join(HPM_INITS)}")
        if lr_warmup_rounds < 0:
            raise ConfigError(f"lr_warmup_rounds must be >= 0, got {lr_warmup_rounds}")
        if personalize_epochs is not None and personalize_epochs < 0:
            raise ConfigError(f"personalize_epochs must be >= 0 (or null for the schedule's), "
                             f"got {personalize_epochs}")
        if personalize_lr_scale is not None and not personalize_lr_scale > 0:
            raise ConfigError(f"personalize_lr_scale must be positive, got {personalize_lr_scale}")
        super().__init__(rs_alpha=rs_alpha, rs_mode=rs_mode, complete_classes=complete_classes,
                         **kwargs)
        self.kt = kt
        self.lamda = float(lamda)
        self.tau = float(tau)
        self.mu = float(mu)
        self.mu_cap = float(mu_cap)
        self.schedule = schedule
        self.rs_epochs = rs_epochs
        self.personalize_epochs = personalize_epochs
        if personalize_lr_scale is None:
            personalize_lr_scale = CODE_PERSONALIZE_LR_SCALE if schedule == "code" else 1.0
        self.personalize_lr_scale = float(personalize_lr_scale)
        self.kd_form = kd_form
        self.hpm_init = hpm_init
        self.lr_warmup_rounds = int(lr_warmup_rounds)
        self._round = 0
        self.hpm: nn.Module | None = None
        if kt != "none":
            self.hpm = copy.deepcopy(self.model).requires_grad_(False).eval()
            self.register_buffer("hpm_updates", torch.zeros((), dtype=torch.long))
        self._has_teacher = False

    # ----------------------------------------------------------------- partition
    def private_patterns(self) -> list[str]:
        """The HPM and its update counter stay on the client; the full model is shared."""
        return ["hpm.*", "hpm_updates"] if self.hpm is not None else []

    @property
    def has_global_model(self) -> bool:
        """True while the full model is shared (the HPM is private but :meth:`global_forward`
        never reads it); False when ``extra_private`` keeps part of ``model`` on the clients."""
        return not any(k.startswith("model.") for k in self.partition.private)

    def train(self, mode: bool = True) -> MAP:
        """Lightning's ``train``, except that the frozen HPM always stays in eval mode."""
        super().train(mode)
        if self.hpm is not None:
            self.hpm.eval()
        return self

    # ----------------------------------------------------------------- schedule
    def local_phases(self, local_epochs: int) -> list[Phase]:
        """``rs`` (upload after it; skipped with ``rs_epochs: 0``) then ``personalize``
        (skipped when it has 0 epochs), with the lengths of ``schedule`` unless ``rs_epochs``
        / ``personalize_epochs`` are set; every learning rate times the warm-up factor."""
        code = self.schedule == "code"
        warmup = self.warmup_factor()
        rs = self.rs_epochs
        if rs is None:
            rs = local_epochs if code else math.ceil(local_epochs / 2)
        phases = [Phase("rs", rs, upload_after=True, lr_scale=warmup)] if rs > 0 else []
        epochs, max_steps = self.personalize_epochs, None
        if epochs is None and code:
            per_epoch = self._steps_per_epoch()
            max_steps = max(rs * per_epoch // 10, CODE_PERSONALIZE_MIN_STEPS)  # int(0.1 S)
            epochs = math.ceil(max_steps / per_epoch)
        elif epochs is None:
            epochs = max(local_epochs - rs, 0)
        if epochs > 0:
            phases.append(Phase("personalize", epochs,
                                lr_scale=self.personalize_lr_scale * warmup,
                                max_steps=max_steps))
        return phases

    def warmup_factor(self) -> float:
        """``min((t + 1) / W, 1)`` in round ``t`` (0-based) with ``W = lr_warmup_rounds``;
        1 without warm-up. The code's ``min(r / 5, 1)`` with its 1-based ``r``."""
        if self.lr_warmup_rounds == 0:
            return 1.0
        return min((self._round + 1) / self.lr_warmup_rounds, 1.0)

    def _steps_per_epoch(self) -> int:
        """Optimizer steps of one epoch over this client's data (1 without a context)."""
        if self.context is None:
            return 1
        return batches_per_epoch(self.context.num_train_samples, self.context.batch_size,
                                 self.context.drop_last)

    def on_round_start(self, round: int, message: dict[str, Any]) -> None:
        """Note the round (learning-rate warm-up) and whether this client has a teacher yet
        (an HPM, or the initial model under ``hpm_init: initial``; one host read per round,
        not per step), and build its restricted-softmax scales."""
        self._round = round
        self._has_teacher = self.hpm is not None and (
            self.hpm_init == "initial" or int(self.hpm_updates) > 0)
        self.refresh_rs_scales()

    def batch_key(self) -> tuple[Any, ...]:
        """Clients with an HPM and clients without one take different losses."""
        return (self._has_teacher,)

    # ----------------------------------------------------------------- losses
    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        """Phase ``rs`` (and plain-Lightning ``train``): CE on restricted logits; phase
        ``personalize``: ``(1 - lamda) CE + lamda L_kt`` against the HPM (CE before it exists)."""
        x, y = batch
        if self.phase != "personalize":
            loss = self.cross_entropy(self.model(x) * self.rs_scales(), y)
            self.log("rs_loss", loss)
            return loss
        if not (self._has_teacher and self.hpm is not None):
            loss = self.cross_entropy(self.model(x), y)
            self.log("personalize_loss", loss)
            return loss
        features = self.model.encoder(x)
        logits = self.model.head(features)
        with torch.no_grad():
            teacher_features = self.hpm.encoder(x)
            teacher_logits = self.hpm.head(teacher_features)
        if self.kt == "kd":
            kd = kd_loss if self.kd_form == "paper" else kd_loss_code
            transfer = kd(logits, teacher_logits, self.tau, self.sample_weight)
        else:
            transfer = mmd_loss(features, teacher_features, weight=self.sample_weight)
        loss = (1.0 - self.lamda) * self.cross_entropy(logits, y) + self.lamda * transfer
        self.log("personalize_loss", loss)
        self.log("kt_loss", transfer)
        return loss

    # ----------------------------------------------------------------- the HPM
    def hpm_mu(self, selections: int) -> float:
        """``mu_k`` for a client selected ``selections`` times before (Q, T from the context)."""
        if self.context is None:
            raise RuntimeError("MAP.hpm_mu needs the federated context (join ratio, rounds)")
        return hpm_momentum(selections, self.context.join_ratio, self.context.rounds, self.mu,
                            self.mu_cap)

    @torch.no_grad()
    def on_round_end(self) -> None:
        """Fold the personalized model into the HPM (Eq. 10), then re-estimate its BN stats."""
        if self.hpm is None:
            return
        selections = int(self.hpm_updates)
        mu_k = self.hpm_mu(selections)
        personalized = self.model.state_dict()
        for name, value in self.hpm.state_dict().items():
            new = personalized[name]
            if selections == 0 or not value.is_floating_point():
                value.copy_(new)
            else:
                value.mul_(mu_k).add_(new, alpha=1.0 - mu_k)
        self.hpm_updates += 1
        self.recalibrate_hpm_batchnorm()

    @torch.no_grad()
    def recalibrate_hpm_batchnorm(self) -> None:
        """Recompute the HPM's BatchNorm running statistics on the client's training data.

        A cumulative average (``momentum=None``) over the batches of ``context.batch_size`` in
        data order; a no-op without BatchNorm layers or without training data in the context.
        """
        assert self.hpm is not None
        norms = [m for m in self.hpm.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)
                 and m.track_running_stats]
        if not norms or self.context is None or self.context.train_data is None:
            return
        momenta = [m.momentum for m in norms]
        for m in norms:
            m.reset_running_stats()
            m.momentum = None
        self.hpm.train()
        try:
            x, y = self.context.train_data
            for xb, _ in iterate_batches(x, y, self.context.batch_size):
                self.hpm(xb)
        finally:
            self.hpm.eval()
            for m, value in zip(norms, momenta, strict=True):
                m.momentum = value

    # ----------------------------------------------------------------- prediction
    def global_forward(self, x: Tensor) -> Tensor:
        """The shared (aggregated) model."""
        return self.model(x)

    def eval_outputs(self, x: Tensor) -> dict[str, Tensor]:
        """``personalized`` (the model as it is: right after local training under fedlight's
        protocol) and, when the client keeps one, ``hpm``."""
        outputs = {"personalized": self.model(x)}
        if self.hpm is not None:
            outputs["hpm"] = self.hpm(x)
        return outputs


def _check_range(name: str, value: float, low: float, high: float) -> None:
    if not low <= value <= high:
        raise ConfigError(f"{name} must be in [{low:g}, {high:g}], got {value}")
