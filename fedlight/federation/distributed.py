"""Several processes (and nodes) for one federated run, on Lightning Fabric only.

``FederatedTrainer(devices=k, num_nodes=m)`` runs ``k x m`` processes. Fabric does all the
launching and transport: its DDP strategy starts the processes (``strategy: ddp`` re-runs the
command per rank, which is what ``fedlight fit ... --trainer.devices 2`` does; ``ddp_spawn`` /
``ddp_fork`` start them from Python; under ``torchrun`` or SLURM the processes already exist),
creates the process group (gloo on CPU, NCCL on GPU), and its ``all_reduce`` / ``broadcast``
(plus ``torch.distributed``'s object collectives on Fabric's process group) move the data.

**No DistributedDataParallel.** The ranks train *different* clients at the same time, so the
module must not be wrapped in ``DistributedDataParallel``: DDP would all-reduce the gradients
of unrelated clients at every backward and broadcast its buffers (BatchNorm statistics) from
rank 0 at every forward (``fabric.no_backward_sync`` only stops the first). Fabric builds the
wrapper in ``Strategy.setup_module``, the documented hook of a strategy, so
:class:`FederatedDDPStrategy` is Fabric's ``DDPStrategy`` with that one method returning the
module unchanged. Everything else is Fabric's: launcher, cluster environments, process group,
device placement, the precision plugin (``fabric.setup_module`` still converts and moves the
module and returns a ``_FabricModule``), ``setup_optimizers`` and ``backward``.

**Who trains what.** Client ``i`` belongs to rank ``i % world_size`` (:meth:`Distributed.owner`)
for the whole run: that rank trains it whenever it is sampled, keeps its private state in its
own store, holds its data on its device, and scores it. Every rank draws the same sampled
clients (a pure function of ``(seed, round)``) and trains the ones it owns.

**Results independent of the process count.** Each client's local training is a pure function
of (global state, its private state, ``(seed, round, client)``), so it does not matter which
rank runs it. After local training:

* the weighted sums of the shared states (:class:`~fedlight.federation.aggregate.WeightedSum`,
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
(:class:`SilentRunFolder`). Checkpoints gather every rank's client states to rank 0 and hold
the same ``{client: state}`` dict as a 1-process run; resuming scatters them to their owners
under the new world size, so a run resumes with any number of processes.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from lightning.fabric import Fabric
from lightning.fabric.strategies import DDPStrategy
from torch import Tensor, nn

from fedlight.federation.outputs import RunFolder
from fedlight.federation.store import STORAGES

#: ``trainer.strategy`` values and the start method of Fabric's DDP launcher they select.
STRATEGIES = {"auto": "popen", "ddp": "popen", "ddp_spawn": "spawn", "ddp_fork": "fork",
              "ddp_notebook": "fork"}
_DROP_STREAM = 0x44524F50  # tags the dropout stream apart from the sampling stream


# ===================================================================== launching
class FederatedDDPStrategy(DDPStrategy):
    """Fabric's DDP strategy (launcher, process group, collectives) for per-client training:
    :meth:`setup_module` does not wrap the module in ``DistributedDataParallel``, because the
    ranks train different clients and must never average gradients or buffers."""

    def setup_module(self, module: nn.Module) -> nn.Module:
        return module


def check_scale_options(strategy: str, drop_rate: float, client_state_storage: str) -> None:
    """Raise ``ValueError`` naming the bad value of the trainer's scale-out options."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; valid: {', '.join(STRATEGIES)} (the "
                         "sharding strategies split ONE model across devices; fedlight runs "
                         "different clients on different processes)")
    if not 0 <= drop_rate < 1:
        raise ValueError(f"drop_rate must be in [0, 1), got {drop_rate}")
    if client_state_storage not in STORAGES:
        raise ValueError(f"unknown client_state_storage {client_state_storage!r}; valid: "
                         f"{', '.join(STORAGES)}")


def make_fabric(accelerator: str, devices: int | str, num_nodes: int, precision: str,
                strategy: str = "auto") -> Fabric:
    """The trainer's ``Fabric``: Fabric's own choice for one process, otherwise
    :class:`FederatedDDPStrategy` with the launcher of ``strategy`` (``auto`` = ``ddp``)."""
    options: dict[str, Any] = dict(accelerator=accelerator, devices=devices, num_nodes=num_nodes,
                                   precision=precision, loggers=[])
    if strategy == "auto":
        if isinstance(devices, int) and devices * num_nodes == 1:
            return Fabric(**options)
        if not isinstance(devices, int):  # "auto", "0,1", ...: ask Fabric how many
            fabric = Fabric(**options)
            if fabric.world_size == 1:
                return fabric
    return Fabric(strategy=FederatedDDPStrategy(start_method=STRATEGIES[strategy]), **options)


