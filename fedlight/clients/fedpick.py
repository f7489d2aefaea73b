"""FedPick: Zhu, Liu, Tang, Niu, Wu and Shen, "Take Your Pick: Enabling Effective Personalized
Federated Learning within Low-dimensional Feature Space", arXiv:2307.13995 (2023).

Each client selects, per sample, the features of a shared encoder that matter for its own
domain. A client holds the global encoder ``phi_g`` and global classifier ``h_g`` (shared, except
the encoder's BatchNorm layers, private as in FedBN) and a private *personalized feature
selection module* (PFSM): a mask network ``varphi``, a personalized classifier ``h_p`` and an
irrelevant-feature classifier ``h_u``::

    z_g = phi_g(x),  l = varphi(z_g),  m_s = sigmoid((l + G' - G'') / tau)   (Eq. 9)
    m = 1[m_s >= 0.5] forward, d m / d m_s = 1 backward (straight-through)
    z_p = z_g * m,  z_u = z_g * (1 - m)                                      (Eq. 10)
    L = CE(h_g(z_g), y) + l_lce CE(h_p(z_p), y) + l_ent sum_c q_c log q_c
        + l_dis [KL(q_p || q_g) + KL(q_g || q_p)],  q = softmax(h_u(z_u))     (Eq. 8, 11-13, 15)
    prediction: softmax(h_g(z_g) + h_p(z_p)), no noise (mask 1[l >= 0])      (Eq. 14)

The server takes the sample-weighted mean of the shared part (Eq. 16). The module also offers
the paper's feature analyses: :func:`feature_sparsity_ratio` (Eq. 3-4), :func:`fisher_scores`
(Eq. 5-7) and :meth:`FedPick.keep_ratio` (the selection ratios of Fig. 7).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedlight.clients.base import FederatedClient, weighted_mean
from fedlight.clients.fedbn import BATCH_NORMS
from fedlight.core.errors import ConfigError
from fedlight.core.noise import NoiseSource

SOLO_HEADS = ("global", "personalized")


# ===================================================================== loss terms and analyses
def negative_entropy(logits: Tensor, weight: Tensor | None = None) -> Tensor:
    """``L_ent`` (Eq. 12): the batch mean of ``sum_c q_c log q_c``, ``q = softmax(logits)``
    (over the samples of ``weight`` 1, where given: a padded batch).

    Minimizing it maximizes the entropy: its minimum, ``-log U``, is the uniform prediction.
    """
    log_q = F.log_softmax(logits, dim=-1)
    return weighted_mean((log_q.exp() * log_q).sum(-1), weight)


def symmetric_kl(logits_a: Tensor, logits_b: Tensor, weight: Tensor | None = None) -> Tensor:
    """``L_dis`` (Eq. 13): batch mean of ``KL(q_a || q_b) + KL(q_b || q_a)`` of the softmaxes
    (over the samples of ``weight`` 1, where given).

    Gradient flows into both arguments (the paper's "cyclic" distillation: each prediction is
    the other's teacher); the temperature is 1 (the paper gives none).
    """
    log_a, log_b = F.log_softmax(logits_a, dim=-1), F.log_softmax(logits_b, dim=-1)
    return weighted_mean(((log_a.exp() - log_b.exp()) * (log_a - log_b)).sum(-1), weight)


def feature_sparsity_ratio(features: Tensor, eps: float = 1e-5) -> float:
    """The paper's sparsity ratio ``S(z, eps)`` (Eq. 3-4) averaged over a batch.

    Each feature vector (a row of ``features``, shape ``(B, d)``) is L2-normalized; the ratio
    is the share of components whose magnitude is ``<= eps``. For the non-negative (post-ReLU)
    features of the paper's CNN ``|z| <= eps`` is its ``z <= eps``; taking the magnitude keeps
    the measure meaningful for signed features. An all-zero row counts as fully sparse.
    """
    flat = features.detach().flatten(1).float()
    normalized = flat / flat.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return float((normalized.abs() <= eps).float().mean())


def fisher_scores(features: Tensor, labels: Tensor) -> Tensor:
    """Fisher score ``S_b / S_w`` of every feature component (Eq. 5-7), shape ``(d,)``.

    ``S_b = sum_j m_j (mu_ij - mu_i)^2``, ``S_w = sum_j m_j sigma_ij^2`` over the classes ``j``
    present in ``labels`` (``m_j`` their sizes, population variances). A component with
    ``S_w = 0`` gets score 0 if it is also constant across classes, else ``inf``.
    """
    z = features.detach().flatten(1).double()
    overall = z.mean(0)
    between = torch.zeros_like(overall)
    within = torch.zeros_like(overall)
    for c in labels.unique():
        zc = z[labels == c]
        between += len(zc) * (zc.mean(0) - overall) ** 2
        within += len(zc) * zc.var(0, unbiased=False)
    score = between / within
    return torch.where((within == 0) & (between == 0), torch.zeros_like(score), score).float()


def straight_through(soft: Tensor, keep: Tensor) -> Tensor:
    """Forward: the exact binary mask ``keep`` (as ``soft``'s dtype, since ``soft - soft``
    is exactly 0); backward: the incoming gradient goes unchanged to ``soft`` (the
    straight-through estimator of the paper's [45]). Plain tensor operations, so vmap
    batches it."""
    return keep.to(soft.dtype) + (soft - soft.detach())


# ===================================================================== the PFSM
class FeatureSelector(nn.Module):
    """FedPick's PFSM: the mask network ``varphi`` (``Linear(d, d/2) -> ReLU -> Linear(d/2, d)``,
    one logit per feature, per sample), the personalized classifier ``h_p`` (``relevant_head``)
    and the irrelevant-feature classifier ``h_u`` (``irrelevant_head``), ``Linear(d, U)`` each.
    ``d/2`` is ``max(1, d // 2)``."""

    def __init__(self, dim: int, num_classes: int) -> None:
        super().__init__()
        hidden = max(1, dim // 2)
        self.mask_net = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, dim))
        self.relevant_head = nn.Linear(dim, num_classes)
        self.irrelevant_head = nn.Linear(dim, num_classes)


@dataclass
class FedPickOutputs:
    """Everything one forward pass of :class:`FedPick` computes for a batch.

    ``mask`` is the mask applied to the features (exactly 0/1 with ``hard_mask``, else the soft
    mask); ``mask_logits`` is ``l = varphi(z_g)`` before noise. Without a PFSM (``pfsm=False``)
    only ``z_g`` and ``logits_g`` are set.
    """

    z_g: Tensor
    logits_g: Tensor
    mask_logits: Tensor | None = None
    soft_mask: Tensor | None = None
    mask: Tensor | None = None
    z_p: Tensor | None = None
    z_u: Tensor | None = None
    logits_p: Tensor | None = None
    logits_u: Tensor | None = None


# ===================================================================== the client
class FedPick(FederatedClient):
    """FedPick client (Zhu et al., arXiv:2307.13995, 2023): personalized feature selection.

    Modules: ``model.encoder`` = ``phi_g`` (shared but for its BatchNorm layers),
    ``model.head`` = ``h_g`` (shared), ``pfsm`` = :class:`FeatureSelector` (private):
    ``pfsm.mask_net`` = ``varphi``, ``pfsm.relevant_head`` = ``h_p``,
    ``pfsm.irrelevant_head`` = ``h_u``. The update rule is in the module docstring; every
    parameter trains on the total loss at once (the paper's Algorithm 1). Logged every step
    (``train/<name>`` columns in ``metrics.csv``): the loss terms ``loss_gce``, ``loss_lce``,
    ``loss_ent``, ``loss_dis`` (and ``loss_budget``), ``keep_ratio`` (the share of features
    the noisy training mask keeps), ``keep_ratio_clean`` (the noise-free mask ``1[l >= 0]``:
    what prediction uses) and ``mask_logit_abs`` (the mean ``|l|``: the Gumbel-difference
    noise, standard deviation 1.8, decides the training mask wherever ``|l|`` is below a few
    units, and ``tau = 10`` shrinks the mask's gradient tenfold).

    Prediction (``forward``): the logits ``h_g(z_g) + h_p(z_p)`` (Eq. 14 up to the softmax,
    which does not change the argmax), with no noise and the mask ``1[l >= 0]``.
    ``eval_outputs`` adds ``global_head`` (``h_g(z_g)`` alone) and ``personalized_head``
    (``h_p(z_p)`` alone), so every evaluation also reports the accuracies of the two "without
    ensemble" variants (``global_head_accuracy``, ``personalized_head_accuracy``).

    Choices where the paper is silent or ambiguous:

    * the Gumbel noises ``G'``, ``G''`` are standard Gumbel(0, 1) (``-log(-log U)``; the paper
      says "sampled from U[0, 1]", which describes ``U``), drawn independently per sample and
      feature at every training forward, never in ``eval()`` mode, from the client's own
      counter-based stream (``noise``, a ``fedlight.core.noise.NoiseSource`` keyed from
      ``(seed, round, client)``), so batched clients draw exactly what the loop draws;
    * the hard mask is taken on the sign of ``(l + G' - G'')`` (equal to ``m_s >= 0.5`` in exact
      arithmetic, and free of float32 rounding of the sigmoid near 0.5), so at inference it is
      exactly the digest's rule ``l >= 0``; :func:`straight_through` makes the forward value
      exactly binary and passes the gradient straight to ``m_s``;
    * ``L_dis`` follows Eq. 13 (personalized vs global prediction; Algorithm 1's
      ``L_dis(y_p, y_u)`` is taken as a typo), temperature 1, gradient into both sides; each loss
      is a batch mean;
    * the ensemble adds logits (the digest's reading of Eq. 14), not probabilities;
    * the PFSM reads the encoder's feature and trains the encoder through ``z_p``, ``z_u`` and
      the mask network's input (no detach). With ``digit_cnn`` and ``all_fc_head: true``
      (FedBN's digits CNN, the paper's Digits-Five model and ``configs/fedpick/digits5.yaml``'s)
      that is the 8192-d conv output and ``h_g`` is the FC stack 2048-512-U; with ``cnn_bn``
      (the CPU-sized ablation configs) the 512-d output of the hidden FC after BatchNorm and
      ReLU;
    * "shared PFSM" shares all of ``varphi``, ``h_p``, ``h_u`` (the paper's ``psi_i``).

    Making selection happen (opt-in knobs, none in the paper; defaults leave the paper's
    method unchanged). At ``tau = 10`` the mask's gradient is small against the noise, and in
    practice the mask can stay a ~50 % random dropout (``keep_ratio_clean`` then tells):

    * ``mask_lr_scale``: the mask network ``varphi`` trains at this multiple of the learning
      rate (its own optimizer parameter group);
    * ``mask_init_bias``: the initial bias of ``varphi``'s last layer, i.e. a starting offset
      of every mask logit (positive: keep more at first);
    * ``keep_budget`` with ``lambda_budget > 0``: adds
      ``lambda_budget * (mean(m_s) - keep_budget)^2``, a penalty pulling the soft mask's mean
      towards the target share of kept features (NOT in the paper).

    Ablations of the paper's Table IV (one switch each, a config each under
    ``configs/fedpick/ablations/``):

    * ``pfsm=False`` ("w/o PFSM"): no PFSM at all; the loss is ``L_gce`` and the prediction
      ``h_g(z_g)`` with private BatchNorm, i.e. FedBN;
    * ``lambda_lce=0``, ``lambda_ent=0``, ``lambda_dis=0`` ("w/o L_lce / L_ent / L_dis"): the term
      is not computed. Without ``L_lce`` and ``L_dis`` nothing trains ``h_p`` any more;
    * ``hard_mask=False`` ("soft mask", Eq. 21): ``z_p = z_g * m_s``, ``z_u = z_g * (1 - m_s)``,
      at inference ``m_s = sigmoid(l / tau)``;
    * ``private_bn=False`` ("share BN"): the encoder's BatchNorm layers are aggregated too;
    * ``private_pfsm=False`` ("share PFSM"): the PFSM is aggregated too (with ``private_bn=False``
      as well, everything is shared and a global model exists);
    * ``ensemble=False`` ("w/o ensemble"): predict with one classifier, ``solo_head``:
      ``"global"`` (``h_g(z_g)``, what the paper's text says this row does: "using only a global
      classifier") or ``"personalized"`` (``h_p(z_p)``).

    Args:
        tau: Gumbel-Sigmoid temperature (Digits-Five: 10; Office / DomainNet: 1).
        lambda_lce: weight of ``L_lce`` (Digits-Five: 10; Office / DomainNet: 1).
        lambda_ent: weight of ``L_ent`` (0.001; the paper saw gradient explosions above 0.1).
        lambda_dis: weight of ``L_dis`` (Digits-Five: 10; Office / DomainNet: 1).
        pfsm: build the PFSM; False = "w/o PFSM" (FedBN).
        hard_mask: binary straight-through mask; False = soft mask.
        private_bn: keep the encoder's BatchNorm layers private (FedBN-style).
        private_pfsm: keep the PFSM private.
        ensemble: predict with ``h_g(z_g) + h_p(z_p)``; False = ``solo_head`` only.
        solo_head: ``"global"`` or ``"personalized"``: the classifier that predicts when
            ``ensemble`` is False (ignored otherwise).
        backbone: default ``"cnn_bn"`` (the 4-layer FedAvg CNN with BatchNorm; the mask sits
            on its 512-d FC feature, not on the paper's 8192 conv features of FedBN's digits
            model, which the zoo does not hold yet). A backbone without BatchNorm makes
            ``private_bn`` a no-op.
        mask_lr_scale: learning-rate multiplier of the mask network (1: the paper).
        mask_init_bias: initial bias of the mask network's output layer (``None``: PyTorch's
            default initialization, the paper's).
        keep_budget: target share of kept features for the budget term, in ``[0, 1]``
            (``None``: no term).
        lambda_budget: weight of the budget term (0: off; needs ``keep_budget``).
        momentum: SGD momentum; the paper uses SGD, lr 0.01 (the base default), momentum 0.5.
        **kwargs: the base arguments (``lr``, ``optimizer``, ...); see
            :class:`~fedlight.clients.base.FederatedClient`.

    Raises:
        ValueError: ``tau <= 0``, a negative ``lambda_*``, an unknown ``solo_head``,
            ``mask_lr_scale <= 0``, ``keep_budget`` outside ``[0, 1]`` or ``lambda_budget > 0``
            without ``keep_budget``.
    """

    batchable = True  # its Gumbel noise comes from a NoiseSource
    sample_weighted = True  # every loss term and logged value over the real samples

    def __init__(
        self,
        tau: float = 10.0,
        lambda_lce: float = 10.0,
        lambda_ent: float = 0.001,
        lambda_dis: float = 10.0,
        pfsm: bool = True,
        hard_mask: bool = True,
        private_bn: bool = True,
        private_pfsm: bool = True,
        ensemble: bool = True,
        solo_head: str = "global",
        mask_lr_scale: float = 1.0,
        mask_init_bias: float | None = None,
        keep_budget: float | None = None,
        lambda_budget: float = 0.0,
        backbone: str = "cnn_bn",
        momentum: float = 0.5,
        **kwargs: Any,
    ) -> None:
        if not tau > 0:
            raise ConfigError(f"tau (Gumbel-Sigmoid temperature) must be > 0, got {tau}")
        for name, value in (("lambda_lce", lambda_lce), ("lambda_ent", lambda_ent),
                            ("lambda_dis", lambda_dis), ("lambda_budget", lambda_budget)):
            if not value >= 0:
                raise ConfigError(f"{name} must be >= 0, got {value}")
        if solo_head not in SOLO_HEADS:
            raise ConfigError(f"unknown solo_head {solo_head!r}; valid: {', '.join(SOLO_HEADS)}")
        _check_selection_knobs(mask_lr_scale, keep_budget, lambda_budget)
        super().__init__(backbone=backbone, momentum=momentum, **kwargs)
        self.tau = float(tau)
        self.lambda_lce = float(lambda_lce)
        self.lambda_ent = float(lambda_ent)
        self.lambda_dis = float(lambda_dis)
        self.use_pfsm = bool(pfsm)
        self.hard_mask = bool(hard_mask)
        self.private_bn = bool(private_bn)
        self.private_pfsm = bool(private_pfsm)
        self.ensemble = bool(ensemble)
        self.solo_head = solo_head
        self.mask_lr_scale = float(mask_lr_scale)
        self.mask_init_bias = mask_init_bias
        self.keep_budget = keep_budget
        self.lambda_budget = float(lambda_budget)
        self.pfsm = (FeatureSelector(self.feature_dim, self.num_classes)
                     if self.use_pfsm else None)
        if self.pfsm is not None and mask_init_bias is not None:
            nn.init.constant_(self.pfsm.mask_net[2].bias, float(mask_init_bias))
        self.noise = NoiseSource()  # the Gumbel noise, keyed per client and round

    # ----------------------------------------------------------------- partition
    def private_patterns(self) -> list[str]:
        """The encoder's BatchNorm keys (``private_bn``) and ``pfsm.*`` (``private_pfsm``)."""
        patterns = self.state_keys_of_type(BATCH_NORMS) if self.private_bn else []
        if self.pfsm is not None and self.private_pfsm:
            patterns.append("pfsm.*")
        return patterns

    def optimizer_param_groups(self) -> list[dict[str, Any]]:
        """One group, or the mask network apart at ``mask_lr_scale`` times the learning rate."""
        if self.pfsm is None or self.mask_lr_scale == 1.0:
            return super().optimizer_param_groups()
        mask = {id(p) for p in self.pfsm.mask_net.parameters()}
        rest = [p for p in self.parameters() if id(p) not in mask]
        return [{"params": rest}, {"params": list(self.pfsm.mask_net.parameters()),
                                   "lr": self.lr * self.mask_lr_scale}]

    # ----------------------------------------------------------------- forward pass
    def select(self, z_g: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(l, m_s, m)`` for global features ``z_g`` ``(B, d)``: mask logits, soft mask and the
        mask applied (binary straight-through with ``hard_mask``, else ``m_s``). Gumbel noise is
        added in training mode only."""
        assert self.pfsm is not None, "select() needs the PFSM (pfsm=True)"
        logits = self.pfsm.mask_net(z_g)
        if self.training:
            noisy = logits + self.noise.gumbel_like(logits) - self.noise.gumbel_like(logits)
        else:
            noisy = logits
        soft = torch.sigmoid(noisy / self.tau)
        mask = straight_through(soft, noisy >= 0) if self.hard_mask else soft
        return logits, soft, mask

    def outputs(self, x: Tensor) -> FedPickOutputs:
        """Features, mask and the three classifiers' logits for an input batch."""
        z_g = self.model.encoder(x)
        out = FedPickOutputs(z_g=z_g, logits_g=self.model.head(z_g))
        if self.pfsm is None:
            return out
        out.mask_logits, out.soft_mask, out.mask = self.select(z_g)
        out.z_p = z_g * out.mask
        out.z_u = z_g * (1 - out.mask)
        out.logits_p = self.pfsm.relevant_head(out.z_p)
        out.logits_u = self.pfsm.irrelevant_head(out.z_u)
        return out

    def _predict(self, out: FedPickOutputs) -> Tensor:
        if out.logits_p is None:
            return out.logits_g
        if self.ensemble:
            return out.logits_g + out.logits_p
        return out.logits_g if self.solo_head == "global" else out.logits_p

    def forward(self, x: Tensor) -> Tensor:
        """Personalized logits: ``h_g(z_g) + h_p(z_p)`` (or the ``solo_head``'s alone)."""
        return self._predict(self.outputs(x))

    def eval_outputs(self, x: Tensor) -> dict[str, Tensor]:
        """``personalized`` (the prediction), ``global_head`` and ``personalized_head`` logits."""
        out = self.outputs(x)
        scores = {"personalized": self._predict(out), "global_head": out.logits_g}
        if out.logits_p is not None:
            scores["personalized_head"] = out.logits_p
        return scores

    # ----------------------------------------------------------------- training
    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        out = self.outputs(x)
        loss = self.cross_entropy(out.logits_g, y)
        self.log("loss_gce", loss)
        if out.logits_p is not None and out.logits_u is not None and out.mask is not None:
            if self.lambda_lce:
                loss_lce = self.cross_entropy(out.logits_p, y)
                loss = loss + self.lambda_lce * loss_lce
                self.log("loss_lce", loss_lce)
            if self.lambda_ent:
                loss_ent = negative_entropy(out.logits_u, self.sample_weight)
                loss = loss + self.lambda_ent * loss_ent
                self.log("loss_ent", loss_ent)
            if self.lambda_dis:
                loss_dis = symmetric_kl(out.logits_p, out.logits_g, self.sample_weight)
                loss = loss + self.lambda_dis * loss_dis
                self.log("loss_dis", loss_dis)
            if self.lambda_budget and self.keep_budget is not None:
                assert out.soft_mask is not None
                loss_budget = (self.sample_mean(out.soft_mask) - self.keep_budget) ** 2
                loss = loss + self.lambda_budget * loss_budget
                self.log("loss_budget", loss_budget)
            self._log_mask(out)
        self.log("train_loss", loss)
        return loss

    def _log_mask(self, out: FedPickOutputs) -> None:
        assert out.mask is not None and out.mask_logits is not None
        logits = out.mask_logits.detach()
        self.log("keep_ratio", self.sample_mean(out.mask.detach()))
        self.log("keep_ratio_clean", self.sample_mean((logits >= 0).float()))
        self.log("mask_logit_abs", self.sample_mean(logits.abs()))

    # ----------------------------------------------------------------- analyses
    @torch.no_grad()
    def keep_ratio(self, x: Tensor, batch_size: int = 512) -> float:
        """Share of features the PFSM keeps at inference (noise-free mask, ``eval()`` mode,
        hard threshold even for a soft-mask model), averaged over the samples of ``x``."""
        if self.pfsm is None:
            return 1.0
        was_training = self.training
        self.eval()
        kept, total = 0.0, 0
        for start in range(0, len(x), batch_size):
            logits = self.pfsm.mask_net(self.model.encoder(x[start:start + batch_size]))
            kept += float((logits >= 0).float().sum())
            total += logits.numel()
        self.train(was_training)
        return kept / max(total, 1)


def _check_selection_knobs(mask_lr_scale: float, keep_budget: float | None,
                           lambda_budget: float) -> None:
    if not mask_lr_scale > 0:
        raise ConfigError(f"mask_lr_scale must be > 0, got {mask_lr_scale}")
    if keep_budget is not None and not 0 <= keep_budget <= 1:
        raise ConfigError(f"keep_budget must be in [0, 1] (or null), got {keep_budget}")
    if lambda_budget > 0 and keep_budget is None:
        raise ConfigError(f"lambda_budget={lambda_budget} needs keep_budget (a share in [0, 1])")


__all__ = ["FedPick", "FedPickOutputs", "FeatureSelector", "feature_sparsity_ratio",
           "fisher_scores", "negative_entropy", "straight_through", "symmetric_kl"]
