"""Privacy tools: the DLG attack GPFL's privacy analysis runs, and client-level DP (DP-FedAvg).

* :mod:`fedlight.privacy.dlg`: :func:`dlg_attack` (Deep Leakage from Gradients, matched on the
  outputs of a model or feature extractor as in GPFL's Eq. 12), :func:`psnr`, and
  :func:`evaluate_client_leakage` / :func:`client_leakage` that attack one local step of a
  client. ``FederatedTrainer(dlg_every=k, dlg_batches=b)`` logs ``dlg_psnr``.
* :mod:`fedlight.privacy.dp`: :class:`ClientLevelDP` (clip each upload's difference, add
  Gaussian noise to the sum, account epsilon with ``dp-accounting``).
  ``FederatedTrainer(dp_clip_norm=S, dp_noise_multiplier=z, weighting="uniform")`` logs
  ``dp_epsilon``.
"""

from fedlight.privacy.dlg import (
    attack_surface,
    client_leakage,
    dlg_attack,
    evaluate_client_leakage,
    psnr,
)
from fedlight.privacy.dp import ClientLevelDP, DPSum, make_client_dp, noise_generator, update_norm

__all__ = ["ClientLevelDP", "DPSum", "attack_surface", "client_leakage", "dlg_attack",
           "evaluate_client_leakage", "make_client_dp", "noise_generator", "psnr", "update_norm"]