def needs_launch(fabric: Fabric) -> bool:
    """True when the run has several processes and they are not started yet."""
    return fabric.world_size > 1 and not torch.distributed.is_initialized()


#: What a spawned run sends back to the calling process besides the method's return value.
RETURNED_ATTRIBUTES = ("history", "global_state", "round_seconds", "totals", "last_client_scores")


def launch(trainer: Any, method: str, *args: Any) -> Any:
    """Start the processes with ``fabric.launch`` and call ``trainer.<method>(*args)`` in each.

    Returns rank 0's result. With a spawn / fork launcher the calling process does not take
    part; it receives rank 0's :data:`RETURNED_ATTRIBUTES` (``trainer.history`` and
    ``trainer.global_state`` are then filled as after a 1-process run; the client states are
    in the run's checkpoint).
    """
    fd, path = tempfile.mkstemp(prefix="fedlight-result-", suffix=".pt")
    os.close(fd)
    try:
        result = trainer.fabric.launch(_run_in_process, trainer, method, path, os.getpid(), *args)
        if torch.distributed.is_initialized():  # this process was a rank itself (ddp / torchrun)
            return result
        value, attributes = torch.load(path, map_location="cpu", weights_only=False)
    finally:
        os.unlink(path)
    for name, attribute in attributes.items():
        setattr(trainer, name, attribute)
    return value


def _run_in_process(fabric: Fabric, trainer: Any, method: str, path: str, caller: int,
                    *args: Any) -> Any:
    trainer.fabric = fabric  # the launched (set-up) Fabric of this process
    value = getattr(trainer, method)(*args)
    if fabric.global_rank != 0 or os.getpid() == caller:
        return value
    # A spawned / forked rank 0 hands its results to the caller through a file: Fabric's
    # launcher reads its result pipe only after the workers exit (a result over the pipe's
    # 64 KiB blocks forever), and tensors on a multiprocessing queue are shared through file
    # descriptors that die with the worker.
    attributes = {name: _move(getattr(trainer, name), torch.device("cpu"))
                  for name in RETURNED_ATTRIBUTES if hasattr(trainer, name)}
    torch.save((value, attributes), path)
    return None


