"""The clients one Flower process holds: a SuperNode holds one, the ServerApp none."""

from __future__ import annotations

from collections.abc import Iterable

from lightning.fabric import Fabric

from fedlight.federation.distributed import Distributed


class OwnedClients(Distributed):
    """A single process that owns exactly the given client ids (fedlight's Population and
    Evaluator then load and score only those)."""

    def __init__(self, fabric: Fabric, clients: Iterable[int]) -> None:
        super().__init__(fabric)
        self.clients = frozenset(int(c) for c in clients)

    def owns(self, client_id: int) -> bool:
        return client_id in self.clients


__all__ = ["OwnedClients"]
