"""fp16 loss scaling on the client side: every client of a round starts from the round's scale
(see protocol.RoundGradScale for how the server side picks it)."""

from __future__ import annotations

from lightning.fabric import Fabric

from fedlight.compat import restart_growth


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


__all__ = ["ClientGradScale"]
