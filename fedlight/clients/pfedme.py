"""pFedMe: Dinh, Tran and Nguyen, "Personalized Federated Learning with Moreau Envelopes",
NeurIPS 2020 (arXiv:2006.08848), Algorithm 1.

Each client keeps a personalized model theta and a local copy w of the global model. On every
local step with batch D it solves the Moreau-envelope inner problem approximately with K
gradient steps, then moves w towards the solution; the server mixes with beta::

    theta <- theta - eta_p grad_theta [ f_i(theta; D) + lamda/2 ||theta - w||^2 ]   (K times)
    w     <- w - eta lamda (w - theta)
    server: w^{t+1} = (1 - beta) w^t + beta mean_i w_i

Personalized accuracy is theta's, global accuracy w's.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.func import functional_call

from fedlight.clients.base import FederatedClient
from fedlight.core.errors import ConfigError
from fedlight.server.fedopt import FedAvgM


class PFedMe(FederatedClient):
    """pFedMe client: shared w (model) and private personalized theta (personal).

    Args:
        lamda: lamda >= 0, the weight of the Moreau envelope's pull (paper: 15 on MNIST).
            0 decouples theta from w: theta is then trained on its own data only (as Local)
            and w never moves.
        inner_steps: K >= 1, gradient steps on the inner problem per local step (paper: 5).
        personal_lr: eta_p > 0, the inner step size (the paper tunes it per dataset; default
            0.01). The outer step size eta is the client's lr.
        beta: the server's mixing weight, > 0 (paper: 1 or 2; 1 is FedAvg's mean).
        **kwargs: the base client's arguments (backbone, lr, ...).

    Local phase "train": training_step runs the K inner steps on theta itself (plain gradient
    descent; theta has requires_grad False, so the optimizer never sees it) and returns the
    Moreau envelope at the approximate solution, f_i(theta; D) + lamda/2 ||w - theta||^2 with
    theta fixed: its gradient with respect to w is lamda (w - theta), so the optimizer's step is
    exactly the paper's w update (with plain SGD). f_i(theta; D) is logged as personal_loss.
    The server rule is FedAvgM(lr=beta, momentum=0), i.e. w + beta (mean - w); a config's
    server: may replace it.

    Choices where the paper is silent: theta starts as a copy of the initial model (the same on
    every client) and is warm-started from its last value at every local step and across
    rounds (the authors' code warm-starts it within a round); the K inner steps use the same
    batch D; BatchNorm statistics of theta are its own.
    """

    def __init__(self, lamda: float = 15.0, inner_steps: int = 5, personal_lr: float = 0.01,
                 beta: float = 1.0, **kwargs: Any) -> None:
        if lamda < 0:
            raise ConfigError(f"lamda (Moreau-envelope weight) must be >= 0, got {lamda}")
        if inner_steps < 1:
            raise ConfigError(f"inner_steps (K) must be at least 1, got {inner_steps}")
        if not personal_lr > 0:
            raise ConfigError(f"personal_lr must be positive, got {personal_lr}")
        if not beta > 0:
            raise ConfigError(f"beta (server mixing weight) must be positive, got {beta}")
        super().__init__(**kwargs)
        self.lamda = float(lamda)
        self.inner_steps = inner_steps
        self.personal_lr = float(personal_lr)
        self.beta = float(beta)
        self.personal = copy.deepcopy(self.model).requires_grad_(False)

    def private_patterns(self) -> list[str]:
        return ["personal.*"]

    @property
    def has_global_model(self) -> bool:
        return True

    def forward(self, x: Tensor) -> Tensor:
        """The personalized model theta's logits."""
        return self.personal(x)

    def global_forward(self, x: Tensor) -> Tensor:
        return self.model(x)

    def configure_server(self) -> FedAvgM:
        """w^{t+1} = w^t + beta (mean - w^t)."""
        return FedAvgM(lr=self.beta, momentum=0.0)

    def solve_inner(self, x: Tensor, y: Tensor) -> None:
        """K gradient steps on f(theta; x, y) + lamda/2 ||theta - w||^2, in place on theta."""
        anchor = {n: p.detach() for n, p in self.model.named_parameters()}
        theta = dict(self.personal.named_parameters())
        for _ in range(self.inner_steps):
            current = {n: p.detach().requires_grad_() for n, p in theta.items()}
            with torch.enable_grad():
                loss = F.cross_entropy(functional_call(self.personal, current, (x,)), y)
                grads = torch.autograd.grad(loss, list(current.values()))
            with torch.no_grad():
                for (name, param), grad in zip(theta.items(), grads, strict=True):
                    param.sub_(grad + self.lamda * (param - anchor[name]),
                               alpha=self.personal_lr)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        self.solve_inner(x, y)
        with torch.no_grad():
            personal_loss = F.cross_entropy(self.personal(x), y)
        pull = sum(((w - theta.detach()).pow(2).sum() for w, theta in
                    zip(self.model.parameters(), self.personal.parameters(), strict=True)),
                   torch.zeros((), device=self.device))
        loss = personal_loss + 0.5 * self.lamda * pull
        self.log("personal_loss", personal_loss)
        self.log("train_loss", loss)
        return loss
