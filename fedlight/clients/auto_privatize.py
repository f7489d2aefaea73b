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
            code takes a *second* optimizer step on the pure shared path after every batch;
            this option is the one-step (summed-loss) version of that idea, off by default
            because the paper does not describe it.
        **kwargs: the base client's arguments (``backbone``, ``lr``, ...). The block structure
            is always ``way="AaBb"`` on the coarse cut (encoder, head).

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

    def __init__(self, temperature: float = 2.0, shared_path_loss: bool = False,
                 **kwargs: Any) -> None:
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        super().__init__(way="AaBb", cut="coarse", combine="mean", **kwargs)
        self.temperature = temperature
        self.shared_path_loss = shared_path_loss
        self.alpha = nn.Parameter(torch.zeros(2 if self.cross_stitch else 1, 2))
        self.beta = nn.Parameter(torch.zeros(2))

    # ----------------------------------------------------------------- coefficients
    def coefficients(self, sample: bool = False) -> tuple[Tensor, Tensor]:
        """Softmaxed ``(a, b)``: ``a`` of shape (1, 2) or (2, 2) (AutoCS), ``b`` of shape (2,).

        With ``sample=True`` and :attr:`gumbel`, Gumbel(0, 1) noise is added to the raw
        coefficients before the tempered softmax (eq. 9's GumbelSoftMax).
        """
        alpha, beta = self.alpha, self.beta
        if sample and self.gumbel:
            alpha, beta = alpha + _gumbel_like(alpha), beta + _gumbel_like(beta)
        return (F.softmax(alpha / self.temperature, dim=-1),
                F.softmax(beta / self.temperature, dim=-1))

    def fused_logits(self, x: Tensor, sample: bool = False) -> Tensor:
        """``b0 C_s(h_s') + b1 C_p(h_p')`` with the mixed features of eq. 7 / 8 / 9."""
        a, b = self.coefficients(sample)
        shared_h, private_h = self.model.encoder(x), self.private["a"](x)
        mixed_s = a[0, 0] * shared_h + a[0, 1] * private_h
        mixed_p = a[-1, 0] * shared_h + a[-1, 1] * private_h
        return b[0] * self.model.head(mixed_s) + b[1] * self.private["b"](mixed_p)

    # ----------------------------------------------------------------- prediction
    def forward(self, x: Tensor) -> Tensor:
        """Personalized prediction: the fused logits (noise-free coefficients)."""
        return self.fused_logits(x, sample=False)

    def eval_outputs(self, x: Tensor) -> dict[str, Tensor]:
        """The fused prediction, plus each pure path (no mixing) for reference."""
        shared, private = self.path_outputs(x)
        return {"personalized": self(x), "shared_path": shared, "private_path": private}

    # ----------------------------------------------------------------- training
    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        """CE of the fused logits (coefficients sampled for AutoHS), optionally plus the
        pure shared path's CE; logs the softmaxed coefficients."""
        x, y = batch
        loss = F.cross_entropy(self.fused_logits(x, sample=self.training), y)
        if self.shared_path_loss:
            loss = loss + F.cross_entropy(self.global_forward(x), y)
        self.log("train_loss", loss)
        self._log_coefficients()
        return loss

    def _log_coefficients(self) -> None:
        with torch.no_grad():
            a, b = self.coefficients(sample=False)
        if self.cross_stitch:
            for i in range(2):
                for j in range(2):
                    self.log(f"coef/a{i}{j}", a[i, j])
        else:
            self.log("coef/a0", a[0, 0])
            self.log("coef/a1", a[0, 1])
        self.log("coef/b0", b[0])
        self.log("coef/b1", b[1])


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

    Paper: "Aggregate or Not?" (Li et al., arXiv:2107.11954), eq. 9-11: while training,
    ``(a0, a1) = SoftMax((alpha + g) / lambda)`` and ``(b0, b1) = SoftMax((beta + g') / lambda)``
    with fresh ``g, g' ~ Gumbel(0, 1)`` (``g = -log(-log(u))``, ``u ~ U(0, 1)``) at every step
    (the soft relaxation with temperature ``lambda``, not the straight-through hard code).
    Where the paper is silent: evaluation uses the noise-free ``SoftMax(alpha / lambda)``, so
    test accuracy is deterministic, and the logged coefficients are the noise-free ones.
    Arguments as :class:`AutoSA`.
    """

    gumbel = True


def _gumbel_like(tensor: Tensor) -> Tensor:
    """Gumbel(0, 1) noise of ``tensor``'s shape, from the (seeded) global torch RNG."""
    uniform = torch.rand_like(tensor).clamp_(1e-10, 1.0 - 1e-7)
    return -torch.log(-torch.log(uniform))


__all__ = ["AutoCS", "AutoHS", "AutoSA"]
