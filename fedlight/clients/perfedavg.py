"""Per-FedAvg: Fallah, Mokhtari and Ozdaglar, "Personalized Federated Learning with Theoretical
Guarantees: A Model-Agnostic Meta-Learning Approach", NeurIPS 2020 (arXiv:2002.07948).

FedAvg on the MAML objective F_i(w) = f_i(w - alpha grad f_i(w)): every local step draws
independent batches D, D' (and D'' for the Hessian-free variant) and updates, with beta the
outer learning rate::

    w' = w - alpha grad f_i(w; D)
    FO: w <- w - beta grad f_i(w'; D')
    HF: w <- w - beta (I - alpha H_i(w; D'')) grad f_i(w'; D'),
        H_i(w; D'') u ~ (grad f_i(w + delta u; D'') - grad f_i(w - delta u; D'')) / (2 delta)

The server averages w (FedAvg). A client is evaluated after one adaptation step
w - alpha grad f_i(w) on its own training data.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.func import functional_call

from fedlight.clients.base import FederatedClient
from fedlight.core.client import Phase
from fedlight.core.errors import ConfigError

VARIANTS = ("fo", "hf")
Batch = tuple[Tensor, Tensor]


class PerFedAvg(FederatedClient):
    """Per-FedAvg client (first-order "fo" or Hessian-free "hf").

    Args:
        variant: "fo" (first-order, default) or "hf" (Hessian-free).
        inner_lr: alpha, the step size of the inner (personalization) step, > 0; the outer
            step size beta is the client's lr. The paper tunes both per dataset; default 0.01.
        hvp_delta: delta of the finite-difference Hessian-vector product (hf), > 0.
        **kwargs: the base client's arguments (backbone, lr, ...).

    Local phase "meta": the trainer's batch is D; D' (and D'') are drawn uniformly with
    replacement, each the size of D, from the client's training split with the global random
    generator (which the trainer seeds per client and round), so a meta step costs two (three)
    batches and an epoch has as many meta steps as batches. The returned loss is
    f_i(w'; D') with w' = w - alpha grad f_i(w; D) and the inner gradient detached, so its
    gradient with respect to w is grad f_i(w'; D') (the first-order step); for "hf" the
    correction - alpha H_i(w; D'') grad f_i(w'; D') is added to the gradient in
    on_before_optimizer_step (finite differences, as the paper, rather than an exact
    Hessian-vector product).

    Evaluation (evaluation_phases): phase "adapt", one SGD step at alpha (lr_scale =
    inner_lr / lr) on one training batch with plain cross-entropy; the adapted copy is scored
    and discarded. Global accuracy is w itself.

    Run alone under a plain lightning.Trainer (no federated context) the batch is split in
    halves for D and D' (thirds for hf).
    """

    def __init__(self, variant: str = "fo", inner_lr: float = 0.01, hvp_delta: float = 1e-3,
                 **kwargs: Any) -> None:
        if variant not in VARIANTS:
            raise ConfigError(f"unknown variant {variant!r}; valid: {', '.join(VARIANTS)}")
        if not inner_lr > 0:
            raise ConfigError(f"inner_lr (alpha) must be positive, got {inner_lr}")
        if not hvp_delta > 0:
            raise ConfigError(f"hvp_delta must be positive, got {hvp_delta}")
        super().__init__(**kwargs)
        self.variant = variant
        self.inner_lr = float(inner_lr)
        self.hvp_delta = float(hvp_delta)
        self._hessian_batch: Batch | None = None

    def local_phases(self, local_epochs: int) -> list[Phase]:
        return [Phase("meta", local_epochs)]

    def evaluation_phases(self) -> list[Phase]:
        """One adaptation step at alpha before scoring."""
        return [Phase("adapt", 1, max_steps=1, lr_scale=self.inner_lr / self.lr)]

    # ----------------------------------------------------------------- batches
    def meta_batches(self, batch: Batch) -> list[Batch]:
        """D (the given batch), D' and, for hf, D''."""
        count = 3 if self.variant == "hf" else 2
        x, y = batch
        data = self.context.train_data if self.context is not None else None
        if data is None:
            return list(zip(x.chunk(count), y.chunk(count), strict=True))
        pool_x, pool_y = data
        extra = []
        for _ in range(count - 1):
            index = torch.randint(len(pool_y), (len(y),)).to(pool_y.device)
            extra.append((pool_x[index], pool_y[index]))
        return [batch, *extra]

    def trainable(self) -> dict[str, Tensor]:
        return {n: p for n, p in self.model.named_parameters() if p.requires_grad}

    def loss_at(self, params: dict[str, Tensor], batch: Batch) -> Tensor:
        """f_i at params (model parameter names; the others as they are) on batch."""
        x, y = batch
        return F.cross_entropy(functional_call(self.model, params, (x,)), y)

    # ----------------------------------------------------------------- training
    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        if self.phase == "adapt":
            loss = F.cross_entropy(self(batch[0]), batch[1])
            self.log("adapt_loss", loss)
            return loss
        batches = self.meta_batches(batch)
        params = self.trainable()
        inner = self.loss_at(params, batches[0])
        grads = torch.autograd.grad(inner, list(params.values()))
        adapted = {n: p - self.inner_lr * g.detach()
                   for (n, p), g in zip(params.items(), grads, strict=True)}
        loss = self.loss_at(adapted, batches[1])
        self._hessian_batch = batches[2] if self.variant == "hf" else None
        self.log("inner_loss", inner.detach())
        self.log("train_loss", loss)
        return loss

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        """hf: g <- g - alpha H(w; D'') g, g = grad f_i(w'; D') as backward left it."""
        if self.phase != "meta" or self._hessian_batch is None:
            return
        params = {n: p for n, p in self.trainable().items() if p.grad is not None}
        product = self.hessian_vector_product(
            {n: p.grad.detach() for n, p in params.items()}, self._hessian_batch)
        for name, param in params.items():
            param.grad.sub_(product[name], alpha=self.inner_lr)
        self._hessian_batch = None

    def hessian_vector_product(self, vector: dict[str, Tensor], batch: Batch
                               ) -> dict[str, Tensor]:
        """(grad f(w + delta v) - grad f(w - delta v)) / (2 delta) on batch."""
        sides = []
        for sign in (1.0, -1.0):
            shifted = {n: (p.detach() + sign * self.hvp_delta * vector[n]).requires_grad_()
                       for n, p in self.model.named_parameters() if n in vector}
            with torch.enable_grad():
                grads = torch.autograd.grad(self.loss_at(shifted, batch),
                                            list(shifted.values()))
            sides.append(dict(zip(shifted, grads, strict=True)))
        return {n: (sides[0][n] - sides[1][n]) / (2 * self.hvp_delta) for n in vector}
