"""FedAwS: Yu, Rawat, Menon and Kumar, "Federated Learning with Only Positive Labels", ICML 2020
(arXiv:2004.10342), Algorithm 1 (Federated Averaging with Spreadout).

Clients that see few classes pull their own class embeddings (the rows w_c of the classifier)
together with the features and never push the others away. FedAwS lets the server do the
pushing: after averaging, it takes gradient steps on the spreadout regularizer of the class
embeddings W::

    W <- mean of the clients' W
    W <- W - eta lamda grad R(W),   R(W) = sum_c sum_{c' != c} max(0, nu - ||w_c - w_c'||)^2
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from fedlight.clients.base import FederatedClient
from fedlight.core.errors import ConfigError
from fedlight.core.rules import ServerContext, State
from fedlight.server.mean import WeightedMean

HEAD_WEIGHT = "model.head.weight"


def spreadout(embeddings: torch.Tensor, margin: float) -> torch.Tensor:
    """R(W): squared hinge of (margin - Euclidean distance) over ordered pairs of rows."""
    distances = torch.cdist(embeddings, embeddings)
    off_diagonal = ~torch.eye(len(embeddings), dtype=torch.bool, device=embeddings.device)
    return torch.clamp(margin - distances[off_diagonal], min=0).pow(2).sum()


class FedAwS(FederatedClient):
    """FedAwS client: FedAvg's local training; the server spreads the class embeddings out.

    Args:
        spreadout_weight: lamda > 0, the weight of R(W).
        margin: nu > 0, the distance below which two class embeddings are pushed apart.
        spreadout_lr: eta > 0, the server's step size on R.
        spreadout_steps: gradient steps on R per round, >= 1.
        **kwargs: the base client's arguments (backbone, lr, ...).

    The class embeddings are the rows of the classifier's weight (model.head.weight). The
    server rule is SpreadoutMean (not replaceable from a config).

    Choices where the paper is silent or differs: the paper's clients hold one class each and
    train with a positive-only loss; here clients hold several classes (the label-skew and
    incomplete-class settings) and train with the ordinary softmax cross-entropy, the server's
    spreadout being the method's defining part. Distances are Euclidean on the raw rows (no
    normalization), R sums over ordered pairs, and the defaults (lamda 1, nu 1, eta 0.1, one
    step) are this implementation's choices.
    """

    def __init__(self, spreadout_weight: float = 1.0, margin: float = 1.0,
                 spreadout_lr: float = 0.1, spreadout_steps: int = 1, **kwargs: Any) -> None:
        check_spreadout(spreadout_weight, margin, spreadout_lr, spreadout_steps)
        super().__init__(**kwargs)
        self.spreadout_weight = float(spreadout_weight)
        self.margin = float(margin)
        self.spreadout_lr = float(spreadout_lr)
        self.spreadout_steps = spreadout_steps

    def configure_server(self) -> SpreadoutMean:
        return SpreadoutMean(HEAD_WEIGHT, self.spreadout_weight, self.margin,
                             self.spreadout_lr, self.spreadout_steps)


def check_spreadout(weight: float, margin: float, lr: float, steps: int) -> None:
    """Raise ValueError naming a bad spreadout setting."""
    for name, value in (("spreadout_weight", weight), ("margin", margin),
                        ("spreadout_lr", lr)):
        if not value > 0:
            raise ConfigError(f"{name} must be positive, got {value}")
    if steps < 1:
        raise ConfigError(f"spreadout_steps must be at least 1, got {steps}")


class SpreadoutMean(WeightedMean):
    """FedAwS's server rule: the weighted mean, then steps gradient steps of
    eta lamda grad R on the class-embedding matrix key (float64 arithmetic).

    Args:
        key: the state key of the class embeddings (rows = classes).
        weight, margin, lr, steps: lamda, nu, eta and the number of steps.
    """

    replaceable = False

    def __init__(self, key: str = HEAD_WEIGHT, weight: float = 1.0, margin: float = 1.0,
                 lr: float = 0.1, steps: int = 1) -> None:
        check_spreadout(weight, margin, lr, steps)
        super().__init__()
        self.key, self.weight, self.margin, self.lr, self.steps = key, weight, margin, lr, steps

    def setup(self, initial_state: Mapping[str, torch.Tensor], context: ServerContext) -> None:
        if self.key not in initial_state:
            raise ConfigError(f"SpreadoutMean: class embeddings {self.key!r} are not in the "
                             f"shared state; shared keys: {', '.join(list(initial_state)[:8])}")
        super().setup(initial_state, context)

    def apply(self, mean: State) -> State:
        embeddings = mean[self.key].detach().double()
        for _ in range(self.steps):
            embeddings.requires_grad_(True)
            with torch.enable_grad():
                grad, = torch.autograd.grad(spreadout(embeddings, self.margin), embeddings)
            embeddings = (embeddings - self.lr * self.weight * grad).detach()
        return {**mean, self.key: embeddings.to(mean[self.key].dtype)}
