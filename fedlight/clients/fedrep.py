"""FedRep: Collins, Hassani, Mokhtari and Shakkottai, "Exploiting Shared Representations for
Personalized Federated Learning", ICML 2021 (arXiv:2102.07078).

A shared representation ``phi`` (the encoder) and a private head ``h_k`` per client. Each round
client k first fits its head with the representation fixed, then updates the representation
with its new head fixed::

    h_k <- tau head epochs of SGD on CE(h_k(phi(x)), y)        (phi frozen)
    phi_k <- local_epochs of SGD on CE(h_k(phi_k(x)), y)       (h_k frozen)
    server: phi = sample-weighted mean of the phi_k
"""

from __future__ import annotations

from typing import Any

from fedlight.clients.base import FederatedClient
from fedlight.core.client import Phase
from fedlight.core.errors import ConfigError

HEAD = "model.head.*"
ENCODER = "model.encoder.*"


class FedRep(FederatedClient):
    """FedRep client: encoder shared, head private, trained head-first then encoder.

    Args:
        head_epochs: local epochs of the head phase (encoder frozen), ``>= 0``. The paper uses
            10 head epochs for every dataset (and 1 representation epoch); the representation
            phase runs the trainer's ``local_epochs``.
        **kwargs: the base client's arguments (``backbone``, ``lr``, ...).

    Each phase gets a fresh optimizer over its trainable parameters only (the paper's SGD);
    ``training_step`` is plain cross-entropy in both. BatchNorm statistics, where the backbone
    has them, update in both phases (the model stays in train mode). The personalized prediction
    is the client's head on the shared encoder; there is no global model.
    """

    def __init__(self, head_epochs: int = 10, **kwargs: Any) -> None:
        if head_epochs < 0:
            raise ConfigError(f"head_epochs must be >= 0, got {head_epochs}")
        super().__init__(**kwargs)
        self.head_epochs = head_epochs

    def private_patterns(self) -> list[str]:
        return [HEAD]

    def local_phases(self, local_epochs: int) -> list[Phase]:
        """``head_epochs`` of head-only training, then ``local_epochs`` of encoder-only."""
        phases = [Phase("body", local_epochs, trainable=(ENCODER,))]
        if self.head_epochs:
            phases.insert(0, Phase("head", self.head_epochs, trainable=(HEAD,)))
        return phases
