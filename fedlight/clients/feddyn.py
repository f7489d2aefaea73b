"""FedDyn: Acar, Zhao, Matas, Mattina, Whatmough and Saligrama, "Federated Learning Based on
Dynamic Regularization", ICLR 2021 (arXiv:2111.04263), Algorithm 1.

Client k keeps the gradient state g_k (start 0: the gradient of its loss at its last local
model); with theta^{t-1} the received global model, alpha the regularization weight and N the
number of clients::

    client:  theta_k = argmin L_k(theta) - <g_k, theta> + alpha/2 ||theta - theta^{t-1}||^2
             g_k <- g_k - alpha (theta_k - theta^{t-1})
    server:  h <- h - alpha (1/N) sum_{k in P} (theta_k - theta^{t-1})     (h starts at 0)
             theta^t = mean_{k in P} theta_k - h / alpha
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from fedlight.clients.base import FederatedClient
from fedlight.clients.method_state import parameter_mirror, received_parameters
from fedlight.core.errors import ConfigError
from fedlight.core.rules import State
from fedlight.server.mean import WeightedMean


class FedDyn(FederatedClient):
    """FedDyn client: local loss with the linear and quadratic dynamic-regularization terms.

    Args:
        alpha: regularization weight, > 0. The paper searches {0.1, 0.01, 0.001} and reports
            0.01 as its usual best; default 0.01. The server rule uses the same alpha.
        **kwargs: the base client's arguments (backbone, lr, ...).

    State: g_k is the private buffer set grad_state.<parameter name> (zeros at the start, kept
    per client and checkpointed). The loss of a step is
    CE - <g_k, theta> + alpha/2 ||theta - theta^{t-1}||^2 over the shared parameters
    (logged as dyn_linear = <g_k, theta> and dyn_quadratic); g_k is updated in on_round_end.
    The server rule is FedDynServer (not replaceable from a config).

    Choices where the paper is silent:
        * both terms and h cover the shared parameters only; buffers (BatchNorm statistics)
          take the plain mean;
        * the server mean is the trainer's weighting (the paper's uniform mean is
          trainer.weighting: uniform) and h's sum is |P| times that mean; under uniform
          weighting this is the paper's update exactly;
        * the authors' code adds the quadratic term through weight decay and clips gradients;
          here both terms are in the loss and nothing is clipped unless the trainer asks.

    Run alone under a plain lightning.Trainer there is no anchor: the quadratic term is 0 and
    the linear term uses g_k = 0.
    """

    def __init__(self, alpha: float = 0.01, **kwargs: Any) -> None:
        if not alpha > 0:
            raise ConfigError(f"alpha (dynamic regularization weight) must be positive, "
                             f"got {alpha}")
        super().__init__(**kwargs)
        self.alpha = float(alpha)
        self.grad_state = parameter_mirror(self)
        self._received: dict[str, tuple[torch.nn.Parameter, Tensor]] = {}

    def private_patterns(self) -> list[str]:
        return ["grad_state.*"]

    @property
    def has_global_model(self) -> bool:
        """True unless extra_private keeps part of model private: the method's own private
        state never enters prediction, so the shared model is a global model."""
        return not any(k.startswith("model.") for k in self.partition.private)

    def on_round_start(self, round: int, message: dict[str, Any]) -> None:
        """Keep theta^{t-1}, the received shared parameters."""
        self._received = received_parameters(self)

    def linear_term(self) -> Tensor:
        """<g_k, theta> over the shared parameters (0 before any round)."""
        total = torch.zeros((), device=self.device)
        for name, (param, _) in self._received.items():
            total = total + (self.grad_state.get_buffer(name) * param).sum()
        return total

    def quadratic_term(self) -> Tensor:
        """alpha/2 ||theta - theta^{t-1}||^2 over the shared parameters (0 before any round)."""
        squared = sum(((param - anchor).pow(2).sum() for param, anchor in
                       self._received.values()), torch.zeros((), device=self.device))
        return 0.5 * self.alpha * squared

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        linear, quadratic = self.linear_term(), self.quadratic_term()
        loss = F.cross_entropy(self(x), y) - linear + quadratic
        self.log("dyn_linear", linear)
        self.log("dyn_quadratic", quadratic)
        self.log("train_loss", loss)
        return loss

    def on_round_end(self) -> None:
        """g_k <- g_k - alpha (theta_k - theta^{t-1})."""
        with torch.no_grad():
            for name, (param, anchor) in self._received.items():
                self.grad_state.get_buffer(name).sub_(param - anchor, alpha=self.alpha)

    def configure_server(self) -> FedDynServer:
        """FedDyn's server with the same alpha, h over the shared parameters."""
        shared = set(self.partition.shared)
        return FedDynServer(self.alpha, [n for n, _ in self.named_parameters() if n in shared])


class FedDynServer(WeightedMean):
    """FedDyn's server rule: h <- h - alpha (|P|/N) (mean - theta^{t-1});
    theta^t = mean - h / alpha, on the keys in parameters (every floating tensor when None);
    the other keys take the mean. h (float64, per key) is the rule's extra state.

    Args:
        alpha: the clients' regularization weight, > 0.
        parameters: state keys that h covers (the client passes its shared parameters).
    """

    replaceable = False

    def __init__(self, alpha: float = 0.01, parameters: Sequence[str] | None = None) -> None:
        if not alpha > 0:
            raise ConfigError(f"alpha (dynamic regularization weight) must be positive, "
                             f"got {alpha}")
        super().__init__()
        self.alpha = float(alpha)
        self.keys = None if parameters is None else set(parameters)
        self.h: dict[str, Tensor] = {}

    def covers(self, key: str, value: Tensor) -> bool:
        return value.is_floating_point() and (self.keys is None or key in self.keys)

    def apply(self, mean: State) -> State:
        num_clients = self.context.num_clients if self.context else self.total.count
        share = self.total.count / num_clients
        result = {}
        for key, previous in self.global_state.items():
            if not self.covers(key, previous):
                result[key] = mean[key]
                continue
            drift = mean[key].double() - previous.double()
            h = self.h.get(key, torch.zeros_like(drift)) - self.alpha * share * drift
            self.h[key] = h
            result[key] = (mean[key].double() - h / self.alpha).to(previous.dtype)
        return result

    def extra_state(self) -> dict[str, Any]:
        return {"h": self.h}

    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        self.h = dict(state.get("h") or {})
