"""FedProx: Li, Sahu, Zaheer, Sanjabi, Talwalkar and Smith, "Federated Optimization in
Heterogeneous Networks", MLSys 2020 (arXiv:1812.06127).

Client k minimizes the proximal local objective around the global model ``w^t`` it received::

    h_k(w; w^t) = F_k(w) + mu / 2 * ||w - w^t||^2

with local SGD; the server averages the results as FedAvg does (sample-weighted mean).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from fedlight.clients.base import FederatedClient
from fedlight.core.errors import ConfigError


class FedProx(FederatedClient):
    """FedProx client: FedAvg plus the proximal term ``mu/2 ||w - w^t||^2`` in the local loss.

    Args:
        mu: weight of the proximal term, ``>= 0`` (``0`` is FedAvg). The paper has no single
            default: it picks ``mu`` per dataset from ``{0.001, 0.01, 0.1, 1}``, ``1`` being
            best on MNIST, FEMNIST and Synthetic, ``0.01`` on Sent140 and ``0.001`` on
            Shakespeare; the default here is its MNIST value, ``1``.
        **kwargs: the base client's arguments (``backbone``, ``lr``, ``extra_private``, ...).

    Choices where the paper is silent:
        * the anchor ``w^t`` is a detached copy of the *shared* parameters taken in
          :meth:`on_round_start`, i.e. the weights just received; private parameters (when
          ``extra_private`` is set) and buffers (BatchNorm statistics) are not pulled;
        * the paper's variable amount of local work per device (``gamma``-inexact solutions,
          dropped stragglers) is not simulated: every client runs the trainer's
          ``local_epochs``.

    Run alone under a plain ``lightning.Trainer`` there is no anchor and the loss is plain
    cross-entropy. The term is logged as ``proximal`` (``train/proximal`` per round).
    """

    def __init__(self, mu: float = 1.0, **kwargs: Any) -> None:
        if mu < 0:
            raise ConfigError(f"mu (weight of the proximal term) must be >= 0, got {mu}")
        super().__init__(**kwargs)
        self.mu = mu
        self._anchor: list[tuple[Tensor, Tensor]] = []

    def on_round_start(self, round: int, message: dict[str, Any]) -> None:
        """Snapshot the received global weights as the proximal anchor ``w^t``."""
        shared = set(self.partition.shared)
        self._anchor = [(param, param.detach().clone()) for name, param in
                        self.named_parameters() if name in shared]

    def proximal_term(self) -> Tensor:
        """``mu / 2 * ||w - w^t||^2`` over the shared parameters (0 before any round)."""
        if not self._anchor or self.mu == 0:
            return torch.zeros((), device=self.device)
        squared = sum((param - anchor).pow(2).sum() for param, anchor in self._anchor)
        return 0.5 * self.mu * squared

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        proximal = self.proximal_term()
        loss = F.cross_entropy(self(x), y) + proximal
        self.log("proximal", proximal)
        self.log("train_loss", loss)
        return loss
