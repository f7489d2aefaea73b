"""GPFL: Zhang et al., "GPFL: Simultaneously Learning Global and Personalized Feature Information
for Personalized Federated Learning", ICCV 2023 (arXiv:2308.10279).

A client holds a feature extractor ``phi`` (shared), a conditional valve CoV (shared), a table of
global category embeddings GCE (shared) and a head ``psi`` (private). CoV turns the feature
``f = phi(x)`` into a global feature ``f_G`` and a personalized feature ``f_P``; ``f_G`` is pulled
towards the category embeddings, ``psi(f_P)`` solves the client's own task.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedlight.clients.base import FederatedClient
from fedlight.core.errors import ConfigError

COV_INITS = ("paper", "zero")


class ConditionalValve(nn.Module):
    """GPFL's CoV: two sub-networks ``gamma``, ``beta`` of identical structure
    (``Linear(K, K) -> ReLU -> LayerNorm(K)``) read a conditional vector ``c`` of size ``K`` and
    modulate a feature batch: ``ReLU((gamma(c) + 1) * f + beta(c))`` (the paper's Eq. 3-4).

    ``zero_gains=True`` initializes both LayerNorms' gains to 0 (biases are 0 already), so
    CoV starts as ``ReLU(f)`` and learns its modulation from there (not the paper's)."""

    def __init__(self, dim: int, zero_gains: bool = False) -> None:
        super().__init__()
        self.gamma = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.LayerNorm(dim))
        self.beta = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.LayerNorm(dim))
        if zero_gains:
            for sub in (self.gamma, self.beta):
                nn.init.zeros_(sub[2].weight)

    def forward(self, features: Tensor, conditions: Tensor) -> Tensor:
        """``features`` ``(B, K)`` and ``R`` conditional vectors ``(R, K)`` -> the ``R``
        transformed batches ``(R, B, K)`` (one pass of each sub-network for all routes)."""
        gamma = self.gamma(conditions).unsqueeze(1)
        beta = self.beta(conditions).unsqueeze(1)
        return F.relu((gamma + 1) * features.unsqueeze(0) + beta)


class PseudoFeatureExtractor(nn.Module):
    """GPFL's pseudo feature extractor ``phi~ = phi o CoV`` on the global route (Sec. 3.3):
    ``f~_G = CoV(phi(x), g)``, with ``g`` (the mean of the received GCE table) known to the
    server. It holds the client's own ``phi`` and CoV (their parameters are the client's) and a
    copy of ``g``."""

    def __init__(self, encoder: nn.Module, cov: ConditionalValve | None, g: Tensor) -> None:
        super().__init__()
        self.encoder, self.cov = encoder, cov
        self.register_buffer("g", g.detach().clone())

    def forward(self, x: Tensor) -> Tensor:
        features: Tensor = self.encoder(x)
        return features if self.cov is None else self.cov(features, self.g[None])[0]


class PseudoModel(PseudoFeatureExtractor):
    """GPFL's pseudo model (Eq. 13): the logit of category ``u`` is ``sim(f~_G, GCE(u))``."""

    def __init__(self, encoder: nn.Module, cov: ConditionalValve | None, g: Tensor,
                 gce: nn.Embedding) -> None:
        super().__init__(encoder, cov, g)
        self.gce = gce

    def forward(self, x: Tensor) -> Tensor:
        features = F.normalize(super().forward(x), dim=1)
        return features @ F.normalize(self.gce.weight, dim=1).T


