"""FedMMD: Yao, Huang and Sun, "Two-Stream Federated Learning: Reduce the Communication Costs",
IEEE VCIP 2018 (arXiv:1809.06432).

Two streams on each client: the received global model, frozen, and the local model trained
from it. Local training adds the maximum mean discrepancy between the two streams' features,
so the local model does not drift far from the global representation; the server averages as
FedAvg does::

    loss = CE(head(encoder(x)), y) + lamda * MMD^2(encoder(x), encoder_global(x))
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedlight.clients.base import FederatedClient
from fedlight.clients.map import mmd_loss
from fedlight.clients.method_state import frozen_copy
from fedlight.core.errors import ConfigError


class FedMMD(FederatedClient):
    """FedMMD client: FedAvg plus lamda * MMD between local and frozen global features.

    Args:
        lamda: weight of the MMD term, >= 0 (0 is FedAvg). Default 0.1 (this implementation's
            choice; tune it per dataset).
        **kwargs: the base client's arguments (backbone, lr, ...).

    Choices where the paper is silent or differs:
        * the features are the encoder outputs (the backbone's feature before the head);
        * MMD^2 is the biased estimate under a sum of five Gaussian kernels with bandwidths
          scaled from the batch's mean pairwise squared distance (the same estimator as MAP's
          MMD transfer, fedlight.clients.map.mmd_loss), no gradient through the bandwidth;
        * the frozen global stream is a copy of the received encoder taken at round start, run
          in eval mode; it is not part of the client's state.
    """

    def __init__(self, lamda: float = 0.1, **kwargs: Any) -> None:
        if lamda < 0:
            raise ConfigError(f"lamda (weight of the MMD term) must be >= 0, got {lamda}")
        super().__init__(**kwargs)
        self.lamda = float(lamda)
        self._global: tuple[nn.Module, ...] = ()

    def on_round_start(self, round: int, message: dict[str, Any]) -> None:
        """Freeze a copy of the received encoder (the global stream)."""
        self._global = (frozen_copy(self.model.encoder),)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        features = self.model.encoder(x)
        loss = F.cross_entropy(self.model.head(features), y)
        if self.lamda > 0 and self._global:
            with torch.no_grad():
                global_features = self._global[0](x)
            mmd = mmd_loss(features, global_features)
            self.log("mmd", mmd)
            loss = loss + self.lamda * mmd
        self.log("train_loss", loss)
        return loss
