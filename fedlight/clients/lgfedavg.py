"""LG-FedAvg: Liang, Liu, Ziyin, Allen, Auerbach, Brent, Salakhutdinov and Morency, "Think
Locally, Act Globally: Federated Learning with Local and Global Representations",
arXiv:2001.01523 (2020).

The mirror image of FedPer: each client keeps its own *local representation* (the lower
layers) and the server averages only the top *global* layers::

    client k: min over (theta_k, w) of CE(w(theta_k(x)), y)      server: w = mean_k w_k
"""

from __future__ import annotations

from fedlight.clients.base import FederatedClient


class LGFedAvg(FederatedClient):
    """LG-FedAvg client: the encoder is private (local representation), the head is shared.

    Takes the base client's arguments only. Choices where the paper leaves room:

    * the cut is the backbone's ``encoder`` / ``head`` split, i.e. one global layer (the paper
      chooses how many top layers are global per model);
    * the paper optionally starts from local models pre-trained with FedAvg and from a
      warm-up of local-only epochs; neither is done here: every client starts from the same
      random initialization and trains encoder and head jointly on cross-entropy each round;
    * its auxiliary objectives for fair representations and its test-time ensemble over
      local models for new devices are not implemented.

    There is no complete global model, so no global accuracy is reported.
    """

    def private_patterns(self) -> list[str]:
        return ["model.encoder.*"]
