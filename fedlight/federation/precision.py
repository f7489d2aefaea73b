"""fp16 loss scaling per round, so results do not depend on which process trains whom."""

from __future__ import annotations

import math
from typing import Any

from lightning.fabric import Fabric


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

    def end_round(self, dist: Any) -> None:
        if self.scaler is None:
            return
        value = dist.reduce_min(self._round_min)
        if math.isfinite(value):
            self.value = value
        self._round_min = math.inf

    def load(self, value: float | None) -> None:
        if value is not None and self.scaler is not None:
            self.value = float(value)


__all__ = ["RoundGradScale"]
