"""FLDA: Peterson, Kanani and Marathe, "Private Federated Learning with Domain Adaptation",
NeurIPS 2019 Workshop on Federated Learning (arXiv:1912.06733).

Federated learning with domain adaptation as a mixture of experts: each client combines the
general (federated) model with its own private model through a learned gate alpha in [0, 1]::

    p(y | x) = alpha p_private(y | x) + (1 - alpha) p_general(y | x)

The general model is trained with FedAvg (local cross-entropy, averaged by the server); the
private model and the gate never leave the client and are trained on the mixture's likelihood.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedlight.clients.base import FederatedClient
from fedlight.core.errors import ConfigError

GATES = ("client", "input")


class FLDA(FederatedClient):
    """FLDA client: general expert model (shared), private expert personal and gate (private).

    Args:
        gate: "client" (default): one learned mixing weight per client,
            alpha = sigmoid(gate.logit); "input": a gating function of the input,
            alpha(x) = sigmoid(linear(personal encoder feature of x)).
        initial_alpha: alpha at the start, in (0, 1) (default 0.5; for the input gate the bias
            is set to it and the weights start at zero).
        **kwargs: the base client's arguments (backbone, lr, ...).

    Step loss: CE(general(x), y) + NLL(log(alpha p_private + (1 - alpha) p_general), y) with the
    general expert detached inside the mixture, so the general model trains exactly as FedAvg's
    and the mixture trains the private expert and the gate. forward (personalized accuracy)
    returns the mixture's log-probabilities; global_forward the general model.

    Choices where the paper is silent here: the private expert starts as a copy of the initial
    model (the same backbone, the same on every client); the gate and the private expert use
    the client's optimizer settings.
    """

    def __init__(self, gate: str = "client", initial_alpha: float = 0.5, **kwargs: Any) -> None:
        if gate not in GATES:
            raise ConfigError(f"unknown gate {gate!r}; valid: {', '.join(GATES)}")
        if not 0 < initial_alpha < 1:
            raise ConfigError(f"initial_alpha must be in (0, 1), got {initial_alpha}")
        super().__init__(**kwargs)
        self.gate_kind = gate
        self.personal = copy.deepcopy(self.model)
        logit = torch.logit(torch.tensor(float(initial_alpha)))
        self.gate = nn.Linear(self.feature_dim if gate == "input" else 1, 1)
        with torch.no_grad():
            self.gate.weight.zero_()
            self.gate.bias.fill_(float(logit))

    def private_patterns(self) -> list[str]:
        return ["personal.*", "gate.*"]

    @property
    def has_global_model(self) -> bool:
        return True

    def alpha(self, private_features: Tensor) -> Tensor:
        """The gate's mixing weight, (B, 1)."""
        if self.gate_kind == "input":
            return torch.sigmoid(self.gate(private_features))
        ones = private_features.new_ones(len(private_features), 1)
        return torch.sigmoid(self.gate(ones))

    def mixture_log_probs(self, x: Tensor, general_logits: Tensor) -> Tensor:
        """log(alpha p_private + (1 - alpha) p_general)."""
        features = self.personal.encoder(x)
        alpha = self.alpha(features)
        private = F.log_softmax(self.personal.head(features), dim=-1)
        general = F.log_softmax(general_logits, dim=-1)
        return torch.logsumexp(torch.stack([private + torch.log(alpha),
                                            general + torch.log1p(-alpha)]), dim=0)

    def forward(self, x: Tensor) -> Tensor:
        """The mixture's log-probabilities (valid logits)."""
        return self.mixture_log_probs(x, self.model(x))

    def global_forward(self, x: Tensor) -> Tensor:
        return self.model(x)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        general_logits = self.model(x)
        general_loss = F.cross_entropy(general_logits, y)
        mixture_loss = F.nll_loss(self.mixture_log_probs(x, general_logits.detach()), y)
        self.log("mixture_loss", mixture_loss)
        loss = general_loss + mixture_loss
        self.log("train_loss", loss)
        return loss
