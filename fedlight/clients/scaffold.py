"""SCAFFOLD: Karimireddy, Kale, Mohri, Reddi, Stich and Suresh, "SCAFFOLD: Stochastic Controlled
Averaging for Federated Learning", ICML 2020 (arXiv:1910.06378), Algorithm 1.

Each client i keeps a control variate c_i, the server a control variate c (both start at 0).
With x the received global model, K local steps at learning rate eta_l, N clients, S the round's
participants and eta_g the global learning rate:

    client:  y <- y - eta_l (g_i(y) - c_i + c)                      (every local step)
             c_i+ <- grad f_i(x)                                    (option I)
                  or c_i - c + (x - y) / (K eta_l)                  (option II, default)
             send y - x and c_i+ - c_i;  c_i <- c_i+
    server:  x <- x + eta_g * mean_{i in S}(y_i - x)
             c <- c + (1 / N) * sum_{i in S}(c_i+ - c_i)          (= |S|/N times their mean)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from fedlight.clients.base import FederatedClient
from fedlight.clients.method_state import StepCounter, parameter_mirror, received_parameters
from fedlight.core.client import Upload
from fedlight.core.errors import ConfigError
from fedlight.core.rules import Collectives, Report, WeightedSum
from fedlight.server.fedopt import FedAvgM

OPTIONS = ("I", "II")
CHUNK = 512  # samples per forward pass of the option-I gradient


class SCAFFOLD(FederatedClient):
    """SCAFFOLD client: local SGD with the drift correction c - c_i added to every gradient.

    Args:
        option: how the client control variate is refreshed after local training: "II"
            (default, the paper's cheaper choice and the one of its experiments) or "I" (the
            gradient of the local loss at the received model x).
        global_lr: the server's global learning rate eta_g (paper default 1), > 0.
        **kwargs: the base client's arguments (backbone, lr, ...).

    State: the client control variate c_i is the private buffer set control.<parameter name>
    (zeros at the start, kept per client and checkpointed). The server control c arrives in the
    message as {"control": {parameter name: tensor}}; before the server has one (first round)
    it is zero. The upload's payload is {"control_delta": c_i+ - c_i} over the shared
    parameters; the server rule is SCAFFOLDServer (not replaceable from a config).

    Choices where the paper is silent:
        * the correction is added to the gradient in on_before_optimizer_step, i.e. after
          backward and before gradient clipping and the optimizer's own weight decay and
          momentum (with the defaults, plain SGD, it is exactly the paper's update);
        * option II divides by the sum of the learning rates of the round's steps (K eta_l for
          a constant rate, the natural extension when a scheduler changes the rate); a client
          that took no step keeps c_i;
        * option I computes grad f_i(x) on all of the client's training data (mean task
          loss, in chunks of 512 samples, in train mode with BatchNorm statistics
          restored afterwards) at round start, before the first local step;
        * the server mean over clients is the trainer's weighting (the paper's uniform mean is
          trainer.weighting: uniform); the control update is always the plain sum over N;
        * only shared parameters are corrected; buffers (BatchNorm statistics) are averaged;
        * a client dropped after training (trainer.drop_rate) keeps its new c_i although the
          server never receives its delta (c then drifts from the mean of the c_i).

    Step size: on MAP's incomplete-classes setting (lr 0.03, 6 local epochs, 20 of 100
    clients a round) SCAFFOLD diverged in every seed with momentum 0.9 (by round 8) and in 2
    of 3 without (by round 38); at lr 0.005, 1 epoch, it trains (Dirichlet 0.1: 92.0 %). See
    benchmarks/results/baselines_incomplete.md; lower lr when the loss turns non-finite.
    """

    def __init__(self, option: str = "II", global_lr: float = 1.0, **kwargs: Any) -> None:
        if option not in OPTIONS:
            raise ConfigError(f"unknown option {option!r}; valid: {', '.join(OPTIONS)}")
        if not global_lr > 0:
            raise ConfigError(f"global_lr (eta_g) must be positive, got {global_lr}")
        super().__init__(**kwargs)
        self.option = option
        self.global_lr = float(global_lr)
        self.control = parameter_mirror(self)
        self.counter = StepCounter()
        self._received: dict[str, tuple[torch.nn.Parameter, Tensor]] = {}
        self._server_control: dict[str, Tensor] = {}
        self._next_control: dict[str, Tensor] = {}

    def private_patterns(self) -> list[str]:
        return ["control.*"]

    @property
    def has_global_model(self) -> bool:
        """True unless extra_private keeps part of model private: the method's own private
        state never enters prediction, so the shared model is a global model."""
        return not any(k.startswith("model.") for k in self.partition.private)

    def task_loss(self, logits: Tensor, y: Tensor) -> Tensor:
        """The local loss f_i on a batch's logits: cross-entropy (ScaRS restricts it)."""
        return F.cross_entropy(logits, y)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        loss = self.task_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def client_control(self, name: str) -> Tensor:
        """c_i of parameter name (the live private buffer)."""
        return self.control.get_buffer(name)

    # ----------------------------------------------------------------- federation
    def on_round_start(self, round: int, message: dict[str, Any]) -> None:
        """Keep x (the received shared parameters) and c; option I computes c_i+ now."""
        self._received = received_parameters(self)
        self._server_control = dict(message.get("control") or {})
        self._next_control = {}
        self.counter.reset()
        if (self.option == "I" and self.context is not None
                and self.context.train_data is not None):
            self._next_control = self.local_gradient(*self.context.train_data)

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        """g <- g - c_i + c on every shared parameter with a gradient; count the step."""
        self.counter.record(optimizer)
        for name, (param, _) in self._received.items():
            if param.grad is None:
                continue
            param.grad.sub_(self.client_control(name))
            if name in self._server_control:
                param.grad.add_(self._server_control[name].to(param.grad.dtype))

    def upload(self) -> Upload:
        """The shared state plus {"control_delta": c_i+ - c_i}."""
        upload = super().upload()
        new = self.new_control()
        upload.payload = {"control_delta": {n: new[n] - self.client_control(n)
                                            for n in self._received}}
        self._next_control = new
        return upload

    def on_round_end(self) -> None:
        """c_i <- c_i+."""
        with torch.no_grad():
            for name, value in self._next_control.items():
                self.client_control(name).copy_(value)
        self._next_control = {}

    # ----------------------------------------------------------------- control variates
    def new_control(self) -> dict[str, Tensor]:
        """c_i+ per shared parameter (option I: computed at round start; option II: the
        paper's c_i - c + (x - y) / (K eta_l); unchanged when no step was taken)."""
        if self.option == "I" and self._next_control:
            return self._next_control
        new = {}
        for name, (param, received) in self._received.items():
            c_i = self.client_control(name)
            if self.option == "I" or self.counter.steps == 0:
                new[name] = c_i.detach().clone()
                continue
            c = self._server_control.get(name)
            drift = (received - param.detach()) / self.counter.lr_sum
            new[name] = c_i - (c if c is not None else 0.0) + drift
        return new

    def local_gradient(self, x: Tensor, y: Tensor) -> dict[str, Tensor]:
        """grad f_i at the current parameters: the gradient of the mean task loss over
        (x, y), per shared parameter; BatchNorm statistics are left as they were."""
        buffers = {k: v.detach().clone() for k, v in self.named_buffers()}
        trained = [(name, param) for name, (param, _) in self._received.items()
                   if param.requires_grad]
        grads = {name: torch.zeros_like(param) for name, (param, _) in self._received.items()}
        with torch.enable_grad():
            for xb, yb in zip(x.split(CHUNK), y.split(CHUNK), strict=True):
                loss = self.task_loss(self(xb), yb) * (len(yb) / len(y))
                pieces = torch.autograd.grad(loss, [p for _, p in trained], allow_unused=True)
                for (name, _), piece in zip(trained, pieces, strict=True):
                    if piece is not None:
                        grads[name] += piece
        with torch.no_grad():
            for key, value in buffers.items():
                self.get_buffer(key).copy_(value)
        return grads

    def configure_server(self) -> SCAFFOLDServer:
        """SCAFFOLD's server: the mean step with eta_g and the server control variate."""
        return SCAFFOLDServer(global_lr=self.global_lr)


