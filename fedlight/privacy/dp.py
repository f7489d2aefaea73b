"""Client-level DP (DP-FedAvg): the math and the server rule live in
:mod:`fedlight.federation.server.dp` (a server rule is part of the engine); this module keeps
the ``fedlight.privacy.dp`` import path for users."""

from fedlight.federation.server.dp import (
    ClientLevelDP,
    DPFedAvg,
    DPSum,
    noise_generator,
    update_norm,
)

__all__ = ["ClientLevelDP", "DPFedAvg", "DPSum", "noise_generator", "update_norm"]
