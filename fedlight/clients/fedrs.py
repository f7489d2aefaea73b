"""FedRS: Li & Zhan, "FedRS: Federated Learning with Restricted Softmax for Label Distribution
Non-IID Data", KDD 2021, as MAP's ablation "RS only" (:mod:`fedlight.clients.map`)."""

from __future__ import annotations

from typing import Any

from fedlight.clients.map import MAP


class FedRS(MAP):
    """FedRS as MAP's ablation "RS only" (Li & Zhan, "FedRS: Federated Learning with Restricted
    Softmax for Label Distribution Non-IID Data", KDD 2021): MAP with ``kt="none"``, no HPM.

    Phase 1 trains with the restricted softmax (the upload), phase 2 fine-tunes with the plain
    softmax (the personalized model). The original FedRS (all ``E`` epochs restricted, the
    local model is the personalized one) is ``rs_epochs: E, personalize_epochs: 0``; its soft
    rule is ``rs_mode: soft``. Every argument is :class:`MAP`'s.
    """

    def __init__(self, kt: str = "none", **kwargs: Any) -> None:
        super().__init__(kt=kt, **kwargs)
