"""fp16 loss scaling on the client side: every client of a round starts from the round's scale
(see protocol.RoundGradScale for how the server side picks it), and whether bfloat16 is native
on a device."""

from __future__ import annotations

from pathlib import Path

import torch
from lightning.fabric import Fabric

from fedlight.compat import restart_growth


def native_bf16(device: torch.device) -> bool:
    """Whether bfloat16 matrix work runs natively on ``device``: a CUDA GPU that supports it,
    or a CPU reporting AVX512-BF16 or AMX-BF16 (read from /proc/cpuinfo; False elsewhere)."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if device.type != "cpu":
        return False
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def precision_hint(precision: str, device: torch.device) -> str | None:
    """One line for ``bf16-mixed`` on a CPU without native bfloat16, where oneDNN emulates it:
    the 4-layer CNN trained 9.5x slower per sample than in ``32-true`` on such a CPU (AVX2,
    batch 10, one thread; benchmarks/results/cpu_speed.md). None otherwise."""
    if str(precision) not in ("bf16-mixed", "bf16") or device.type != "cpu" or native_bf16(
            device):
        return None
    return ("fedlight: this CPU has no native bfloat16 (avx512_bf16 / amx_bf16), so bf16-mixed "
            "is emulated and several times slower than 32-true here")


class ClientGradScale:
    """The loss scale of Fabric's GradScaler (precision: 16-mixed on GPU) around one client's
    local training.

    Fabric's precision plugin holds one GradScaler per process, and the optimizer is rebuilt
    for every client and phase. Kept running across clients, the scale a client starts from
    would depend on which clients its process trained before it (so on the number of processes,
    on the order of training and on the engine); reset for every client, each local training
    would again waste its first steps backing off from 2**16. So each client starts from the
    scale the server side sends (start) and reports the scale it ended with (end). Without a
    scaler (32-bit, bf16) both are no-ops and the scale is None.
    """

    def __init__(self, fabric: Fabric) -> None:
        self.scaler = getattr(fabric.strategy.precision, "scaler", None)

    @property
    def initial(self) -> float | None:
        """The scaler's scale before any training (the run's first round starts from it)."""
        return float(self.scaler.get_scale()) if self.scaler is not None else None

    def start(self, value: float | None) -> None:
        """Start a client's training from scale value, growth counter at 0."""
        if self.scaler is not None and value is not None:
            restart_growth(self.scaler, value)

    def end(self) -> float | None:
        """The scale after a client's training."""
        return float(self.scaler.get_scale()) if self.scaler is not None else None


__all__ = ["ClientGradScale", "native_bf16", "precision_hint"]
