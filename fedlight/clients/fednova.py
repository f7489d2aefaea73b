"""FedNova: Wang, Liu, Liang, Joshi and Poor, "Tackling the Objective Inconsistency Problem in
Heterogeneous Federated Optimization", NeurIPS 2020 (arXiv:2007.07481).

Clients that take more local steps drift further; FedAvg's plain mean then optimizes a
surrogate objective weighted by step counts. FedNova normalizes each client's cumulative update
by the L1 norm of its step coefficients a_i before averaging, with p_i the aggregation weights::

    client:  tau_i local SGD steps from x;  Delta_i = x - y_i;  ||a_i||_1 = tau_i (plain SGD),
             ||a_i||_1 = (tau_i - rho (1 - rho^tau_i) / (1 - rho)) / (1 - rho) (momentum rho)
    server:  d = sum_i p_i Delta_i / ||a_i||_1;   tau_eff = sum_i p_i ||a_i||_1
             x <- x - tau_eff d

With equal ||a_i||_1 this is FedAvg's mean exactly (up to float rounding).
"""

from __future__ import annotations

from typing import Any

import torch

from fedlight.clients.base import FederatedClient
from fedlight.clients.method_state import StepCounter
from fedlight.core.client import Upload
from fedlight.core.errors import ConfigError
from fedlight.core.rules import Collectives, Report, State, WeightedSum
from fedlight.server.mean import WeightedMean


def step_coefficient_norm(steps: int, momentum: float = 0.0) -> float:
    """||a_i||_1 of tau_i = steps SGD steps with heavy-ball momentum rho (paper Sec. 5:
    tau for plain SGD, (tau - rho (1 - rho^tau) / (1 - rho)) / (1 - rho) with momentum)."""
    if momentum == 0:
        return float(steps)
    rho = momentum
    return (steps - rho * (1 - rho**steps) / (1 - rho)) / (1 - rho)


class FedNova(FederatedClient):
    """FedNova client: FedAvg's local SGD, reporting its step-coefficient norm ||a_i||_1.

    Args:
        **kwargs: the base client's arguments (backbone, lr, momentum, ...); the optimizer must
            be "sgd" (the normalization is derived for SGD with heavy-ball momentum).

    The upload's payload is {"tau": ||a_i||_1} (a float64 scalar tensor) computed from the
    optimizer steps counted in on_before_optimizer_step and the client's SGD momentum; the
    server rule is NormalizedAveraging (not replaceable from a config).

    Choices where the paper is silent or differs from the authors' code:
        * p_i are the trainer's weights (sample counts by default, the paper's p_i = n_i / n;
          trainer.weighting: uniform gives 1/m);
        * weight decay and a proximal term are not part of ||a_i||_1 (the authors' code also
          covers FedProx's mu; FedNova here is plain or momentum SGD);
        * every floating tensor of the shared state, BatchNorm statistics included, goes
          through the normalized rule; integer buffers take the same weighted mean rounded;
        * a client that took no step (no data) reports ||a||_1 = 0 and is left out.
    """

    def __init__(self, **kwargs: Any) -> None:
        optimizer = kwargs.get("optimizer", "sgd")
        if optimizer != "sgd":
            raise ConfigError(f"FedNova normalizes SGD steps; optimizer must be 'sgd', got "
                             f"{optimizer!r}")
        super().__init__(**kwargs)
        self.counter = StepCounter()

    def on_round_start(self, round: int, message: dict[str, Any]) -> None:
        self.counter.reset()

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        self.counter.record(optimizer)

    def upload(self) -> Upload:
        """The shared state plus {"tau": ||a_i||_1}."""
        upload = super().upload()
        norm = step_coefficient_norm(self.counter.steps, self.momentum)
        upload.payload = {"tau": torch.tensor(norm, dtype=torch.float64, device=self.device)}
        return upload

    def configure_server(self) -> NormalizedAveraging:
        return NormalizedAveraging()


class NormalizedAveraging(WeightedMean):
    """FedNova's server rule: x <- x - tau_eff sum_i p_i (x - y_i) / ||a_i||_1.

    Streaming: the running sum adds y_i with weight w_i / ||a_i||_1 (so its mean is
    m = sum (w_i/a_i) y_i / sum (w_i/a_i)), and a second sum keeps sum w_i a_i and sum w_i; then
    x_new = x + (sum w_i a_i)(sum w_i / a_i) / (sum w_i)^2 * (m - x), which is the paper's
    update. Both sums are all-reduced across processes.
    """

    replaceable = False

    def __init__(self) -> None:
        super().__init__()
        self.taus = WeightedSum()

    def begin_round(self, round_idx: int) -> None:
        super().begin_round(round_idx)
        self.taus = WeightedSum()

    def add(self, report: Report) -> None:
        tau = float(report.payload["tau"])
        if tau <= 0:
            return
        self.total.add(report.state, report.weight / tau)
        self.taus.add({"tau": report.payload["tau"].reshape(1).double()}, report.weight)

    def end_round(self, collectives: Collectives) -> None:
        collectives.reduce_sum(self.taus)
        super().end_round(collectives)

    def apply(self, mean: State) -> State:
        weight = self.taus.total_weight
        scale = float(self.taus.sums["tau"]) * self.total.total_weight / weight**2
        return {k: ((x.double() + scale * (mean[k].double() - x.double())).to(x.dtype)
                    if x.is_floating_point() else mean[k])
                for k, x in self.global_state.items()}
