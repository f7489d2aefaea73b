"""Ditto: Li, Hu, Beirami and Smith, "Ditto: Fair and Robust Federated Learning Through
Personalization", ICML 2021 (arXiv:2012.04221).

Each client holds two models: the global model ``w``, trained as in FedAvg and averaged by the
server, and a personal model ``v_k`` that never leaves the client, trained on the regularized
local objective (Algorithm 1)::

    w_k <- local SGD on F_k(w) from the received w^t           (uploaded, averaged)
    v_k <- v_k - eta * (grad F_k(v_k) + lamda * (v_k - w^t))   (private)

i.e. ``v_k`` minimizes ``F_k(v) + lamda/2 ||v - w^t||^2`` against the global weights ``w^t``
received at the start of the round.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor

from fedlight.clients.base import FederatedClient
from fedlight.clients.method_state import parameter_mirror
from fedlight.core.client import Phase
from fedlight.core.errors import ConfigError

GLOBAL = "model.*"
PERSONAL = "personal.*"


class Ditto(FederatedClient):
    """Ditto client: shared global model ``self.model`` and private personal model
    ``self.personal`` (same backbone).

    Args:
        lamda: weight of the pull of the personal model towards the received global model,
            ``>= 0`` (``0``: the personal model is trained locally only). The paper selects it
            per device on local validation data (from ``{0.05, 0.1, 0.2}`` or ``{0.1, 1, 2}``)
            and uses a fixed ``1`` where a device has too few validation samples; the default
            here is ``1``.
        personal_epochs: local epochs of the personal phase (the paper's ``s`` local steps,
            counted in epochs), ``>= 1``. The global phase runs the trainer's ``local_epochs``.
        **kwargs: the base client's arguments (``backbone``, ``lr``, ...).

    Per round: phase ``global`` (only ``model.*`` trains, plain cross-entropy; the upload is
    taken after it), then phase ``personal`` (only ``personal.*`` trains, cross-entropy plus
    ``lamda/2 ||v - w^t||^2``). Prediction (``forward``, personalized accuracy) uses the personal
    model; ``global_forward`` (global accuracy) the global model.

    Choices where the paper is silent: the personal model starts as a copy of the initial global
    model (the same on every client); the regularizer covers parameters, not BatchNorm buffers.
    Run alone under a plain ``lightning.Trainer`` (phase ``train``) both models train on
    cross-entropy, without regularizer.
    """

    batchable = True  # the received weights w^t are (non-persistent) buffers
    sample_weighted = True  # its cross-entropies are means over the real samples

    def __init__(self, lamda: float = 1.0, personal_epochs: int = 1, **kwargs: Any) -> None:
        if lamda < 0:
            raise ConfigError(f"lamda (weight of the personal regularizer) must be >= 0, "
                             f"got {lamda}")
        if personal_epochs < 1:
            raise ConfigError(f"personal_epochs must be at least 1, got {personal_epochs}")
        super().__init__(**kwargs)
        self.lamda = lamda
        self.personal_epochs = personal_epochs
        self.personal = copy.deepcopy(self.model)
        # w^t, as received this round (never stored nor sent)
        self.received = parameter_mirror(self.model, persistent=False)
        self._has_received = False

    def private_patterns(self) -> list[str]:
        return [PERSONAL]

    @property
    def has_global_model(self) -> bool:
        return True

    @torch.no_grad()
    def on_round_start(self, round: int, message: dict[str, Any]) -> None:
        """Snapshot the received global weights ``w^t`` for the personal regularizer."""
        received = dict(self.received.named_buffers())
        for name, param in self.model.named_parameters():
            received[name].copy_(param)
        self._has_received = True

    def local_phases(self, local_epochs: int) -> list[Phase]:
        return [Phase("global", local_epochs, trainable=(GLOBAL,), upload_after=True),
                Phase("personal", self.personal_epochs, trainable=(PERSONAL,))]

    def forward(self, x: Tensor) -> Tensor:
        """The personal model's logits."""
        return self.personal(x)

    def global_forward(self, x: Tensor) -> Tensor:
        """The global model's logits."""
        return self.model(x)

    def regularizer(self) -> Tensor:
        """``lamda / 2 * ||v - w^t||^2`` (0 before any round has been received)."""
        if not self._has_received or self.lamda == 0:
            return torch.zeros((), device=self.device)
        received = dict(self.received.named_buffers())
        squared = sum((v - received[name]).pow(2).sum()
                      for name, v in self.personal.named_parameters())
        return 0.5 * self.lamda * squared

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        if self.phase == "global":
            loss = self.cross_entropy(self.model(x), y)
        elif self.phase == "personal":
            regularizer = self.regularizer()
            self.log("personal_regularizer", regularizer)
            loss = self.cross_entropy(self.personal(x), y) + regularizer
        else:
            loss = self.cross_entropy(self.model(x), y) + self.cross_entropy(self.personal(x), y)
        self.log("train_loss", loss)
        return loss
