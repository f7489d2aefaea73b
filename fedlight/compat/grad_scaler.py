"""A GradScaler's scale restarted, through its state dict (torch.amp)."""

from __future__ import annotations

from typing import Any


def restart_growth(scaler: Any, scale: float) -> None:
    """Set a GradScaler's scale and restart its growth counter: through its state_dict, whose
    growth-counter key is spelled with an underscore (there is no public setter)."""
    state = scaler.state_dict()
    state.update(scale=float(scale), _growth_tracker=0)
    scaler.load_state_dict(state)


__all__ = ["restart_growth"]
