"""Local training (the "SingleSet" / "Local" baseline of the pFL papers).

Each client trains its own model on its own data and never communicates: every parameter and
buffer is private, nothing is uploaded, there is no global model.
"""

from fedlight.clients.base import FederatedClient


class Local(FederatedClient):
    """Local-only client: the whole state is private."""

    def private_patterns(self) -> list[str]:
        return ["*"]
