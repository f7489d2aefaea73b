"""FedRoD: Chen and Chao, "On Bridging Generic and Personalized Federated Learning for Image
Classification", ICLR 2022 (arXiv:2107.00778).

Two predictors on one shared feature extractor ``f``: a generic head ``g`` (shared), trained
with a loss robust to the client's label skew, and a personalized head ``p_k`` (private) that
learns each client's empirical risk *on top of* the generic prediction::

    z = f(x)
    L_generic = CE(g(z) + log pi_k, y)             balanced softmax, pi_k = client label prior
    L_personal = CE(sg[g(z)] + p_k(sg[z]), y)      sg = stop-gradient
    personalized prediction g(z) + p_k(z); generic (global) prediction g(z)

The server averages ``f`` and ``g`` (sample-weighted); ``p_k`` never leaves the client.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedlight.clients.base import FederatedClient
from fedlight.core.errors import ConfigError

GENERIC_LOSSES = ("bsm", "ce")


def balanced_softmax_loss(logits: Tensor, targets: Tensor, class_counts: Tensor) -> Tensor:
    """Balanced softmax cross-entropy (Ren et al., NeurIPS 2020): CE on ``logits + log(n_c)``.

    ``class_counts`` are the client's training label counts ``n_c`` (any positive scale: only the
    log prior up to a constant matters, so uniform counts give plain cross-entropy). Classes
    with ``n_c = 0`` get a ``-inf`` logit, i.e. they drop out of the softmax.
    """
    return F.cross_entropy(balanced_logits(logits, class_counts), targets)


def balanced_logits(logits: Tensor, class_counts: Tensor) -> Tensor:
    """``logits + log(n_c / n)``: what :func:`balanced_softmax_loss` takes the CE of."""
    prior = class_counts.to(logits.dtype) / class_counts.sum()
    return logits + prior.log()


class FedRoD(FederatedClient):
    """FedRoD client: shared encoder and generic head, private personalized head.

    Args:
        generic_loss: loss of the generic head, ``"bsm"`` (balanced softmax, the paper's
            default) or ``"ce"`` (plain cross-entropy, the paper's ablation).
        **kwargs: the base client's arguments (``backbone``, ``lr``, ...).

    Each step minimizes ``L_generic + L_personal`` with one optimizer. ``L_personal`` reaches
    neither the feature extractor nor the generic head (both detached): the paper learns the
    personalized head on top of the generic model without letting the personal objective change
    it (GPFL's reading of FedRoD too: no gradient from the personalized objective reaches the
    feature extractor). ``forward`` (personalized accuracy) is ``g(z) + p_k(z)``;
    ``global_forward`` (global accuracy) is ``g(z)``.

    Choices where the paper is silent: the personalized head is a linear layer like the generic
    one, initialized at zero so that a client's first personalized prediction is the generic
    one (PFLlib-style code copies the generic head's initialization instead); the paper's
    hyper-network variant that generates ``p_k`` is not implemented.
    """

    batchable = True  # the label counts the balanced softmax reads are a buffer
    sample_weighted = True  # its cross-entropies are means over the real samples

    def __init__(self, generic_loss: str = "bsm", **kwargs: Any) -> None:
        if generic_loss not in GENERIC_LOSSES:
            raise ConfigError(f"unknown generic_loss {generic_loss!r}; valid: "
                             f"{', '.join(GENERIC_LOSSES)}")
        super().__init__(**kwargs)
        self.generic_loss = generic_loss
        self.personal_head = nn.Linear(self.feature_dim, self.num_classes)
        nn.init.zeros_(self.personal_head.weight)
        nn.init.zeros_(self.personal_head.bias)
        # the loaded client's training label counts (ones without a context), a buffer so
        # that batched clients each read their own
        self.register_buffer("label_counts", torch.ones(self.num_classes), persistent=False)
        self._counts_context: Any = None

    def private_patterns(self) -> list[str]:
        return ["personal_head.*"]

    @property
    def has_global_model(self) -> bool:
        return True

    def on_round_start(self, round: int, message: dict[str, Any]) -> None:
        """Build the client's label counts (the balanced softmax's prior)."""
        self.class_prior_counts()

    @torch.no_grad()
    def class_prior_counts(self) -> Tensor:
        """``label_counts``, rebuilt from the context when it changed since."""
        if self._counts_context is not self.context:
            self.label_counts.copy_(self.train_class_counts())
            self._counts_context = self.context
        return self.label_counts

    def forward(self, x: Tensor) -> Tensor:
        """Personalized logits ``g(z) + p_k(z)``."""
        features = self.model.encoder(x)
        return self.model.head(features) + self.personal_head(features)

    def global_forward(self, x: Tensor) -> Tensor:
        """Generic logits ``g(z)``."""
        return self.model(x)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        features = self.model.encoder(x)
        generic = self.model.head(features)
        if self.generic_loss == "bsm":
            generic_loss = self.cross_entropy(
                balanced_logits(generic, self.class_prior_counts()), y)
        else:
            generic_loss = self.cross_entropy(generic, y)
        personal = generic.detach() + self.personal_head(features.detach())
        personal_loss = self.cross_entropy(personal, y)
        loss = generic_loss + personal_loss
        self.log("generic_loss", generic_loss)
        self.log("personal_loss", personal_loss)
        self.log("train_loss", loss)
        return loss
