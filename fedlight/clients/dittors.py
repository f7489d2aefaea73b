"""DittoRS: MAP's restricted softmax composed with Ditto (Li, Zhan et al., "MAP: Model
Aggregation and Personalization in Federated Learning with Incomplete Classes", IEEE TKDE 2024,
Sec. V, Tables I/II; Ditto: Li, Hu, Beirami and Smith, ICML 2021).

Ditto's global model, the one the server averages, is trained with the restricted softmax
(missing classes' logits scaled by a); the private personal model keeps Ditto's regularized
plain-softmax objective::

    global phase:   w_k <- local SGD on CE(a * g_w(x), y)                   (uploaded)
    personal phase: v_k <- v_k - eta (grad CE(g_v(x), y) + lamda (v_k - w^t))
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from fedlight.clients.ditto import Ditto
from fedlight.clients.restricted_softmax import RestrictedSoftmax


class DittoRS(RestrictedSoftmax, Ditto):
    """Ditto whose global phase uses the restricted softmax (composition of the
    RestrictedSoftmax mixin and Ditto; nothing of either is copied).

    Args:
        rs_alpha: a in [0, 1], the logit scale of missing classes (MAP: 0.9).
        rs_mode: "hard" (MAP's Eq. 8) or "soft" (FedRS's rule).
        complete_classes: a_c = m_c / sum_j m_j (MAP Sec. 5.4).
        lamda: Ditto's pull of the personal model towards the received global model.
        personal_epochs: Ditto's personal-phase epochs.
        **kwargs: the base client's arguments (backbone, lr, ...).

    Choice where MAP is silent: only the global (aggregated) model is restricted, as in MAP's
    own schedule where the upload is trained with the restricted softmax and personalization
    uses the plain one.
    """

    def __init__(self, rs_alpha: float = 0.9, rs_mode: str = "hard",
                 complete_classes: bool = False, lamda: float = 1.0, personal_epochs: int = 1,
                 **kwargs: Any) -> None:
        super().__init__(rs_alpha=rs_alpha, rs_mode=rs_mode, complete_classes=complete_classes,
                         lamda=lamda, personal_epochs=personal_epochs, **kwargs)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        if self.phase != "global":
            return super().training_step(batch, batch_idx)
        x, y = batch
        loss = self.restricted_cross_entropy(self.model(x), y)
        self.log("train_loss", loss)
        return loss