class SCAFFOLDServer(FedAvgM):
    """SCAFFOLD's server rule: x <- x + eta_g (mean of the reports - x) (FedAvgM without
    momentum) and c <- c + sum of the reported control deltas / N (N = every client of the
    federation).

    c starts at zero (it is created from the first deltas) and is sent as the message
    {"control": c}. Across processes the deltas' sum is all-reduced like the mean's. With
    eta_g = 1 the new global state is the mean (FedAvg's first round when c = c_i = 0).

    Args:
        global_lr: eta_g, > 0.
    """

    replaceable = False

    def __init__(self, global_lr: float = 1.0) -> None:
        if not global_lr > 0:
            raise ConfigError(f"global_lr (eta_g) must be positive, got {global_lr}")
        super().__init__(lr=global_lr, momentum=0.0)
        self.control: dict[str, Tensor] = {}
        self.deltas = WeightedSum()

    def begin_round(self, round_idx: int) -> None:
        super().begin_round(round_idx)
        self.deltas = WeightedSum()

    def add(self, report: Report) -> None:
        super().add(report)
        if "control_delta" in report.payload:
            self.deltas.add(report.payload["control_delta"], 1.0)

    def end_round(self, collectives: Collectives) -> None:
        super().end_round(collectives)
        collectives.reduce_sum(self.deltas)
        if self.deltas.count:
            num_clients = self.context.num_clients if self.context else self.deltas.count
            for key, total in self.deltas.sums.items():
                step = (total / num_clients).to(self.deltas.dtypes[key])
                self.control[key] = self.control[key] + step if key in self.control else step
            self.message = {"control": dict(self.control)}

    def extra_state(self) -> dict[str, Any]:
        return {**super().extra_state(), "control": self.control}

    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        super().load_extra_state(state)
        self.control = dict(state.get("control") or {})
