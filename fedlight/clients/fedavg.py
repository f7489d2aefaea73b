"""FedAvg: McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized
Data", AISTATS 2017 (arXiv:1602.05629).

Every client runs local SGD on cross-entropy from the received global model; the server takes
the sample-weighted mean of all parameters and buffers. Personalized accuracy of FedAvg is the
global model scored on each client's local test split.
"""

from fedlight.clients.base import FederatedClient


class FedAvg(FederatedClient):
    """FedAvg client: the base class's defaults, everything shared.

    Pass ``extra_private`` to keep part of the model on the clients (``["model.head.*"]`` gives
    FedPer's partition without a separate class).
    """
