"""FedPer: Arivazhagan, Aggarwal, Singh and Choudhary, "Federated Learning with Personalization
Layers", arXiv:1912.00818 (2019).

The network is cut into base layers, shared and averaged by the server as in FedAvg, and
personalization layers that each client keeps. Every client trains the whole network on
cross-entropy each round (base and personalization layers together); only the base layers
leave the client.
"""

from __future__ import annotations

from fedlight.clients.base import FederatedClient


class FedPer(FederatedClient):
    """FedPer client: the encoder (base layers) is shared, the head (personalization layer) is
    private.

    Takes the base client's arguments only. The paper studies ``K_P`` = 1 to 4 personalization
    layers; here ``K_P = 1`` (the backbone's ``head``). Keep more top layers on the client with
    ``extra_private``, e.g. ``["model.encoder.fc.*"]`` for ``K_P = 2`` with the ``cnn``
    backbone. The personalized prediction is the client's own head on the shared encoder; there
    is no global model (no global accuracy column).
    """

    def private_patterns(self) -> list[str]:
        return ["model.head.*"]
