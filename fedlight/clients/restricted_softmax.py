"""The restricted softmax as a reusable piece: a mixin any client can put before its class.

Li and Zhan, "FedRS: Federated Learning with Restricted Softmax for Label Distribution Non-IID
Data", KDD 2021, and MAP (Li, Zhan et al., IEEE TKDE 2024, Eq. 8): the logit of every class a
client never observed is scaled by a in [0, 1] before the softmax, which slows down how fast
the classifier rows of missing classes are pushed away during local training. MAP, FedRS and
MAP's compositions (DittoRS, ScaRS) use it through RestrictedSoftmax.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from fedlight.core.errors import ConfigError

RS_MODES = ("hard", "soft", "all")
_NOT_BUILT = object()


def restricted_softmax_scales(
    class_counts: Tensor, alpha: float, mode: str = "hard", complete_classes: bool = False
) -> Tensor:
    """The per-class logit scales a_c of the restricted softmax, shape (U,).

    Args:
        class_counts: label counts m_c of the client's training split, (U,).
        alpha: the scale a of the missing classes (m_c = 0), in [0, 1].
        mode: "hard" (MAP, Eq. 8): a_c = 1 for observed classes, alpha for missing ones;
            "soft" (FedRS's original rule): a_c = alpha + (1 - alpha) p_c / max p with p the
            class shares (missing classes get alpha, the largest class 1); "all" (MAP's
            released code): a_c = alpha for every class, a global temperature 1 / alpha.
        complete_classes: MAP Sec. 5.4, a_c = m_c / sum_j m_j (the class share); replaces
            mode and alpha.
    """
    counts = class_counts.float()
    shares = counts / counts.sum().clamp_min(1.0)
    if complete_classes:
        return shares
    if mode not in RS_MODES:
        raise ConfigError(f"unknown mode {mode!r}; valid: {', '.join(RS_MODES)}")
    if mode == "soft":
        return alpha + (1.0 - alpha) * shares / shares.max().clamp_min(1e-12)
    if mode == "all":
        return torch.full_like(counts, alpha)
    return torch.where(counts > 0, torch.ones_like(counts), torch.full_like(counts, alpha))


class RestrictedSoftmax:
    """Mixin giving a FederatedClient the restricted softmax of its own label counts.

    Put it first: class DittoRS(RestrictedSoftmax, Ditto). It takes its three arguments and
    passes the rest on; the client then calls restricted_cross_entropy (or rs_scales) where
    its method restricts the softmax.

    Args:
        rs_alpha: a in [0, 1], the logit scale of missing classes (MAP: 0.9; 1 is the plain
            softmax).
        rs_mode: "hard" (MAP's Eq. 8), "soft" (FedRS's a + (1 - a) p_c / max p) or "all"
            (MAP's released code: every logit scaled by a).
        complete_classes: a_c = m_c / sum_j m_j (MAP Sec. 5.4); overrides rs_alpha, rs_mode.

    A class is observed when it occurs at least once in the client's training split (its
    context's class_counts). The scale multiplies the whole logit, bias included. Run alone
    under a plain lightning.Trainer, the data module's class_counts are used when it has them
    (else every class counts as observed).
    """

    def __init__(self, rs_alpha: float = 0.9, rs_mode: str = "hard",
                 complete_classes: bool = False, **kwargs: Any) -> None:
        if not 0.0 <= rs_alpha <= 1.0:
            raise ConfigError(f"rs_alpha must be in [0, 1], got {rs_alpha}")
        if rs_mode not in RS_MODES:
            raise ConfigError(f"unknown rs_mode {rs_mode!r}; valid: {', '.join(RS_MODES)}")
        super().__init__(**kwargs)
        self.rs_alpha = float(rs_alpha)
        self.rs_mode = rs_mode
        self.complete_classes = bool(complete_classes)
        # a_c of the loaded client, a buffer so that batched clients each read their own
        self.register_buffer("rs_scale", torch.ones(self.num_classes),  # type: ignore[attr-defined]
                             persistent=False)
        self._scales_context: Any = _NOT_BUILT  # the context rs_scale was built for
        self._plain_class_counts: Tensor | None = None

    def on_fit_start(self) -> None:
        """Plain-Lightning use: take the datamodule's class_counts when it has them."""
        if self.context is None:
            datamodule = getattr(self.trainer, "datamodule", None)
            counts = getattr(datamodule, "class_counts", None)
            self._plain_class_counts = counts if isinstance(counts, Tensor) else None
            self._scales_context = _NOT_BUILT

    def rs_scales(self) -> Tensor:
        """a_c for this client, (U,): the buffer ``rs_scale``, rebuilt when the client's
        context changed since (a method that trains batched rebuilds it at round start)."""
        if self._scales_context is not self.context:
            self.refresh_rs_scales()
        return self.rs_scale  # type: ignore[attr-defined,no-any-return]

    @torch.no_grad()
    def refresh_rs_scales(self) -> None:
        """Build ``rs_scale`` from the loaded client's label counts."""
        if self.context is None and self._plain_class_counts is not None:
            counts = self._plain_class_counts
        else:
            counts = self.train_class_counts()  # type: ignore[attr-defined]
        self.rs_scale.copy_(restricted_softmax_scales(  # type: ignore[attr-defined]
            counts, self.rs_alpha, self.rs_mode, self.complete_classes))
        self._scales_context = self.context

    def restricted_cross_entropy(self, logits: Tensor, y: Tensor) -> Tensor:
        """Cross-entropy of the restricted logits a_c * g_c."""
        return F.cross_entropy(logits * self.rs_scales(), y)


__all__ = ["RS_MODES", "RestrictedSoftmax", "restricted_softmax_scales"]
