"""FedProto: Tan, Long, Liu, Zhou, Lu, Jiang and Zhang, "FedProto: Federated Prototype
Learning across Heterogeneous Clients", AAAI 2022 (arXiv:2105.00243).

Clients share class *prototypes* (mean feature vectors), never weights. With ``f = phi(x)`` the
encoder's feature and ``C_bar[j]`` the global prototype of class ``j``::

    client k:  L = CE(head(f), y) + lamda * MSE(f, C_bar[y])        (classes with a C_bar)
    upload:    C_k[j] = mean of phi_k(x) over k's training samples of class j, and counts
    server:    C_bar[j] = sum_k |D_kj| C_k[j] / sum_k |D_kj|       (eq. 5 of the paper)

Prediction by the local head, or by the nearest global prototype (the paper's inference rule).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from fedlight.clients.base import FederatedClient
from fedlight.core.client import Upload
from fedlight.core.errors import ConfigError
from fedlight.core.rules import Collectives, Report
from fedlight.server.mean import WeightedMean

PREDICT_BY = ("head", "prototype")
CHUNK = 512  # samples per forward pass when computing prototypes


class FedProto(FederatedClient):
    """FedProto client: all weights private; per-class prototypes are the only communication.

    Args:
        lamda: weight of the prototype regularizer, ``>= 0``; default ``1``, the default of
            the authors' released code (the paper states no single value).
        predict_by: ``"head"`` (the local classifier, default) or ``"prototype"`` (the class of
            the nearest global prototype in squared Euclidean distance, the paper's inference
            rule). Whichever is not chosen is reported too, as ``prototype_accuracy`` or
            ``head_accuracy`` columns.
        **kwargs: the base client's arguments (``backbone``, ``lr``, ...).

    The global prototypes a client last received are kept in its private buffers
    ``global_prototypes`` ``(U, K)`` and ``prototype_mask`` ``(U,)`` (classes that have one), so
    prototype prediction uses them, lagging the newest server table by up to one round. Before
    any prototype exists, prototype prediction falls back to the head.

    Choices where the paper is silent:
        * prototypes are computed after local training, in eval mode, over all of the client's
          training data (the authors' code averages features collected during the last local
          epoch instead);
        * the MSE averages over the batch and the feature dimension, samples whose class has no
          global prototype contributing zero (as the authors' code);
        * with prototype prediction, classes without a global prototype get the lowest logit.

    There is no global model (no global accuracy).
    """

    batchable = True  # the received prototypes are buffers

    def __init__(self, lamda: float = 1.0, predict_by: str = "head", **kwargs: Any) -> None:
        if lamda < 0:
            raise ConfigError(f"lamda (weight of the prototype loss) must be >= 0, got {lamda}")
        if predict_by not in PREDICT_BY:
            raise ConfigError(f"unknown predict_by {predict_by!r}; valid: {', '.join(PREDICT_BY)}")
        super().__init__(**kwargs)
        self.lamda = lamda
        self.predict_by = predict_by
        dim = self.feature_dim
        self.register_buffer("global_prototypes", torch.zeros(self.num_classes, dim))
        self.register_buffer("prototype_mask", torch.zeros(self.num_classes, dtype=torch.bool))

    # ----------------------------------------------------------------- partition
    def shared_patterns(self) -> list[str]:
        return []

    def private_patterns(self) -> list[str]:
        return ["*"]

    # ----------------------------------------------------------------- federation
    def on_round_start(self, round: int, message: dict[str, Any]) -> None:
        """Store the received global prototypes (nothing before the first aggregation)."""
        if "prototypes" in message:
            self.global_prototypes.copy_(message["prototypes"])
            self.prototype_mask.copy_(message["counts"] > 0)

    @torch.no_grad()
    def local_prototypes(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """Per-class mean features ``(U, K)`` (zero rows for absent classes) and counts ``(U,)``
        of ``(x, y)``, computed in eval mode."""
        was_training = self.training
        self.eval()
        sums = torch.zeros(self.num_classes, self.feature_dim, device=x.device)
        for xb, yb in zip(x.split(CHUNK), y.split(CHUNK), strict=True):
            sums.index_add_(0, yb, self.model.encoder(xb).float())
        self.train(was_training)
        counts = torch.bincount(y, minlength=self.num_classes).float()
        return sums / counts.clamp_min(1).unsqueeze(1), counts

    def upload(self) -> Upload:
        """No weights; the payload is this client's prototypes and class counts."""
        upload = super().upload()
        if self.context is not None and self.context.train_data is not None:
            prototypes, counts = self.local_prototypes(*self.context.train_data)
            upload.payload = {"prototypes": prototypes, "counts": counts}
        return upload

    def configure_server(self) -> PrototypeMean:
        """FedProto's server: the per-class count-weighted mean of the clients' prototypes."""
        return PrototypeMean()

    # ----------------------------------------------------------------- prediction
    def prototype_logits(self, features: Tensor) -> Tensor:
        """Negative squared distances to the global prototypes; absent classes lowest."""
        distances = torch.cdist(features.float(), self.global_prototypes.float()).pow(2)
        logits = -distances
        floor = logits.min(dim=1, keepdim=True).values - 1.0
        return torch.where(self.prototype_mask, logits, floor)

    def _logits(self, x: Tensor) -> dict[str, Tensor]:
        features = self.model.encoder(x)
        head = self.model.head(features)
        # the head's logits until a prototype has arrived; a select, not a Python branch on a
        # tensor, so that several clients' models are scored at once (batched engine)
        prototype = torch.where(self.prototype_mask.any(), self.prototype_logits(features), head)
        return {"head": head, "prototype": prototype}

    def forward(self, x: Tensor) -> Tensor:
        """Logits of the chosen predictor (``predict_by``)."""
        if self.predict_by == "head":
            return self.model(x)
        return self._logits(x)["prototype"]

    def eval_outputs(self, x: Tensor) -> dict[str, Tensor]:
        """``personalized`` (the chosen predictor) and the other one under its own name."""
        logits = self._logits(x)
        other = "prototype" if self.predict_by == "head" else "head"
        return {"personalized": logits[self.predict_by], other: logits[other]}

    # ----------------------------------------------------------------- training
    def prototype_loss(self, features: Tensor, y: Tensor) -> Tensor:
        """MSE between features and their class's global prototype (0 where there is none)."""
        has = self.prototype_mask[y].unsqueeze(1).to(features.dtype)
        target = self.global_prototypes[y].to(features.dtype)
        return ((features - target).pow(2) * has).sum() / features.numel()

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        features = self.model.encoder(x)
        ce = F.cross_entropy(self.model.head(features), y)
        proto = self.prototype_loss(features, y)
        loss = ce + self.lamda * proto
        self.log("prototype_loss", proto)
        self.log("train_loss", loss)
        return loss


class PrototypeMean(WeightedMean):
    """FedProto's server rule: next round's message is the per-class count-weighted mean of the
    clients' prototypes, ``{"prototypes": (U, K), "counts": (U,)}`` with total counts per class
    and zero rows for classes no client has (the shared state, empty for FedProto, is averaged
    as usual). Payloads are gathered in client order, so several processes give the same mean.
    """

    replaceable = False

    def begin_round(self, round_idx: int) -> None:
        super().begin_round(round_idx)
        self.payloads: dict[int, dict[str, Tensor]] = {}

    def add(self, report: Report) -> None:
        super().add(report)
        if "prototypes" in report.payload:
            self.payloads[report.client_id] = report.payload

    def end_round(self, collectives: Collectives) -> None:
        super().end_round(collectives)
        payloads = list(collectives.gather_by_client(self.payloads).values())
        if payloads:
            self.message = class_mean(payloads)


def class_mean(payloads: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    """Per-class count-weighted mean of ``{"prototypes": (U, K), "counts": (U,)}`` payloads."""
    counts = torch.stack([p["counts"] for p in payloads])  # (clients, U)
    prototypes = torch.stack([p["prototypes"] for p in payloads])  # (clients, U, K)
    total = counts.sum(0)
    weighted = (prototypes * counts.unsqueeze(-1)).sum(0)
    return {"prototypes": weighted / total.clamp_min(1).unsqueeze(1), "counts": total}
