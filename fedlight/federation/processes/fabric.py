"""Lightning Fabric for a federated run: the processes' strategy, launcher and precision.

``FederatedTrainer(devices=k, num_nodes=m)`` runs ``k x m`` processes. Fabric does all the
launching and transport: its DDP strategy starts the processes (``strategy: ddp`` re-runs the
command per rank, which is what ``fedlight fit ... --trainer.devices 2`` does; ``ddp_spawn`` /
``ddp_fork`` start them from Python; under ``torchrun`` or SLURM the processes already exist),
creates the process group (gloo on CPU, NCCL on GPU), and its collectives move the data (see
collectives.py for how the ranks share the work).

**No DistributedDataParallel.** The ranks train *different* clients at the same time, so the
module must not be wrapped in ``DistributedDataParallel``: DDP would all-reduce the gradients
of unrelated clients at every backward and broadcast its buffers (BatchNorm statistics) from
rank 0 at every forward (``fabric.no_backward_sync`` only stops the first). Fabric builds the
wrapper in ``Strategy.setup_module``, the documented hook of a strategy, so
:class:`FederatedDDPStrategy` is Fabric's ``DDPStrategy`` with that one method returning the
module unchanged. Everything else is Fabric's: launcher, cluster environments, process group,
device placement, the precision plugin (``fabric.setup_module`` still converts and moves the
module and returns a ``_FabricModule``), ``setup_optimizers`` and ``backward``.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from lightning.fabric import Fabric
from lightning.fabric.strategies.ddp import DDPStrategy
from torch import nn

from fedlight.federation.processes.cpus import resolve_auto_devices

StartMethod = Literal["popen", "spawn", "fork", "forkserver"]


#: ``trainer.strategy`` values and the start method of Fabric's DDP launcher they select.
STRATEGIES: dict[str, StartMethod] = {"auto": "popen", "ddp": "popen", "ddp_spawn": "spawn",
                                      "ddp_fork": "fork", "ddp_notebook": "fork"}


class FederatedDDPStrategy(DDPStrategy):
    """Fabric's DDP strategy (launcher, process group, collectives) for per-client training:
    :meth:`setup_module` does not wrap the module in ``DistributedDataParallel``, because the
    ranks train different clients and must never average gradients or buffers."""

    def setup_module(self, module: nn.Module) -> nn.Module:  # type: ignore[override]
        return module


#: ``trainer.precision`` values that run every method: 32-bit, or mixed precision (the weights
#: stay float32). The "-true" half / double precisions and transformer-engine are refused:
#: methods compute on their data outside the training step (prototypes, GPFL's conditions,
#: Per-FedAvg's functional steps) with float32 inputs, which a float16 / float64 model rejects.
PRECISIONS = ("32-true", "16-mixed", "bf16-mixed", "32", "16", "bf16")


def make_fabric(accelerator: str, devices: int | str, num_nodes: int, precision: str,
                strategy: str = "auto", workers_per_device: int = 1) -> Fabric:
    """The trainer's ``Fabric``: Fabric's own choice for one process, otherwise
    :class:`FederatedDDPStrategy` with the launcher of ``strategy`` (``auto`` = ``ddp``);
    ``devices: auto`` on CPU is one process per idle core (:func:`resolve_auto_devices`).

    ``workers_per_device`` > 1 starts that many processes on each device (each trains its own
    clients, as with several devices); on GPUs their process group is gloo, because NCCL
    refuses two ranks on one GPU."""
    if devices == "auto" and workers_per_device == 1 and num_nodes == 1:
        devices, strategy = resolve_auto_devices(accelerator, strategy)
    options: dict[str, Any] = dict(accelerator=accelerator, devices=devices, num_nodes=num_nodes,
                                   precision=precision, loggers=[])
    if workers_per_device > 1:
        return _shared_device_fabric(options, strategy, workers_per_device)
    if strategy == "auto":
        if isinstance(devices, int) and devices * num_nodes == 1:
            return Fabric(**options)
        if not isinstance(devices, int):  # "auto", "0,1", ...: ask Fabric how many
            fabric = Fabric(**options)
            if fabric.world_size == 1:
                return fabric
    return Fabric(strategy=FederatedDDPStrategy(start_method=STRATEGIES[strategy]), **options)


def device_fabric(device: torch.device) -> Fabric:
    """A one-process, 32-bit Fabric on ``device``, for work on a module outside a run of the
    trainer (a leakage probe on a bare client, the analyses of a finished run)."""
    devices: int | str = f"{device.index or 0}," if device.type == "cuda" else 1
    return make_fabric(device.type, devices, 1, "32-true")


def _shared_device_fabric(options: dict[str, Any], strategy: str, workers: int) -> Fabric:
    """A Fabric with ``workers`` processes on each of the devices ``options`` select."""
    chosen = Fabric(**{**options, "num_nodes": 1})  # resolves the device list, starts nothing
    devices = list(getattr(chosen.strategy, "parallel_devices", None) or [chosen.device])
    shared = [device for device in devices for _ in range(workers)]
    backend = "gloo" if shared[0].type != "cpu" else None
    rule = FederatedDDPStrategy(parallel_devices=shared, start_method=STRATEGIES[strategy],
                                process_group_backend=backend)
    return Fabric(strategy=rule, **{k: v for k, v in options.items() if k != "devices"})


__all__ = ["PRECISIONS", "STRATEGIES", "FederatedDDPStrategy", "device_fabric", "make_fabric"]
