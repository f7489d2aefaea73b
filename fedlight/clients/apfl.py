"""APFL: Deng, Kamani and Mahdavi, "Adaptive Personalized Federated Learning", arXiv:2003.13461,
2020 (Algorithm 1).

Each client trains, at every local step, the global model w (uploaded, averaged) on its own
loss, and a private local model v through the mixture v_bar = alpha v + (1 - alpha) w, with a
private mixing weight alpha learned by gradient descent::

    w     <- w - eta grad f_i(w)
    v     <- v - eta grad_v f_i(v_bar)           (= alpha grad f_i(v_bar))
    alpha <- alpha - eta_alpha <v - w, grad f_i(v_bar)>,  kept in [0, 1]

The personalized model is v_bar.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from fedlight.clients.base import FederatedClient
from fedlight.core.errors import ConfigError


class APFL(FederatedClient):
    """APFL client: shared global model (model), private local model (personal) and private
    mixing weight (mixing).

    Args:
        alpha: the initial mixing weight in [0, 1] (the paper's experiments use 0.25, 0.5,
            0.75; default 0.5).
        adaptive: learn alpha (the paper's adaptive APFL, default) or keep it fixed.
        alpha_lr: eta_alpha, the learning rate of alpha (> 0; None: the client's lr).
        **kwargs: the base client's arguments (backbone, lr, ...).

    One local phase trains all three at once: the step loss is CE(w(x), y) + CE(v_bar(x), y)
    with w detached inside v_bar, so w's gradient is grad f_i(w) alone and v and alpha get the
    chain-rule gradients of f_i(v_bar) above (autograd gives exactly the paper's updates). The
    upload is w. forward (personalized accuracy) is v_bar; global_forward is w.

    Choices where the paper is silent: the local model starts as a copy of the initial global
    model (the same on every client); v_bar mixes parameters only, BatchNorm running statistics
    are the local model's own; alpha is clipped to [0, 1] after every optimizer step (in
    on_train_batch_end) and gets no momentum or weight decay.
    """

    def __init__(self, alpha: float = 0.5, adaptive: bool = True,
                 alpha_lr: float | None = None, **kwargs: Any) -> None:
        if not 0 <= alpha <= 1:
            raise ConfigError(f"alpha (initial mixing weight) must be in [0, 1], got {alpha}")
        if alpha_lr is not None and not alpha_lr > 0:
            raise ConfigError(f"alpha_lr must be positive (or None for lr), got {alpha_lr}")
        super().__init__(**kwargs)
        self.adaptive = bool(adaptive)
        self.alpha_lr = self.lr if alpha_lr is None else float(alpha_lr)
        self.personal = copy.deepcopy(self.model)
        self.mixing = nn.Parameter(torch.tensor(float(alpha)), requires_grad=self.adaptive)

    def private_patterns(self) -> list[str]:
        return ["personal.*", "mixing"]

    @property
    def has_global_model(self) -> bool:
        return True

    def mixed_parameters(self) -> dict[str, Tensor]:
        """v_bar = alpha v + (1 - alpha) w per parameter of the local model, w detached."""
        global_params = dict(self.model.named_parameters())
        return {name: self.mixing * v + (1 - self.mixing) * global_params[name].detach()
                for name, v in self.personal.named_parameters()}

    def forward(self, x: Tensor) -> Tensor:
        """The mixed model's logits."""
        return functional_call(self.personal, self.mixed_parameters(), (x,))

    def global_forward(self, x: Tensor) -> Tensor:
        return self.model(x)

    def optimizer_param_groups(self) -> list[dict[str, Any]]:
        """Both models at the client's settings; alpha at alpha_lr, no momentum or decay."""
        models = [p for n, p in self.named_parameters() if n != "mixing"]
        return [{"params": models},
                {"params": [self.mixing], "lr": self.alpha_lr, "momentum": 0.0,
                 "weight_decay": 0.0}]

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        global_loss = F.cross_entropy(self.model(x), y)
        mixed_loss = F.cross_entropy(self(x), y)
        self.log("mixed_loss", mixed_loss)
        self.log("alpha", self.mixing.detach())
        loss = global_loss + mixed_loss
        self.log("train_loss", loss)
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Keep alpha in [0, 1]."""
        with torch.no_grad():
            self.mixing.clamp_(0.0, 1.0)
