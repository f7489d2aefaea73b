"""ScaRS: MAP's restricted softmax composed with SCAFFOLD (Li, Zhan et al., "MAP: Model
Aggregation and Personalization in Federated Learning with Incomplete Classes", IEEE TKDE 2024,
Sec. V, Tables I/II; SCAFFOLD: Karimireddy et al., ICML 2020).

SCAFFOLD's local objective f_i becomes the cross-entropy of the restricted logits a * g(x)
(missing classes scaled by a); the drift correction, the control variates and the server rule
are SCAFFOLD's::

    y <- y - eta_l (grad CE(a * g_y(x), y) - c_i + c)
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from fedlight.clients.restricted_softmax import RestrictedSoftmax
from fedlight.clients.scaffold import SCAFFOLD


class ScaRS(RestrictedSoftmax, SCAFFOLD):
    """SCAFFOLD whose local loss is the restricted softmax (composition of the
    RestrictedSoftmax mixin and SCAFFOLD; nothing of either is copied).

    Args:
        rs_alpha: a in [0, 1], the logit scale of missing classes (MAP: 0.9).
        rs_mode: "hard" (MAP's Eq. 8) or "soft" (FedRS's rule).
        complete_classes: a_c = m_c / sum_j m_j (MAP Sec. 5.4).
        option: SCAFFOLD's control-variate option ("I" or "II"); option I's gradient is the
            restricted loss's, since that is f_i here.
        global_lr: SCAFFOLD's eta_g.
        **kwargs: the base client's arguments (backbone, lr, ...).
    """

    def __init__(self, rs_alpha: float = 0.9, rs_mode: str = "hard",
                 complete_classes: bool = False, option: str = "II", global_lr: float = 1.0,
                 **kwargs: Any) -> None:
        super().__init__(rs_alpha=rs_alpha, rs_mode=rs_mode, complete_classes=complete_classes,
                         option=option, global_lr=global_lr, **kwargs)

    def task_loss(self, logits: Tensor, y: Tensor) -> Tensor:
        """f_i: cross-entropy of the restricted logits."""
        return self.restricted_cross_entropy(logits, y)
