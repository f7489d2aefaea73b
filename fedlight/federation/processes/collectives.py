"""This process's place in a multi-process run and the collectives of a round (on Fabric's
process group; see fabric.py for how the processes start).

**Who trains what.** Each client belongs to one rank (:meth:`Distributed.owner`) for the whole
run: that rank trains it whenever it is sampled, keeps its private state in its own store, holds
its data on its device, and scores it. Every rank draws the same sampled clients (a pure
function of ``(seed, round)``) and trains the ones it owns. Owners balance the training data
(:func:`balanced_owners`: largest client first, each to the rank holding the fewest training
samples so far), since a round lasts as long as its busiest rank: on CIFAR-10's 20-client
Dirichlet(0.1) split the busier of 2 ranks holds 1.007x the mean instead of 1.054x with client
``i`` on rank ``i % world_size``.

**Results independent of the process count.** Each client's local training is a pure function
of (global state, its private state, ``(seed, round, client)``), so it does not matter which
rank runs it. After local training:

* the weighted sums of the shared states (:class:`~fedlight.core.rules.WeightedSum`,
  float64, or the DP accumulator) are summed across ranks with ``fabric.all_reduce`` (sum) and
  divided once: the only place where the order of additions differs from a 1-process run
  (``(a + c) + (b + d)`` against ``((a + b) + c) + d`` in float64, then cast to the
  state's dtype);
* everything else a round reduces (payloads and weights for the method's server rule, train
  losses, logged values, bytes, evaluation scores) is gathered with its client id and
  re-accumulated in client-id order, the order of a 1-process run, so it is bit-identical.

Measured on CPU (gloo): with the same number of intra-op threads in every process
(``trainer.threads: 1``), 1- and 2-process runs are identical to the bit (metrics, global
state, client states) for FedAvg, FedAvg + client-level DP, FedPer, FedBN, FedProto (payloads),
MAP (scores after local training), Ditto, GPFL, FedPick and AutoCS, with 25 % dropout and a
join ratio of 0.6: the float64 sums never changed the float32 result. With torch's default
threads (all cores for one process, ``cores / 2`` per process for two), the CPU convolution
kernels themselves round differently; over 2 rounds of all 19 methods the largest relative
difference of any logged number was 2e-7 and every accuracy was identical.

Rank 0 writes the run folder (metrics, plots, checkpoints); the other ranks write nothing
(outputs/folder.py's ``SilentRunFolder``). Checkpoints gather every rank's client states to
rank 0 and hold the same ``{client: state}`` dict as a 1-process run; resuming scatters them
to their owners under the new world size, so a run resumes with any number of processes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from lightning.fabric import Fabric
from torch import Tensor

from fedlight.core.rules import move

#: Checkpoint entries keyed by client id, scattered to the clients' owners on resume.
PER_CLIENT_KEYS = ("client_states", "optimizer_states")


class Distributed:
    """This process's place in the run and the collectives of a round. With one process every
    method is the identity and no collective is issued."""

    def __init__(self, fabric: Fabric, client_sizes: Sequence[int] = ()) -> None:
        """``client_sizes``: each client's training samples, which the owners balance
        (clients past its end belong to rank ``client % world size``)."""
        self.fabric = fabric
        self.world_size = fabric.world_size
        self.rank = fabric.global_rank
        self.device = fabric.device
        self.owners = balanced_owners(client_sizes, self.world_size)

    @property
    def active(self) -> bool:
        return self.world_size > 1

    @property
    def is_writer(self) -> bool:
        """Rank 0: the one process that prints and writes the run folder."""
        return self.rank == 0

    def owner(self, client_id: int) -> int:
        if client_id < len(self.owners):
            return self.owners[client_id]
        return client_id % self.world_size

    def owns(self, client_id: int) -> bool:
        return self.owner(client_id) == self.rank

    def owned(self, clients: Iterable[int]) -> list[int]:
        """The clients of ``clients`` this process trains / scores, in their order."""
        return [c for c in clients if self.owns(c)]

    def share(self, count: int) -> range:
        """This process's items of ``count`` indivisible ones (e.g. evaluation batches):
        every world size-th one from its rank."""
        return range(self.rank, count, self.world_size)

    # ----------------------------------------------------------------- objects
    def broadcast(self, obj: Any, device: torch.device | None = None) -> Any:
        """Rank 0's ``obj`` on every rank (tensors moved to ``device`` when given)."""
        if not self.active:
            return obj
        obj = self.fabric.broadcast(move(obj, torch.device("cpu")), src=0)
        return obj if device is None else move(obj, device)

    def gather_by_client(self, items: Mapping[int, Any]) -> dict[int, Any]:
        """Every rank's ``{client: value}`` merged and ordered by client id, on every rank
        (tensors come back on this process's device)."""
        if not self.active:
            return dict(sorted(items.items()))
        parts: list[Any] = [None] * self.world_size
        torch.distributed.all_gather_object(parts, move(dict(items), torch.device("cpu")))
        merged: dict[int, Any] = {}
        for part in parts:
            merged.update(part)
        ordered: dict[int, Any] = move(dict(sorted(merged.items())), self.device)
        return ordered

    # ----------------------------------------------------------------- numbers
    def reduce_sum(self, total: Any) -> None:
        """Sum a running aggregate (``WeightedSum`` or the DP accumulator: ``sums``, ``count``,
        optionally ``total_weight``, ``dtypes``, ``norms``) across ranks, in place, so that
        ``total.mean()`` gives every rank the round's result. Ranks that trained nobody take
        part with zeros."""
        if not self.active:
            return
        meta = {"count": total.count,
                "layout": [(k, tuple(v.shape), v.dtype) for k, v in total.sums.items()],
                "total_weight": getattr(total, "total_weight", None),
                "dtypes": dict(getattr(total, "dtypes", None) or {}),
                "norms": list(getattr(total, "norms", None) or [])}
        metas: list[Any] = [None] * self.world_size
        torch.distributed.all_gather_object(metas, meta)
        layout = next((m["layout"] for m in metas if m["count"]), None)
        if layout is None:  # nobody reported this round
            return
        device = next(iter(total.sums.values())).device if total.sums else self.device
        sums: dict[str, Tensor] = {}
        for dtype in dict.fromkeys(d for _, _, d in layout):
            entries = [(k, shape) for k, shape, d in layout if d == dtype]
            local = [total.sums[k].reshape(-1) if k in total.sums
                     else torch.zeros(math.prod(shape), dtype=dtype, device=device)
                     for k, shape in entries]
            flat = self.fabric.all_reduce(torch.cat(local), reduce_op="sum")
            assert isinstance(flat, Tensor)
            pieces = torch.split(flat, [math.prod(s) for _, s in entries])
            for (key, shape), piece in zip(entries, pieces, strict=True):
                sums[key] = piece.reshape(shape).to(device)
        total.sums = {k: sums[k] for k, _, _ in layout}
        total.count = sum(m["count"] for m in metas)
        if meta["total_weight"] is not None:
            total.total_weight = math.fsum(m["total_weight"] for m in metas)
        if hasattr(total, "dtypes"):
            for m in metas:
                total.dtypes.update(m["dtypes"])
        if hasattr(total, "norms"):
            total.norms = [n for m in metas for n in m["norms"]]

    def reduce_min(self, value: float) -> float:
        """The smallest ``value`` over the ranks."""
        if not self.active:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=self.device)
        return float(self.fabric.all_reduce(tensor, reduce_op="min")[0])

    # ----------------------------------------------------------------- client states
    def gather_client_states(self, states: Mapping[int, Any]) -> dict[int, Any] | None:
        """Every rank's ``{client: private state}`` on rank 0, ordered by client id (``None``
        on the other ranks)."""
        if not self.active:
            return dict(sorted(states.items()))
        parts: list[Any] | None = [None] * self.world_size if self.is_writer else None
        torch.distributed.gather_object(dict(states), parts, dst=0)
        if parts is None:
            return None
        merged: dict[int, Any] = {}
        for part in parts:
            merged.update(part)
        return dict(sorted(merged.items()))

    def merge_participations(self, participations: Sequence[int]) -> list[int]:
        """Each client's participation count as kept by its owner (every rank counts only the
        clients it trains)."""
        if not self.active:
            return list(participations)
        parts: list[Any] = [None] * self.world_size
        torch.distributed.all_gather_object(parts, list(participations))
        return [int(parts[self.owner(i)][i]) for i in range(len(participations))]

    def from_writer(self, compute: Callable[[], Any]) -> Any:
        """Rank 0's ``compute()`` on every rank; an exception raised by it on rank 0 is raised
        on every rank (so no rank waits for a collective that rank 0 never joins)."""
        if not self.active:
            return compute()
        message: Any = None
        if self.is_writer:
            try:
                message = ("ok", compute())
            except Exception as error:  # re-raised on every rank below
                message = ("error", error)
        status, payload = self.fabric.broadcast(message, src=0)
        if status == "error":
            raise payload
        return payload

    def from_owner(self, client_id: int, compute: Callable[[], Any]) -> Any:
        """``compute()`` run by the process that owns ``client_id``, on every process."""
        if not self.active:
            return compute()
        mine = {client_id: compute()} if self.owns(client_id) else {}
        return self.gather_by_client(mine)[client_id]

    def share_checkpoint(self, load: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Rank 0 runs ``load()`` (so only rank 0 needs to see the file); every rank gets the
        checkpoint with its per-client entries (:data:`PER_CLIENT_KEYS`) cut down to the
        clients it owns under the current world size. An error on rank 0 is raised on every
        rank."""
        if not self.active:
            return load()
        loaded: dict[str, Any] = {}

        def load_common_part() -> dict[str, Any]:
            loaded.update(load())
            return {k: v for k, v in loaded.items() if k not in PER_CLIENT_KEYS}

        payload = self.from_writer(load_common_part)
        shards: list[Any] | None = None
        if self.is_writer:
            shards = [{key: {c: s for c, s in loaded[key].items()
                             if self.owner(int(c)) == r} for key in PER_CLIENT_KEYS}
                      for r in range(self.world_size)]
        mine: list[Any] = [None]
        torch.distributed.scatter_object_list(mine, shards, src=0)
        return {**payload, **mine[0]}


def balanced_owners(sizes: Sequence[int], world_size: int) -> list[int]:
    """Each client's rank, so that the ranks hold about as many training samples: clients in
    decreasing size (ties: lower id first), each to the rank with the fewest samples so far
    (ties: lower rank). A pure function of the sizes, so every rank computes the same."""
    load = [0] * world_size
    owners = [0] * len(sizes)
    for client in sorted(range(len(sizes)), key=lambda c: (-sizes[c], c)):
        rank = min(range(world_size), key=lambda r: (load[r], r))
        owners[client] = rank
        load[rank] += sizes[client]
    return owners


class OwnedClients(Distributed):
    """A process that owns exactly the given client ids (a SuperNode owns one, the server of a
    Flower run none); fedlight's Population and Evaluator then load and score only those."""

    def __init__(self, fabric: Fabric, clients: Iterable[int]) -> None:
        super().__init__(fabric)
        self.clients = frozenset(int(c) for c in clients)

    def owns(self, client_id: int) -> bool:
        return client_id in self.clients


__all__ = ["PER_CLIENT_KEYS", "Distributed", "OwnedClients", "balanced_owners"]
