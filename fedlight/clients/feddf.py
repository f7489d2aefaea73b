"""FedDF: Lin, Kong, Stich and Jaggi, "Ensemble Distillation for Robust Model Fusion in
Federated Learning", NeurIPS 2020 (arXiv:2006.07242), Algorithm 1 (homogeneous models).

Clients run FedAvg's local training. The server first averages the reports (x = sum_k w_k
x_k / sum_k w_k), then fine-tunes that average on an unlabeled public set d so that it matches
the ensemble of the round's client models (AVGLOGITS):

    teacher(d) = (1 / |S|) sum_{k in S} f(x_k, d)                        (mean logits)
    x <- x - eta grad_x KL(softmax(teacher(d) / T) || softmax(f(x, d) / T))   (distill_steps)

Choices where the paper is silent or differs from this setting:
    * the public set is data.public_samples unlabeled inputs drawn (seeded) from the global test
      set, MAP's protocol for FedDF (500); the paper uses other datasets (e.g. CIFAR-100 or
      STL-10 for CIFAR-10) or a generator;
    * Adam at distill_lr (the paper: Adam, 1e-3) for a fixed distill_steps (the paper: up to
      10^4 steps with early stopping on a validation split, patience 10^3), batches of
      distill_batch_size public inputs drawn with a generator seeded from (seed, round);
    * the student trains in train mode (BatchNorm statistics follow the public data), the
      teachers are scored in eval mode;
    * the teacher is the plain mean of the clients' logits (uniform, as AVGLOGITS), while the
      starting average uses the trainer's weighting.
Streaming: each report's logits on the public set are added to a running sum as it arrives
(memory O(public set x classes), not O(clients x model)), and all-reduced across processes.
With distill_steps = 0 the rule is FedAvg exactly.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedlight.clients.base import FederatedClient
from fedlight.core.errors import ConfigError
from fedlight.core.rules import Collectives, Report, ServerContext, State, WeightedSum
from fedlight.core.seeding import derive_seed
from fedlight.server.mean import WeightedMean

_DISTILL_STREAM = 0xFEDDF  # keeps the server's draws apart from every client's (seed, round, id)


class FedDF(FederatedClient):
    """FedDF client: FedAvg's local training; the server fuses by ensemble distillation.

    Args:
        distill_steps: server distillation steps per round (0 = FedAvg).
        distill_lr: Adam learning rate of the distillation.
        distill_batch_size: public inputs per distillation step.
        temperature: T of the distillation KL.
        **kwargs: the base client's arguments (backbone, lr, ...).

    Needs data.public_samples > 0 (the unlabeled public set) unless distill_steps is 0.
    """

    def __init__(self, distill_steps: int = 100, distill_lr: float = 1e-3,
                 distill_batch_size: int = 64, temperature: float = 1.0, **kwargs: Any) -> None:
        if distill_steps < 0:
            raise ConfigError(f"distill_steps must be >= 0, got {distill_steps}")
        if not distill_lr > 0:
            raise ConfigError(f"distill_lr must be positive, got {distill_lr}")
        if distill_batch_size < 1:
            raise ConfigError(f"distill_batch_size must be at least 1, got {distill_batch_size}")
        if not temperature > 0:
            raise ConfigError(f"temperature must be positive, got {temperature}")
        super().__init__(**kwargs)
        self.distill = dict(steps=distill_steps, lr=distill_lr, batch_size=distill_batch_size,
                            temperature=temperature)

    def configure_server(self) -> EnsembleDistillation:
        """The weighted mean followed by ensemble distillation on the public set."""
        return EnsembleDistillation(copy.deepcopy(self).cpu(), **self.distill)


class EnsembleDistillation(WeightedMean):
    """FedDF's server rule (see the module docstring): the weighted mean of the reports,
    distilled towards the mean logits of the reported models on the public set.

    Args:
        model: a copy of the client module; the rule loads states into it (CPU).
        steps, lr, batch_size, temperature: the distillation (FedDF's arguments).
    """

    replaceable = False

    def __init__(self, model: nn.Module, steps: int, lr: float, batch_size: int,
                 temperature: float) -> None:
        super().__init__()
        self.model = model
        self.steps, self.lr, self.batch_size, self.temperature = steps, lr, batch_size, temperature
        self.public: Tensor | None = None
        self.logits = WeightedSum()
        self.round_idx = 0

    def setup(self, initial_state: State, context: ServerContext) -> None:
        super().setup(initial_state, context)
        self.public = context.public_inputs
        if self.steps and self.public is None:
            raise ConfigError("FedDF distills on an unlabeled public set: set data.public_samples "
                             "(e.g. 500) or model.distill_steps: 0")

    def begin_round(self, round_idx: int) -> None:
        super().begin_round(round_idx)
        self.logits = WeightedSum()
        self.round_idx = round_idx

    def add(self, report: Report) -> None:
        super().add(report)
        if self.steps:
            self.logits.add({"logits": self.predict(report.state)}, 1.0)

    @torch.no_grad()
    def predict(self, state: State) -> Tensor:
        """Logits of the model with ``state`` on the public set (eval mode, float64)."""
        self.model.load_state_dict(state, strict=False)
        self.model.eval()
        return self.model.global_forward(self.public).double()

    def end_round(self, collectives: Collectives) -> None:
        if self.steps:
            collectives.reduce_sum(self.logits)
        super().end_round(collectives)

    def apply(self, mean: State) -> State:
        """Distil the mean towards the ensemble's logits; the mean itself with 0 steps."""
        if not self.steps or not self.logits.count:
            return mean
        teacher = F.softmax(self.logits.mean()["logits"].float() / self.temperature, dim=-1)
        device = next(iter(mean.values())).device
        self.model.load_state_dict(mean, strict=False)
        self.model.train()
        optimizer = torch.optim.Adam(self.model.parameters(), lr=self.lr)
        seed = self.context.seed if self.context else 0
        stream = derive_seed(seed, self.round_idx, _DISTILL_STREAM)
        generator = torch.Generator().manual_seed(stream)
        with torch.enable_grad():
            for _ in range(self.steps):
                size = min(self.batch_size, len(self.public))  # never more than the set
                batch = torch.randint(len(self.public), (size,), generator=generator)
                student = F.log_softmax(
                    self.model.global_forward(self.public[batch]) / self.temperature, dim=-1)
                loss = F.kl_div(student, teacher[batch], reduction="batchmean")
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
        state = self.model.state_dict()
        return {k: state[k].detach().to(device, copy=True) for k in mean}


__all__ = ["EnsembleDistillation", "FedDF"]
