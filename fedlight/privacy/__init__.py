"""Privacy tools: the DLG attack GPFL's privacy analysis runs, and client-level DP (DP-FedAvg).

* :mod:`fedlight.privacy.dlg`: :func:`dlg_attack` (Deep Leakage from Gradients, matched on the
  outputs of a model or feature extractor as in GPFL's Eq. 12), :func:`psnr`, and
  :func:`evaluate_client_leakage` / :func:`client_leakage` that attack one local step of a
  client. ``FederatedTrainer(probes=[DLGProbe(every=k)])`` logs ``dlg_psnr``.
* :mod:`fedlight.privacy.dp`: :class:`ClientLevelDP` (clip each upload's difference, add
  Gaussian noise to the sum, account epsilon with ``dp-accounting``).
  ``server: {class_path: DPFedAvg, init_args: {clip_norm: S, noise_multiplier: z}}`` with
  ``trainer.weighting: uniform`` logs ``dp_epsilon`` (:class:`DPFedAvg` wraps any mean-type
  server rule).
"""

from fedlight.privacy.dlg import (
    DLGProbe,
    attack_surface,
    client_leakage,
    dlg_attack,
    evaluate_client_leakage,
    psnr,
)
from fedlight.privacy.dp import ClientLevelDP, DPFedAvg, DPSum, noise_generator, update_norm

__all__ = ["ClientLevelDP", "DLGProbe", "DPFedAvg", "DPSum", "attack_surface", "client_leakage",
           "dlg_attack", "evaluate_client_leakage", "noise_generator", "psnr", "update_norm"]
