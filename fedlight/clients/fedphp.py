"""FedPHP: Li, Zhan et al., "FedPHP: Federated Personalization with Inherited Private Models",
ECML-PKDD 2021, as MAP's ablation "HPM only" (:mod:`fedlight.clients.map`)."""

from __future__ import annotations

from typing import Any

from fedlight.clients.map import MAP


class FedPHP(MAP):
    """FedPHP as MAP's ablation "HPM only" (Li, Zhan et al., "FedPHP: Federated Personalization
    with Inherited Private Models", ECML-PKDD 2021): MAP with ``rs_alpha=1`` (plain softmax).

    Phase 1 is plain CE (the upload), phase 2 ``(1 - lamda) CE + lamda L_kt`` against the HPM.
    Unlike the original FedPHP, which uploads the model after the distillation, the upload is
    the phase-1 model. The original (the authors' ``algorithms/fedphp.py``: every local step
    distills, the distilled model is the upload) is ``rs_epochs: 0, personalize_epochs: E,
    personalize_lr_scale: 1``. Every argument is :class:`MAP`'s.
    """

    def __init__(self, rs_alpha: float = 1.0, **kwargs: Any) -> None:
        super().__init__(rs_alpha=rs_alpha, **kwargs)
