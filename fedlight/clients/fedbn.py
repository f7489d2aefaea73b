"""FedBN: Li, Jiang, Zhang, Kamp and Dou, "FedBN: Federated Learning on Non-IID Features via
Local Batch Normalization", ICLR 2021 (arXiv:2102.07623).

FedAvg in which every BatchNorm layer stays on its client: its affine parameters (weight, bias)
and its running statistics (mean, variance, batch counter) are never uploaded nor averaged.
The server takes the sample-weighted mean of everything else.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from fedlight.clients.base import FederatedClient
from fedlight.core.errors import ConfigError

BATCH_NORMS: tuple[type[nn.Module], ...] = (
    nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm,
)


class FedBN(FederatedClient):
    """FedBN client: every BatchNorm parameter and buffer private, the rest shared.

    Args:
        backbone: a backbone with BatchNorm layers; default ``"cnn_bn"`` (the 4-layer CNN with
            BatchNorm after each conv and the hidden FC; smaller than FedBN's own digits model).
        **kwargs: the base client's arguments (``lr``, ...). The paper trains with SGD,
            lr 0.01, batch 32, 1 local epoch.

    BatchNorm layers are found by module type (``BatchNorm1d/2d/3d``, ``SyncBatchNorm``), never
    by name. Evaluation uses each client's own BatchNorm statistics; there is no complete global
    model, so no global accuracy is reported.

    Raises:
        ValueError: the backbone has no BatchNorm layer (FedBN would be FedAvg).
    """

    def __init__(self, backbone: str = "cnn_bn", **kwargs: Any) -> None:
        super().__init__(backbone=backbone, **kwargs)
        if not self.state_keys_of_type(BATCH_NORMS):
            raise ConfigError(
                f"FedBN needs a backbone with BatchNorm layers, but backbone {backbone!r} has "
                "none; use e.g. 'cnn_bn', 'vgg8_bn' or 'resnet18'"
            )

    def private_patterns(self) -> list[str]:
        return self.state_keys_of_type(BATCH_NORMS)
