"""Probes: callbacks the trainer runs after each evaluated round, adding metric columns.

A probe measures something about the run without changing it (for example the DLG leakage of
a client's update, fedlight.privacy.DLGProbe). The trainer calls Probe.setup
before the first round (check options there, so a typo fails before any training) and
Probe.on_round_end on every process after each evaluated round; the returned columns are
added to the metrics row. Probes are passed as FederatedTrainer(probes=[...]) or in YAML:

    trainer:
      probes:
        - class_path: DLGProbe
          init_args: {every: 5}
"""

from __future__ import annotations

from typing import Any


class Probe:
    """Base class of probes; both methods are optional."""

    def setup(self, trainer: Any) -> None:
        """Called once before training, with the FederatedTrainer set up."""

    def on_round_end(self, trainer: Any, round_idx: int) -> dict[str, float]:
        """Extra metric columns after evaluated round round_idx (0-based)."""
        return {}


__all__ = ["Probe"]