class GPFL(FederatedClient):
    """GPFL client (Zhang et al., ICCV 2023, arXiv:2308.10279).

    Modules: ``model.encoder`` = ``phi`` (shared), ``cov`` = CoV (shared), ``gce`` = an
    ``nn.Embedding(U, K)`` holding the category embeddings ``C`` (shared, N(0, 1) init, the
    embedding default), ``model.head`` = ``psi`` (private, ``Linear(K, U)``).

    Round start: the received ``C`` is copied into the frozen, non-persistent buffer ``C_hat``;
    ``g = mean_u C_hat[u]`` (global conditional input, Eq. 5) and
    ``p_k = sum_u alpha_k[u] C_hat[u] / U`` (personalized conditional input, Eq. 7) with
    ``alpha_k`` the class shares of the client's training split. The authors' code does not
    divide by ``U`` (``p_divide_by_classes=False``): CoV's personalized input is then ``U``
    times larger. The paper's form is the default, as the paper is the specification.
    Local update, all modules end-to-end, on

        f_G = ReLU((gamma + 1) f + beta),  f_P = ReLU((gamma_k + 1) f + beta_k)
        L = CE(psi(f_P), y) + L_alg + lamda * L_mlg  (+ weight decay mu on CoV and GCE)

    * ``L_alg`` (Eq. 8): cross-entropy over the cosine similarities ``sim(f_G, C[u])``, u in [U],
      target ``y``, with the *trainable* ``C`` (GCE learns only through this term).
    * ``L_mlg`` (Eq. 9, garbled in the paper): as in the authors' code, ONE Frobenius norm of the
      whole ``batch x K`` difference ``f_G - C_hat[y]``, not squared and not averaged over the
      batch. The published ``lamda = 0.01`` was tuned for exactly this form; a per-sample mean
      would need a larger ``lamda``.
    * ``mu ||V||_2 + mu ||C||_2`` (Eq. 11) is realised, as in the authors' code, as SGD weight
      decay ``mu`` on the CoV and GCE parameters only (the paper's optimizer is plain SGD, no
      momentum, one learning rate: the base class defaults ``optimizer="sgd"``, ``momentum=0``).
    * ``g`` and ``p_k`` come from the table received this round, so in round 0 from the
      initial N(0, 1) table (the paper's Algorithm 1; the authors' code uses the client's table
      of the previous round, zeros in round 0).
    * ``sim`` normalizes with ``F.normalize`` (eps 1e-12): an all-zero ``f_G`` has similarity 0
      to every embedding.

    Practical note: at initialization CoV's LayerNorm outputs have unit scale, so ``beta``
    adds a large constant to ``f`` (``||f_P - f|| / ||f||`` about 5 with the 4-layer CNN) and
    the personalized head learns more slowly in the first rounds than FedPer's (MNIST-5k, 20
    clients, 2 classes each, lr 0.005: 54% after 2 rounds where FedPer has 74%; 91% after 10
    rounds). Large learning rates make it unstable. ``cov_init="zero"`` (opt-in, not the
    paper's) zero-initializes the LayerNorm gains so that CoV starts as the identity on the
    post-ReLU feature (about 92% against 71% at round 4); the default
    stays the paper's PyTorch-default initialization: at 40 rounds x 3 seeds the zero init
    does not raise the converged accuracy (best personalized: 97.63 against 97.88 on the
    pathological split, 95.13 against 95.82 on Dirichlet 0.1; benchmarks/results/gpfl.md).

    The server takes the sample-weighted mean of ``phi``, CoV and GCE (the base class's rule).
    Prediction and evaluation use the personalized route only: ``forward(x) = psi(f_P)``. GPFL
    has no global classifier, so :attr:`has_global_model` is False.

    Where the conditional inputs come from, outside a fedlight round:

    * evaluation (fedlight evaluates every client from its stored state without a round start):
      whenever the module gets a new :attr:`context` (the orchestrator sets a fresh one each time
      it loads a client, for training and for scoring), ``C_hat``, ``g`` and ``p_k`` are rebuilt
      from the GCE table just loaded, i.e. the latest aggregated one, exactly what the client
      would receive at its next round start;
    * alone in a plain ``lightning.Trainer`` (no context): ``C_hat`` is the table as it is at fit
      start (or at the first forward), kept frozen for the whole fit; the class shares are
      ``trainer.datamodule.class_counts`` when the datamodule has them (as
      ``fedlight.data.datamodule.ClientDataModule`` does), else uniform.

    Ablations of the paper's Table 6 (each switch changes only what it names):

    * ``personalized_input=False`` ("w/o PCI"): constant vectors replace the conditional
      inputs. The paper calls them ``a`` (for ``p_k``) and ``b`` (for ``g``) without giving
      values; we use ``a = +1`` and ``b = -1`` (all-ones and minus all-ones vectors of size K):
      identical on every client like ``g``, distinct from each other so the two routes stay
      two routes, and both non-zero so CoV's first Linear still gets gradient from each route.
    * ``use_cov=False`` ("w/o CoV"): no CoV module at all, ``f_G = f_P = f`` (``g``, ``p_k``
      are still built but read by nothing); ``L_alg`` and ``L_mlg`` then act on ``f`` itself.
    * ``use_mlg=False`` ("w/o L_mlg"): the ``lamda * L_mlg`` term is dropped (the same loss as
      ``lamda=0``); ``C_hat``, ``g``, ``p_k`` are still built.
    * ``use_gce=False`` ("w/o GCE", where the paper says ``C_hat`` disappears too): no GCE table,
      no ``L_alg`` and no ``L_mlg``. ``g`` and ``p_k`` are both made from ``C_hat``, so without
      it CoV reads the constant vectors of "w/o PCI" (``b = -1`` global, ``a = +1``
      personalized); ``personalized_input`` is then irrelevant. ``f_G`` feeds no loss, so CoV
      learns through the personalized route only.
    * FedPer = ``use_cov=False, use_gce=False``: loss ``CE(psi(phi(x)), y)``, ``phi`` shared,
      ``psi`` private.

    Args:
        lamda: weight ``lambda`` of the magnitude-level guidance ``L_mlg`` (paper: 0.01).
        mu: weight decay on the CoV and GCE parameters (paper: 0.1 for the 4-layer CNN and
            the MLP, 1e-4 for ResNet-18).
        personalized_input: build CoV's inputs from GCE (``g``, ``p_k``); False = "w/o PCI".
        use_cov: transform the feature with CoV; False = "w/o CoV".
        use_mlg: add ``lamda * L_mlg``; False = "w/o L_mlg".
        use_gce: keep the GCE table and its two losses; False = "w/o GCE".
        cov_init: ``"paper"`` (default: PyTorch's LayerNorm init, gains 1) or ``"zero"``
            (CoV's LayerNorm gains start at 0; not in the paper).
        p_divide_by_classes: ``p_k`` divided by ``U`` as Eq. 7 (default); False = the
            authors' code, ``p_k = sum_u alpha_k[u] C_hat[u]``.
        **kwargs: the base arguments (``backbone``, ``lr``, ...); see
            :class:`~fedlight.clients.base.FederatedClient`.

    Raises:
        ValueError: a negative ``lamda`` or ``mu``, or an unknown ``cov_init``.
    """

    batchable = True  # C_hat, g and p_k are buffers built at round start
    sample_weighted = True  # its losses are means (and one norm) over the real samples

    def __init__(
        self,
        lamda: float = 0.01,
        mu: float = 0.1,
        personalized_input: bool = True,
        use_cov: bool = True,
        use_mlg: bool = True,
        use_gce: bool = True,
        cov_init: str = "paper",
        p_divide_by_classes: bool = True,
        **kwargs: Any,
    ) -> None:
        if lamda < 0:
            raise ConfigError(f"lamda (weight of L_mlg) must be >= 0, got {lamda}")
        if mu < 0:
            raise ConfigError(f"mu (weight decay on CoV and GCE) must be >= 0, got {mu}")
        if cov_init not in COV_INITS:
            raise ConfigError(f"unknown cov_init {cov_init!r}; valid: {', '.join(COV_INITS)}")
        super().__init__(**kwargs)
        self.lamda = float(lamda)
        self.mu = float(mu)
        self.personalized_input = bool(personalized_input)
        self.use_cov = bool(use_cov)
        self.use_mlg = bool(use_mlg)
        self.use_gce = bool(use_gce)
        self.cov_init = cov_init
        self.p_divide_by_classes = bool(p_divide_by_classes)
        dim = self.feature_dim
        self.cov = ConditionalValve(dim, cov_init == "zero") if self.use_cov else None
        self.gce = nn.Embedding(self.num_classes, dim) if self.use_gce else None
        # Rebuilt from the received table (never stored, never sent): see refresh_conditions().
        table = torch.zeros(self.num_classes, dim) if self.use_gce else None
        self.register_buffer("C_hat", table, persistent=False)  # None: no table, no buffer
        self.register_buffer("g", torch.zeros(dim), persistent=False)
        self.register_buffer("p", torch.zeros(dim), persistent=False)
        self._conditions_ready = False
        self._conditions_context: Any = None
        self._plain_class_counts: Tensor | None = None

    # ----------------------------------------------------------------- partition
    def private_patterns(self) -> list[str]:
        """The head ``psi`` stays on the client; ``phi``, CoV and GCE are shared."""
        return ["model.head.*"]

    @property
    def has_global_model(self) -> bool:
        """GPFL has no global classifier: the head is private."""
        return False

    def attack_surfaces(self) -> dict[str, nn.Module]:
        """What a server holding the shared part can run as a model (GPFL Sec. 3.3, the
        "-sfe" / "-sm" columns of Table 5): ``sfe``, the pseudo feature extractor, and ``sm``,
        the pseudo model (with GCE), built on the client's current modules and ``g``."""
        self._ensure_conditions()
        surfaces: dict[str, nn.Module] = {
            "sfe": PseudoFeatureExtractor(self.model.encoder, self.cov, self.g)}
        if self.gce is not None:
            surfaces["sm"] = PseudoModel(self.model.encoder, self.cov, self.g, self.gce)
        return surfaces

    # ----------------------------------------------------------------- conditional inputs
    def class_shares(self) -> Tensor:
        """``alpha_k``: the share of each class in the client's training split, ``(U,)``."""
        if self.context is None and self._plain_class_counts is not None:
            counts = self._plain_class_counts.to(self.device)
        else:
            counts = self.train_class_counts()
        counts = counts.float()
        return counts / counts.sum().clamp_min(1.0)

    @torch.no_grad()
    def refresh_conditions(self) -> None:
        """Freeze the current GCE table into ``C_hat`` and rebuild ``g`` and ``p_k`` from it."""
        dim = self.g.shape[0]
        if self.gce is not None and self.C_hat is not None:
            self.C_hat.copy_(self.gce.weight.detach())
        if self.C_hat is not None and self.personalized_input:
            self.g.copy_(self.C_hat.mean(0))
            divisor = self.num_classes if self.p_divide_by_classes else 1
            self.p.copy_(self.class_shares() @ self.C_hat / divisor)
        else:  # the constant vectors b (global route) and a (personalized route)
            self.g.copy_(-torch.ones(dim))
            self.p.copy_(torch.ones(dim))
        self._conditions_ready = True
        self._conditions_context = self.context

    def _ensure_conditions(self) -> None:
        if not self._conditions_ready or self._conditions_context is not self.context:
            self.refresh_conditions()

    def on_round_start(self, round: int, message: dict[str, Any]) -> None:
        """Copy the received GCE table into the frozen ``C_hat``; build ``g`` and ``p_k``."""
        self.refresh_conditions()

    def refresh_buffers(self) -> None:
        """``C_hat``, ``g`` and ``p_k`` for the loaded client, where its context changed."""
        self._ensure_conditions()

    def on_fit_start(self) -> None:
        """Plain-Lightning use: take the class counts of the datamodule (when it has them) and
        freeze the initial table."""
        if self.context is None:
            datamodule = getattr(self.trainer, "datamodule", None)
            counts = getattr(datamodule, "class_counts", None)
            self._plain_class_counts = counts if isinstance(counts, Tensor) else None
            self.refresh_conditions()

    # ----------------------------------------------------------------- the two routes
    def routes(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``(f_G, f_P)`` for an input batch (both ``phi(x)`` when ``use_cov`` is False)."""
        self._ensure_conditions()
        features = self.model.encoder(x)
        if self.cov is None:
            return features, features
        global_features, personal_features = self.cov(features, torch.stack([self.g, self.p]))
        return global_features, personal_features

    def personalized_features(self, x: Tensor) -> Tensor:
        """``f_P`` alone (what prediction needs; ``phi(x)`` when ``use_cov`` is False)."""
        self._ensure_conditions()
        features = self.model.encoder(x)
        return features if self.cov is None else self.cov(features, self.p[None])[0]

    def forward(self, x: Tensor) -> Tensor:
        """Personalized logits ``psi(f_P)``."""
        return self.model.head(self.personalized_features(x))

    def alignment_logits(self, global_features: Tensor) -> Tensor:
        """Cosine similarities ``sim(f_G, C[u])`` to every trainable embedding, ``(B, U)``."""
        assert self.gce is not None
        return F.normalize(global_features, dim=1) @ F.normalize(self.gce.weight, dim=1).T

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        global_features, personal_features = self.routes(x)
        loss_p = self.cross_entropy(self.model.head(personal_features), y)
        loss = loss_p
        self.log("loss_p", loss_p)
        if self.use_gce:
            loss_alg = self.cross_entropy(self.alignment_logits(global_features), y)
            loss = loss + loss_alg
            self.log("loss_alg", loss_alg)
            if self.use_mlg:
                # One Frobenius norm of the batch x K difference: not squared, not averaged.
                assert self.C_hat is not None
                loss_mlg = torch.linalg.norm(self.real_samples(global_features - self.C_hat[y]))
                loss = loss + self.lamda * loss_mlg
                self.log("loss_mlg", loss_mlg)
        self.log("train_loss", loss)
        return loss

    # ----------------------------------------------------------------- optimizer
    def optimizer_param_groups(self) -> list[dict[str, Any]]:
        """``phi`` and ``psi`` with the base weight decay; CoV and GCE with weight decay ``mu``."""
        regularized: Sequence[nn.Module] = [m for m in (self.cov, self.gce) if m is not None]
        groups: list[dict[str, Any]] = [{"params": list(self.model.parameters())}]
        decayed = [p for module in regularized for p in module.parameters()]
        if decayed:
            groups.append({"params": decayed, "weight_decay": self.mu})
        return groups
