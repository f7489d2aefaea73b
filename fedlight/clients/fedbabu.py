"""FedBABU: Oh, Kim and Yun, "FedBABU: Toward Enhanced Representation for Federated Image
Classification", ICLR 2022 (arXiv:2106.06042).

During federated training only the body (encoder) is trained and aggregated; the head keeps its
random initialization, the same on every client, and never receives an update. Personalization
happens at evaluation: each client fine-tunes the received model on its own training data for
tau_f epochs and is scored with the result::

    rounds:     body <- mean of the clients' bodies after local SGD with the head frozen
    evaluation: fine-tune (whole model by default) for tau_f epochs, then score
"""

from __future__ import annotations

from typing import Any

from fedlight.clients.base import FederatedClient
from fedlight.core.client import Phase
from fedlight.core.errors import ConfigError

BODY = "model.encoder.*"
HEAD = "model.head.*"
FINETUNE_PARTS = {"full": None, "head": (HEAD,), "body": (BODY,)}


class FedBABU(FederatedClient):
    """FedBABU client: body-only federated training, fine-tuning at evaluation.

    Args:
        finetune_epochs: tau_f, epochs of fine-tuning before a client is scored (paper: 5),
            >= 0; 0 scores the global model as it is.
        finetune_part: what fine-tuning trains: "full" (body and head, the paper's default),
            "head" or "body" (the paper's ablations).
        **kwargs: the base client's arguments (backbone, lr, ...).

    The local phase "body" trains model.encoder.* only; the head is shared (every client holds
    the same frozen head, so its mean is itself) and the global model is body + the initial
    head. Fine-tuning runs through evaluation_phases (phase "finetune", the same loss and
    learning rate as training); the evaluator scores the fine-tuned copy and throws it away,
    so nothing of it reaches the next round. Global accuracy is the global model without
    fine-tuning.

    Choices where the paper is silent: the fine-tuning batches are drawn from the client's
    training split with the trainer's batch size and an evaluation-only random stream, and the
    fine-tuning optimizer is built fresh (as configure_optimizers, momentum restarting).
    Run alone under a plain lightning.Trainer (phase "train") the whole model trains.
    """

    def __init__(self, finetune_epochs: int = 5, finetune_part: str = "full",
                 **kwargs: Any) -> None:
        if finetune_epochs < 0:
            raise ConfigError(f"finetune_epochs must be >= 0, got {finetune_epochs}")
        if finetune_part not in FINETUNE_PARTS:
            raise ConfigError(f"unknown finetune_part {finetune_part!r}; valid: "
                             f"{', '.join(FINETUNE_PARTS)}")
        super().__init__(**kwargs)
        self.finetune_epochs = finetune_epochs
        self.finetune_part = finetune_part

    def local_phases(self, local_epochs: int) -> list[Phase]:
        """One phase training the body only; the head stays at its initialization."""
        return [Phase("body", local_epochs, trainable=(BODY,))]

    def evaluation_phases(self) -> list[Phase]:
        """tau_f epochs of fine-tuning (finetune_part) before scoring."""
        if self.finetune_epochs == 0:
            return []
        return [Phase("finetune", self.finetune_epochs,
                      trainable=FINETUNE_PARTS[self.finetune_part])]