# ===================================================================== collectives
class Distributed:
    """This process's place in the run and the collectives of a round. With one process every
    method is the identity and no collective is issued."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self.world_size = fabric.world_size
        self.rank = fabric.global_rank
        self.device = fabric.device

    @property
    def active(self) -> bool:
        return self.world_size > 1

    @property
    def is_writer(self) -> bool:
        """Rank 0: the one process that prints and writes the run folder."""
        return self.rank == 0

    def owner(self, client_id: int) -> int:
        return client_id % self.world_size

    def owns(self, client_id: int) -> bool:
        return self.owner(client_id) == self.rank

    def owned(self, clients: Iterable[int]) -> list[int]:
        """The clients of ``clients`` this process trains / scores, in their order."""
        return [c for c in clients if self.owns(c)]

    # ----------------------------------------------------------------- objects
    def broadcast(self, obj: Any, device: torch.device | None = None) -> Any:
        """Rank 0's ``obj`` on every rank (tensors moved to ``device`` when given)."""
        if not self.active:
            return obj
        obj = self.fabric.broadcast(_move(obj, torch.device("cpu")), src=0)
        return obj if device is None else _move(obj, device)

    def gather_by_client(self, items: Mapping[int, Any]) -> dict[int, Any]:
        """Every rank's ``{client: value}`` merged and ordered by client id, on every rank
        (tensors come back on this process's device)."""
        if not self.active:
            return dict(sorted(items.items()))
        parts: list[Any] = [None] * self.world_size
        torch.distributed.all_gather_object(parts, _move(dict(items), torch.device("cpu")))
        merged: dict[int, Any] = {}
        for part in parts:
            merged.update(part)
        return _move(dict(sorted(merged.items())), self.device)

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
            for (key, shape), piece in zip(entries, flat.split([math.prod(s) for _, s in entries]),
                                           strict=True):
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

    def share_checkpoint(self, load: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Rank 0 runs ``load()`` (so only rank 0 needs to see the file); every rank gets the
        checkpoint with ``client_states`` cut down to the clients it owns under the current
        world size. An error on rank 0 is raised on every rank."""
        if not self.active:
            return load()
        checkpoint: dict[str, Any] | None = None
        message: Any = None
        if self.is_writer:
            try:
                checkpoint = load()
                message = ("ok", {k: v for k, v in checkpoint.items() if k != "client_states"})
            except Exception as error:  # re-raised on every rank below
                message = ("error", error)
        status, payload = self.fabric.broadcast(message, src=0)
        if status == "error":
            raise payload
        shards: list[Any] | None = None
        if checkpoint is not None:
            states = checkpoint["client_states"]
            shards = [{c: s for c, s in states.items() if self.owner(int(c)) == r}
                      for r in range(self.world_size)]
        mine: list[Any] = [None]
        torch.distributed.scatter_object_list(mine, shards, src=0)
        return {**payload, "client_states": mine[0]}


class SilentRunFolder(RunFolder):
    """The run folder as seen by ranks other than 0: it knows its path and writes nothing."""

    def create(self) -> None: ...

    def remove(self) -> None: ...

    def open_loggers(self, hyperparameters: Mapping[str, Any]) -> None: ...

    def log_images(self, images: Mapping[str, Any]) -> None: ...

    def log_table(self, key: str, rows: list[dict[str, Any]]) -> None: ...

    def close(self) -> None: ...

    def write_history(self, history: Sequence[Mapping[str, Any]]) -> None: ...

    def append_row(self, row: Mapping[str, Any], to_loggers: bool = True) -> None: ...

    def read_rows(self) -> list[dict[str, Any]]:
        return []

    def write_json(self, name: str, obj: Any) -> None: ...

    def write_text(self, name: str, text: str) -> None: ...


# ===================================================================== dropout
def drop_clients(participants: Sequence[int], drop_rate: float, seed: int,
                 round_idx: int) -> list[int]:
    """The sampled clients that train but fail to report this round (sorted).

    As PFLlib's ``client_drop_rate``: ``floor((1 - drop_rate) * n)`` of the ``n`` sampled
    clients report, at least one; the others are drawn without replacement from a generator
    seeded by ``(seed, round)`` on its own stream, so the sampled clients do not change with
    ``drop_rate`` and every process draws the same ones.
    """
    count = len(participants)
    if drop_rate <= 0 or count < 2:
        return []
    survivors = max(1, math.floor((1.0 - drop_rate) * count + 1e-9))
    rng = np.random.default_rng([int(seed), int(round_idx), _DROP_STREAM])
    chosen = rng.choice(np.asarray(participants), size=count - survivors, replace=False)
    return sorted(int(c) for c in chosen)


# ===================================================================== fp16 loss scaling
class RoundGradScale:
    """The fp16 loss scale (``precision: 16-mixed`` on GPU) handled per round.

    Fabric's precision plugin holds one ``GradScaler`` per process, and the optimizer is
    rebuilt for every client and phase. Kept running across clients, the scale a client starts
    from would depend on which clients its process trained before it (so on the number of
    processes and on the order of training); reset for every client, each local training would
    again waste its first steps backing off from ``2**16``. Here every client of round ``r``
    starts from the same scale ``S_r`` (growth counter at 0) and ``S_{r+1}`` is the smallest
    scale any of them ended with (an all-reduce ``min``, exact and order-free). Checkpoints
    keep ``S``, so resumed runs match. Without a scaler (32-bit, bf16) every method is a no-op.
    """

    def __init__(self, fabric: Fabric) -> None:
        self.scaler = getattr(fabric.strategy.precision, "scaler", None)
        self.value: float | None = (float(self.scaler.get_scale())
                                    if self.scaler is not None else None)
        self._round_min = math.inf

    def begin_client(self) -> None:
        if self.scaler is None:
            return
        state = self.scaler.state_dict()
        state.update(scale=self.value, _growth_tracker=0)
        self.scaler.load_state_dict(state)

    def end_client(self) -> None:
        if self.scaler is not None:
            self._round_min = min(self._round_min, float(self.scaler.get_scale()))

    def end_round(self, dist: Distributed) -> None:
        if self.scaler is None:
            return
        value = dist.reduce_min(self._round_min)
        if math.isfinite(value):
            self.value = value
        self._round_min = math.inf

    def load(self, value: float | None) -> None:
        if value is not None and self.scaler is not None:
            self.value = float(value)


# ===================================================================== helpers
def _move(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _move(v, device) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_move(v, device) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_move(v, device) for v in obj)
    return obj


__all__ = ["STRATEGIES", "Distributed", "FederatedDDPStrategy", "RoundGradScale",
           "SilentRunFolder", "check_scale_options", "drop_clients", "launch", "make_fabric",
           "needs_launch"]
