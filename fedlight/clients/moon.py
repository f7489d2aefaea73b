"""MOON: Li, He and Song, "Model-Contrastive Federated Learning", CVPR 2021 (arXiv:2103.16257).

Local training adds a model-contrastive loss that pulls the representation z of the model being
trained towards z_glob of the received global model and away from z_prev of the client's own
model of its previous round (Eq. 3)::

    l_con = -log( e(z_glob) / (e(z_glob) + e(z_prev)) ),   e(v) = exp(sim(z, v) / tau)
    loss  = CE(head(encoder(x)), y) + mu * l_con

with sim the cosine similarity and z the output of a projection head on the encoder's feature.
The server averages as FedAvg does.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedlight.clients.base import FederatedClient
from fedlight.clients.method_state import frozen_copy
from fedlight.core.errors import ConfigError


class MOON(FederatedClient):
    """MOON client: FedAvg plus the model-contrastive loss.

    Args:
        mu: weight of the contrastive loss, >= 0 (0 is FedAvg). The paper uses 5 on CIFAR-10
            and 1 on CIFAR-100 / Tiny-ImageNet (no MNIST experiment); default 1.
        temperature: tau, > 0 (paper: 0.5). As tau grows the two similarities weigh the same
            and the loss stops pulling (tau -> infinity is FedAvg).
        projection_dim: output size of the projection head (paper: 256).
        **kwargs: the base client's arguments (backbone, lr, ...).

    Modules: model (encoder + head, shared), projector (a 2-layer MLP feature -> feature ->
    projection_dim with a ReLU, shared) and previous, a frozen copy of encoder + projector as
    they were at the end of the client's last round (private, checkpointed). The global encoder
    + projector is a frozen copy taken at round start (not part of the state).

    Choices where the paper is silent or differs from the authors' code:
        * the classifier is the backbone's head on the encoder feature, not on the projection
          (the paper's network puts the output layer after the projection head); the
          projection only feeds the contrastive loss, so with mu = 0 the model trains exactly
          as FedAvg's (the projector then never changes);
        * before a client's first round its previous model is the initial model, the same for
          every client (as the authors' code), so the first contrastive loss is log 2 with no
          gradient;
        * the frozen global and previous models run in eval mode (BatchNorm running
          statistics); their outputs carry no gradient.
    """

    def __init__(self, mu: float = 1.0, temperature: float = 0.5, projection_dim: int = 256,
                 **kwargs: Any) -> None:
        if mu < 0:
            raise ConfigError(f"mu (weight of the contrastive loss) must be >= 0, got {mu}")
        if not temperature > 0:
            raise ConfigError(f"temperature must be positive, got {temperature}")
        if projection_dim < 1:
            raise ConfigError(f"projection_dim must be at least 1, got {projection_dim}")
        super().__init__(**kwargs)
        self.mu = float(mu)
        self.temperature = float(temperature)
        dim = self.feature_dim
        self.projector = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(),
                                       nn.Linear(dim, projection_dim))
        self.previous = frozen_copy(self.representation())
        self._global: tuple[nn.Module, ...] = ()

    def representation(self) -> nn.ModuleDict:
        """The live encoder and projector (what z is computed with)."""
        return nn.ModuleDict({"encoder": self.model.encoder, "projector": self.projector})

    def private_patterns(self) -> list[str]:
        return ["previous.*"]

    @property
    def has_global_model(self) -> bool:
        """True unless extra_private keeps part of model private: the method's own private
        state never enters prediction, so the shared model is a global model."""
        return not any(k.startswith("model.") for k in self.partition.private)

    def train(self, mode: bool = True) -> MOON:
        super().train(mode)
        self.previous.eval()
        return self

    def on_round_start(self, round: int, message: dict[str, Any]) -> None:
        """Freeze a copy of the received global encoder + projector."""
        self._global = (frozen_copy(self.representation()),)

    def on_round_end(self) -> None:
        """The model just trained becomes the client's previous model."""
        self.previous.load_state_dict(self.representation().state_dict())

    @staticmethod
    def project(module: nn.Module, x: Tensor) -> Tensor:
        """z of module (a ModuleDict with encoder and projector)."""
        return module["projector"](module["encoder"](x))

    def contrastive_loss(self, z: Tensor, z_global: Tensor, z_previous: Tensor) -> Tensor:
        """l_con of Eq. 3, averaged over the batch."""
        positive = F.cosine_similarity(z, z_global, dim=-1)
        negative = F.cosine_similarity(z, z_previous, dim=-1)
        logits = torch.stack([positive, negative], dim=1) / self.temperature
        return F.cross_entropy(logits, torch.zeros(len(z), dtype=torch.long, device=z.device))

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        features = self.model.encoder(x)
        loss = F.cross_entropy(self.model.head(features), y)
        if self.mu > 0 and self._global:
            with torch.no_grad():
                z_global = self.project(self._global[0], x)
                z_previous = self.project(self.previous, x)
            contrastive = self.contrastive_loss(self.projector(features), z_global, z_previous)
            self.log("contrastive_loss", contrastive)
            loss = loss + self.mu * contrastive
        self.log("train_loss", loss)
        return loss
