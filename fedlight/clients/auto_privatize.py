"""Learning where to privatize: AutoCS, AutoSA and AutoHS on the two-branch ``"AaBb"`` model.

Li, Gan, Zhan, Shao, Li, Song, "Aggregate or Not? Exploring Where to Privatize in DNN Based
Federated Learning Under Different Non-IID Scenes", arXiv:2107.11954 (2021), Sec. 4.3, eq. 6-11,
Algorithm 1, Fig. 2 and Fig. 10.

Every client holds a shared encoder ``E_s`` and classifier ``C_s`` (aggregated), a private
encoder ``E_p`` and classifier ``C_p`` (kept), and fusion coefficients ``psi`` that are
*shared*: trained end to end in local training and averaged by the server like the weights.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedlight.clients.privatize import Privatize
from fedlight.core.errors import ConfigError
from fedlight.core.noise import NoiseSource

FUSE_OUTPUTS = ("paper", "authors")


class AutoSA(Privatize):
    """AutoSA (soft attention): one learned pair of feature weights and one of output weights.

    Paper: "Aggregate or Not?" (Li et al., arXiv:2107.11954), eq. 6, 8, 10, 11. With
    ``h_s = E_s(x)``, ``h_p = E_p(x)``::

        (a0, a1) = SoftMax(alpha / lambda),   (b0, b1) = SoftMax(beta / lambda)
        h_s' = h_p' = a0 h_s + a1 h_p
        logits = b0 C_s(h_s') + b1 C_p(h_p')
        loss = CE(logits, y)

    ``psi = (alpha, beta)`` are shared parameters (aggregated with the shared blocks); they
    start at zero, i.e. equal weights 0.5 / 0.5 after the softmax.

    Args:
        temperature: ``lambda`` of the softmax (2.0, the paper's choice).
        shared_path_loss: also add ``CE(C_s(E_s(x)), y)`` to each step's loss. The authors'
            code takes a *second* optimizer step on the pure shared path after every batch
            (``shared_path_step``); this option is the one-step (summed-loss) version of that
            idea, off by default because the paper does not describe it (the benchmark configs
            turn it on).
        shared_path_step: after every optimizer step on the fused loss, a second step of the
            same optimizer (its momentum, weight decay and the run's gradient clipping) on
            ``CE(C_s(E_s(x)), y)`` of the same batch, as the authors' ``fedps_auto.py`` does
            (off by default: the paper does not describe it; not together with
            ``shared_path_loss``). The second step runs in 32-bit without a loss scale, and
            a client with it trains one client after another under ``batched_clients``.
        private_path_loss: also add ``CE(C_p(E_p(x)), y)``, the same for the private path
            (in neither the paper nor the code; off by default). The fused loss alone never
            trains either path to work on its own. Measured with ``coef_lr_scale=10`` on
            MNIST-5k, 40 rounds x 3 seeds: AutoSA's coefficients move to ~0.75 on the private
            side and its personalized accuracy falls from 96.83 to 95.22 %
            (benchmarks/results/privatize.md).
        coef_lr_scale: learning-rate multiplier of ``psi`` (their own optimizer parameter
            group; 1 = the paper, one learning rate for everything).
        fuse_outputs: ``"paper"`` (default): eq. 11, one fused output ``b0 o_s + b1 o_p``
            trained with one CE. ``"authors"``: the output stage of the authors' code
            (``AutoPSNet`` mixes the classifiers' outputs as it mixes the features): ``beta``
            has the shape of ``alpha``; AutoCS makes two fused outputs
            ``b00 o_s + b01 o_p`` and ``b10 o_s + b11 o_p``, each trained with its own CE and
            predicted by the mean of their probabilities; AutoSA / AutoHS make one, which the
            code returns as both outputs, so its CE counts twice. With ``temperature=1``,
            ``shared_path_step=True`` (and AutoHS's ``sample_at_evaluation=True``) fedlight
            runs the authors' ``FedPSAuto`` round for round
            (benchmarks/privatize_vs_authors.py).
        **kwargs: the base client's arguments (``backbone``, ``lr``, ...). The block structure
            is always ``way="AaBb"`` on the coarse cut (encoder, head); the personalized
            accuracy is scored after local training unless ``evaluate_after_training=False``
            (see :class:`~fedlight.clients.privatize.Privatize`).

    Logged every step (averaged per round into ``train/coef/...`` columns, the curves of the
    paper's Fig. 10): the noise-free softmaxed coefficients ``coef/a0``, ``coef/a1``,
    ``coef/b0``, ``coef/b1`` (AutoCS: ``coef/a00``, ``coef/a01``, ``coef/a10``, ``coef/a11``).
    The global model (aggregation accuracy) is ``C_s(E_s(x))``; the personalized prediction is
    the fused logits. ``eval_outputs`` also scores the pure paths (``shared_path_accuracy``,
    ``private_path_accuracy``).
    """

    #: One feature-mixing pair per fused feature (AutoCS) or one pair for both (AutoSA / HS).
    cross_stitch: bool = False
    #: Sample the coefficients with Gumbel-softmax while training (AutoHS).
    gumbel: bool = False

    batchable = True  # AutoHS's Gumbel noise comes from a NoiseSource

    #: AutoHS: draw the Gumbel selection in evaluation too (the authors' code)
    sample_at_evaluation: bool = False

    def __init__(self, temperature: float = 2.0, shared_path_loss: bool = False,
                 private_path_loss: bool = False, coef_lr_scale: float = 1.0,
                 fuse_outputs: str = "paper", shared_path_step: bool = False,
                 **kwargs: Any) -> None:
        if temperature <= 0:
            raise ConfigError(f"temperature must be positive, got {temperature}")
        if not coef_lr_scale > 0:
            raise ConfigError(f"coef_lr_scale must be positive, got {coef_lr_scale}")
        if fuse_outputs not in FUSE_OUTPUTS:
            raise ConfigError(f"unknown fuse_outputs {fuse_outputs!r}; valid: "
                              f"{', '.join(FUSE_OUTPUTS)}")
        if shared_path_loss and shared_path_step:
            raise ConfigError("shared_path_loss and shared_path_step are two forms of the "
                              "same shared-path term (summed loss, second step); set one")
        super().__init__(way="AaBb", cut="coarse", combine="mean", **kwargs)
        self.temperature = temperature
        self.shared_path_loss = shared_path_loss
        self.private_path_loss = private_path_loss
        self.coef_lr_scale = float(coef_lr_scale)
        self.fuse_outputs = fuse_outputs
        self.shared_path_step = bool(shared_path_step)
        rows = 2 if self.cross_stitch else 1
        self.alpha = nn.Parameter(torch.zeros(rows, 2))
        self.beta = nn.Parameter(torch.zeros(rows, 2) if fuse_outputs == "authors"
                                 else torch.zeros(2))
        if self.shared_path_step:
            # hooks of this instance only, so that the class stays batchable without them
            self.configure_gradient_clipping = self._clip_and_keep_optimizer  # type: ignore
            self.on_train_batch_end = self._shared_path_optimizer_step  # type: ignore
        self._last_step: tuple[Any, float | None, str | None] | None = None
        # AutoHS's Gumbel noise, keyed per client and round (fedlight.core.noise)
        self.noise = NoiseSource() if self.gumbel else None

    # ----------------------------------------------------------------- coefficients
    def coefficients(self, sample: bool = False) -> tuple[Tensor, Tensor]:
        """Softmaxed ``(a, b)``: ``a`` of shape (1, 2) or (2, 2) (AutoCS), ``b`` of shape (2,)
        (or ``a``'s with ``fuse_outputs="authors"``).

        With ``sample=True`` and :attr:`gumbel`, Gumbel(0, 1) noise is added to the raw
        coefficients before the tempered softmax (eq. 9's GumbelSoftMax).
        """
        alpha, beta = self.alpha, self.beta
        if sample and self.noise is not None:
            alpha, beta = alpha + self.noise.gumbel_like(alpha), beta + self.noise.gumbel_like(beta)
        return (F.softmax(alpha / self.temperature, dim=-1),
                F.softmax(beta / self.temperature, dim=-1))

    def probabilities(self) -> tuple[Tensor, Tensor]:
        """The noise-free softmaxed coefficients (what is logged)."""
        return AutoSA.coefficients(self, sample=False)

    # ----------------------------------------------------------------- optimizer
    def optimizer_param_groups(self) -> list[dict[str, Any]]:
        """One group, or ``psi`` apart at ``coef_lr_scale`` times the learning rate."""
        if self.coef_lr_scale == 1.0:
            return super().optimizer_param_groups()
        coefficients = [self.alpha, self.beta]
        rest = [p for p in self.parameters() if all(p is not c for c in coefficients)]
        return [{"params": rest}, {"params": coefficients, "lr": self.lr * self.coef_lr_scale}]

    def fused_outputs(self, x: Tensor, sample: bool = False) -> list[Tensor]:
        """``[b0 C_s(h_s') + b1 C_p(h_p')]`` with the mixed features of eq. 7 / 8 / 9; with
        ``fuse_outputs="authors"`` one such output per row of ``b``, twice for one row."""
        a, b = self.coefficients(sample)
        shared_h, private_h = self.model.encoder(x), self.private["a"](x)
        # one pair (AutoSA / AutoHS): h_s' = h_p' is one tensor feeding both classifiers
        mixed_s = a[0, 0] * shared_h + a[0, 1] * private_h
        mixed_p = mixed_s if len(a) == 1 else a[1, 0] * shared_h + a[1, 1] * private_h
        shared_o, private_o = self.model.head(mixed_s), self.private["b"](mixed_p)
        if self.fuse_outputs == "paper":
            return [b[0] * shared_o + b[1] * private_o]
        first = b[0, 0] * shared_o + b[0, 1] * private_o
        return [first, first if len(b) == 1 else b[1, 0] * shared_o + b[1, 1] * private_o]

    def fused_logits(self, x: Tensor, sample: bool = False) -> Tensor:
        """The personalized prediction: the fused logits, or the log of the mean of the two
        fused outputs' probabilities (``fuse_outputs="authors"``)."""
        return self.combine_outputs(self.fused_outputs(x, sample))

    # ----------------------------------------------------------------- prediction
    def forward(self, x: Tensor) -> Tensor:
        """Personalized prediction: the fused logits (noise-free coefficients, unless
        AutoHS's ``sample_at_evaluation``)."""
        return self.fused_logits(x, sample=self.training or self.sample_at_evaluation)

    def eval_outputs(self, x: Tensor) -> dict[str, Tensor]:
        """The fused prediction, plus each pure path (no mixing) for reference."""
        shared, private = self.path_outputs(x)
        return {"personalized": self(x), "shared_path": shared, "private_path": private}

    # ----------------------------------------------------------------- training
    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        """CE of the fused logits (coefficients sampled for AutoHS), optionally plus the
        pure shared and private paths' CEs; logs the softmaxed coefficients."""
        x, y = batch
        losses = [F.cross_entropy(o, y) for o in self.fused_outputs(x, sample=self.training)]
        loss = losses[0] if len(losses) == 1 else losses[0] + losses[1]
        if self.shared_path_loss:
            loss = loss + F.cross_entropy(self.global_forward(x), y)
        if self.private_path_loss:
            loss = loss + F.cross_entropy(self.private["b"](self.private["a"](x)), y)
        self.log("train_loss", loss)
        self._log_coefficients()
        return loss

    def _clip_and_keep_optimizer(self, optimizer: Any, gradient_clip_val: float | None = None,
                                 gradient_clip_algorithm: str | None = None) -> None:
        """The loop's clipping before the fused step; keeps what the second step needs."""
        self._last_step = (optimizer, gradient_clip_val, gradient_clip_algorithm)
        type(self).configure_gradient_clipping(self, optimizer, gradient_clip_val,
                                               gradient_clip_algorithm)

    def _shared_path_optimizer_step(self, outputs: Any, batch: tuple[Tensor, Tensor],
                                    batch_idx: int) -> None:
        """``shared_path_step``: a second step of the same optimizer on the shared path."""
        if self._last_step is None or not self.training:
            return
        optimizer, clip_val, clip_algorithm = self._last_step
        self._last_step = None
        x, y = batch
        optimizer.zero_grad(set_to_none=True)
        with torch.enable_grad():
            loss = F.cross_entropy(self.global_forward(x), y)
            loss.backward()
        self.clip_gradients(optimizer, clip_val, clip_algorithm)
        optimizer.step()
        self.log("ce/shared_path_step", loss.detach())

    def _log_coefficients(self) -> None:
        with torch.no_grad():
            a, b = self.probabilities()
        if self.cross_stitch:
            for i in range(2):
                for j in range(2):
                    self.log(f"coef/a{i}{j}", a[i, j])
        else:
            self.log("coef/a0", a[0, 0])
            self.log("coef/a1", a[0, 1])
        if b.dim() == 1:
            self.log("coef/b0", b[0])
            self.log("coef/b1", b[1])
            return
        for i in range(b.shape[0]):
            for j in range(2):
                self.log(f"coef/b{i}{j}" if b.shape[0] == 2 else f"coef/b{j}", b[i, j])


class AutoCS(AutoSA):
    """AutoCS (cross-stitch): a separate feature-mixing pair for each classifier.

    Paper: "Aggregate or Not?" (Li et al., arXiv:2107.11954), eq. 7, 10, 11::

        (a00, a01) = SoftMax(alpha[0] / lambda),  (a10, a11) = SoftMax(alpha[1] / lambda)
        h_s' = a00 h_s + a01 h_p,    h_p' = a10 h_s + a11 h_p
        logits = b0 C_s(h_s') + b1 C_p(h_p'),   loss = CE(logits, y)

    ``psi = (alpha (2x2), beta (2))``, shared and aggregated, zero-initialized (all weights
    0.5). Arguments as :class:`AutoSA`.
    """

    cross_stitch = True


class AutoHS(AutoSA):
    """AutoHS (hard selection): AutoSA with Gumbel-softmax coefficients.

    Paper: "Aggregate or Not?" (Li et al., arXiv:2107.11954), eq. 9-11, with fresh
    ``g, g' ~ Gumbel(0, 1)`` (``g = -log(-log(u))``, ``u ~ U(0, 1)``) at every training step,
    drawn from the client's own counter-based stream (``noise``, keyed from
    ``(seed, round, client)``: ``fedlight.core.noise``):

    * ``hard=True`` (default; the paper calls the method hard selection and the authors' code
      samples a hard one-hot at temperature 1): the coefficients are the one-hot of
      ``argmax(alpha + g)`` (and of ``argmax(beta + g')``) in the forward pass, with the
      gradient of ``SoftMax(alpha + g)`` (straight-through; ``temperature`` is not used).
      Where the paper is silent: evaluation selects deterministically, the one-hot of
      ``argmax(alpha)`` (ties: the shared side), so the prediction uses one path per stage as
      in training; the logged coefficients are the selection probabilities
      ``SoftMax(alpha)``.
    * ``hard=False``: the soft relaxation ``SoftMax((alpha + g) / lambda)`` with temperature
      ``lambda`` (fedlight's earlier form); evaluation uses the noise-free
      ``SoftMax(alpha / lambda)``, which is also what is logged.

    Args:
        hard: straight-through one-hot selections at temperature 1 (default) or the soft
            relaxation at ``temperature``.
        sample_at_evaluation: draw a fresh Gumbel selection at every forward, evaluation
            included (the authors' ``AutoPSNet`` samples whether training or not, so their
            personalized accuracy is that of one random selection per test batch); default
            False: evaluation selects deterministically as above.
        **kwargs: as :class:`AutoSA`.
    """

    gumbel = True

    def __init__(self, hard: bool = True, sample_at_evaluation: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hard = bool(hard)
        self.sample_at_evaluation = bool(sample_at_evaluation)

    def coefficients(self, sample: bool = False) -> tuple[Tensor, Tensor]:
        """Hard: straight-through one-hot samples (training) or the argmax one-hot; soft:
        :meth:`AutoSA.coefficients`."""
        if not self.hard:
            return super().coefficients(sample)
        if sample:
            assert self.noise is not None
            return _hard_gumbel(self.alpha, self.noise), _hard_gumbel(self.beta, self.noise)
        return _one_hot_argmax(self.alpha), _one_hot_argmax(self.beta)

    def probabilities(self) -> tuple[Tensor, Tensor]:
        """Selection probabilities: the softmax at temperature 1 when hard."""
        if not self.hard:
            return super().probabilities()
        return F.softmax(self.alpha, dim=-1), F.softmax(self.beta, dim=-1)


def _one_hot_argmax(logits: Tensor) -> Tensor:
    """The one-hot of the last dimension's argmax (first index on ties), as ``logits``."""
    return F.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)


def _hard_gumbel(logits: Tensor, noise: NoiseSource) -> Tensor:
    """Straight-through Gumbel-softmax at temperature 1: the one-hot of
    ``argmax(logits + g)`` forward, the gradient of ``softmax(logits + g)`` backward."""
    soft = F.softmax(logits + noise.gumbel_like(logits), dim=-1)
    hard = _one_hot_argmax(soft)
    return hard - soft.detach() + soft


__all__ = ["AutoCS", "AutoHS", "AutoSA"]
