"""Server optimizers: FedAvgM, FedAdam, FedYogi, FedAdagrad.

Reddi, Charles, Zaheer, Garrett, Rush, Konecny, Kumar and McMahan, "Adaptive Federated
Optimization", ICLR 2021 (arXiv:2003.00295), Algorithm 2. The round's weighted mean of the
reports gives the pseudo-gradient Delta = mean - x (a step towards the clients), and the
server takes one optimizer step on it, per coordinate:

    FedAvgM:     m = beta1 m + Delta;                           x = x + eta m
    FedAdagrad:  v = v + Delta^2;                                x = x + eta m / (sqrt(v) + tau)
    FedAdam:     v = beta2 v + (1 - beta2) Delta^2;              same x update
    FedYogi:     v = v - (1 - beta2) Delta^2 sign(v - Delta^2);  same x update

with m = beta1 m + (1 - beta1) Delta for the three adaptive ones, m and v starting at
0 and tau^2 (the paper asks v_{-1} >= tau^2), and no bias correction (as Algorithm 2).
FedAvgM's form is the heavy-ball momentum of Hsu, Qi and Brown (arXiv:1909.06335) that Reddi
et al. compare against; with momentum=0, lr=1 it is FedAvg exactly. FedAdam approaches
FedAvg with beta1=0, beta2=0, lr=tau as tau grows (then v = Delta^2 and the
step tau Delta / (|Delta| + tau) -> Delta); with v starting at tau^2 and beta2 >
0 the limit is lr Delta / ((1 + sqrt(beta2)) tau) instead.

Choices: every floating tensor of the shared state (BatchNorm running statistics included) is
stepped; integer buffers (num_batches_tracked) take the plain mean. The arithmetic and the
moments are float64, cast back to each tensor's dtype, so x + (mean - x) returns mean
exactly and a resumed run continues from the same moments.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import torch
from torch import Tensor

from fedlight.core.errors import ConfigError
from fedlight.core.rules import State
from fedlight.server.mean import WeightedMean


class ServerOptimizer(WeightedMean):
    """A mean-type rule that steps the global state along Delta = mean - x; subclasses give
    the per-tensor step in step."""

    def __init__(self, lr: float) -> None:
        if not lr > 0:
            raise ConfigError(f"server lr must be positive, got {lr}")
        super().__init__()
        self.lr = float(lr)
        self.moments: dict[str, dict[str, Tensor]] = {}

    def apply(self, mean: State) -> State:
        result = {}
        for key, x in self.global_state.items():
            if not x.is_floating_point():
                result[key] = mean[key]
                continue
            delta = mean[key].double() - x.double()
            result[key] = (x.double() + self.step(key, delta)).to(x.dtype)
        return result

    @abstractmethod
    def step(self, key: str, delta: Tensor) -> Tensor:
        """The change of tensor key given its pseudo-gradient (float64)."""

    def moment(self, key: str, name: str, initial: Tensor) -> Tensor:
        """The moment name of tensor key, created as initial on first use."""
        return self.moments.setdefault(key, {}).setdefault(name, initial)

    def extra_state(self) -> dict[str, Any]:
        return {"moments": self.moments}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.moments = {k: dict(v) for k, v in state.get("moments", {}).items()}


class FedAvgM(ServerOptimizer):
    """FedAvg with server momentum: m = momentum m + Delta; x = x + lr m.

    Args:
        lr: server learning rate eta (1.0 with momentum 0 is FedAvg).
        momentum: beta1, the server momentum.
    """

    def __init__(self, lr: float = 1.0, momentum: float = 0.9) -> None:
        if not 0 <= momentum < 1:
            raise ConfigError(f"momentum must be in [0, 1), got {momentum}")
        super().__init__(lr)
        self.momentum = float(momentum)

    def step(self, key: str, delta: Tensor) -> Tensor:
        m = self.moment(key, "m", torch.zeros_like(delta))
        m.mul_(self.momentum).add_(delta)
        return self.lr * m


class AdaptiveServerOptimizer(ServerOptimizer):
    """Shared part of FedAdagrad / FedAdam / FedYogi: first moment, v from
    second_moment, step lr m / (sqrt(v) + tau)."""

    def __init__(self, lr: float, beta1: float, beta2: float, tau: float) -> None:
        for name, value in (("beta1", beta1), ("beta2", beta2)):
            if not 0 <= value < 1:
                raise ConfigError(f"{name} must be in [0, 1), got {value}")
        if not tau > 0:
            raise ConfigError(f"tau (adaptivity) must be positive, got {tau}")
        super().__init__(lr)
        self.beta1, self.beta2, self.tau = float(beta1), float(beta2), float(tau)

    def step(self, key: str, delta: Tensor) -> Tensor:
        m = self.moment(key, "m", torch.zeros_like(delta))
        m.mul_(self.beta1).add_(delta, alpha=1 - self.beta1)
        v = self.moment(key, "v", torch.full_like(delta, self.tau**2))
        self.second_moment(v, delta.square())
        return self.lr * m / (v.sqrt() + self.tau)

    @abstractmethod
    def second_moment(self, v: Tensor, squared: Tensor) -> None:
        """Update v in place from Delta^2."""


class FedAdagrad(AdaptiveServerOptimizer):
    """FedAdagrad: v = v + Delta^2 (Reddi et al., Algorithm 2).

    Args:
        lr: server learning rate eta.
        beta1: first-moment decay.
        tau: adaptivity; also the start value sqrt(v_{-1}).
    """

    def __init__(self, lr: float = 0.1, beta1: float = 0.0, tau: float = 1e-3) -> None:
        super().__init__(lr, beta1, 0.0, tau)

    def second_moment(self, v: Tensor, squared: Tensor) -> None:
        v.add_(squared)


class FedAdam(AdaptiveServerOptimizer):
    """FedAdam: v = beta2 v + (1 - beta2) Delta^2 (Reddi et al., Algorithm 2).

    Args:
        lr: server learning rate eta.
        beta1: first-moment decay.
        beta2: second-moment decay.
        tau: adaptivity; also the start value sqrt(v_{-1}).
    """

    def __init__(self, lr: float = 0.01, beta1: float = 0.9, beta2: float = 0.99,
                 tau: float = 1e-3) -> None:
        super().__init__(lr, beta1, beta2, tau)

    def second_moment(self, v: Tensor, squared: Tensor) -> None:
        v.mul_(self.beta2).add_(squared, alpha=1 - self.beta2)


class FedYogi(AdaptiveServerOptimizer):
    """FedYogi: v = v - (1 - beta2) Delta^2 sign(v - Delta^2) (Reddi et al., Algorithm 2).

    Args:
        lr: server learning rate eta.
        beta1: first-moment decay.
        beta2: second-moment decay.
        tau: adaptivity; also the start value sqrt(v_{-1}).
    """

    def __init__(self, lr: float = 0.01, beta1: float = 0.9, beta2: float = 0.99,
                 tau: float = 1e-3) -> None:
        super().__init__(lr, beta1, beta2, tau)

    def second_moment(self, v: Tensor, squared: Tensor) -> None:
        v.sub_((1 - self.beta2) * squared * torch.sign(v - squared))


__all__ = ["FedAdagrad", "FedAdam", "FedAvgM", "FedYogi", "ServerOptimizer"]
