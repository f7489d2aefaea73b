"""Privacy tools: the DLG attack GPFL's privacy analysis runs. Client-level DP (DP-FedAvg) is a
server rule: :mod:`fedlight.server.dp`.

* :mod:`fedlight.privacy.dlg`: :func:`dlg_attack` (Deep Leakage from Gradients, matched on the
  outputs of a model or feature extractor as in GPFL's Eq. 12), :func:`psnr`, and
  :func:`evaluate_client_leakage` / :func:`client_leakage` that attack one local step of a
  client. ``FederatedTrainer(probes=[DLGProbe(every=k)])`` logs ``dlg_psnr``.
* :mod:`fedlight.server.dp`: ``ClientLevelDP`` (clip each upload's difference, add Gaussian
  noise to the sum, account epsilon with ``dp-accounting``).
  ``server: {class_path: DPFedAvg, init_args: {clip_norm: S, noise_multiplier: z}}`` with
  ``trainer.weighting: uniform`` logs ``dp_epsilon`` (``DPFedAvg`` wraps any mean-type server
  rule).
"""

from fedlight.privacy.dlg import (
    DLGProbe,
    attack_surface,
    client_leakage,
    dlg_attack,
    evaluate_client_leakage,
    psnr,
)

__all__ = ["DLGProbe", "attack_surface", "client_leakage", "dlg_attack", "evaluate_client_leakage",
           "psnr"]
