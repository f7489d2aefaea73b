"""What trains batched, what is scored batched, and which steps keep one shape (padded).

A method qualifies by declaration (``FederatedClient.batchable``, ``sample_weighted``): a
class that overrides a step method declares in its own body that its step can run vmapped
(and that it weights samples), so a new method, or a subclass that changes a step again
without saying so, is safe by default: it trains one client after another (or its padded
steps run eagerly).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from fedlight.clients.base import FederatedClient
from fedlight.federation.training_loop import overrides

#: the methods that make a client's local step: a class overriding one of them declares
#: ``batchable = True`` in its own body when its step can run vmapped (FederatedClient.batchable)
STEP_METHODS = ("training_step", "forward", "configure_optimizers", "optimizer_param_groups",
                "on_round_start", "on_round_end")
#: the methods that make a client's scores (scored batched where undeclared_step allows)
SCORING_METHODS = ("eval_outputs", "forward")
#: the methods whose losses and outputs must honour sample weights for a padded step
#: (FederatedClient.sample_weighted)
SAMPLE_METHODS = ("training_step", "forward")
#: Lightning's hooks of the training loop (none of them runs in a batched step)
LOOP_HOOKS = ("on_train_start", "on_train_end", "on_train_epoch_start", "on_train_epoch_end",
              "on_train_batch_start", "on_train_batch_end", "on_before_zero_grad",
              "on_before_backward", "on_after_backward", "on_before_optimizer_step",
              "configure_gradient_clipping", "lr_scheduler_step", "optimizer_step")
DROPOUT = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout,
           nn.FeatureAlphaDropout)
#: layers whose training output for one sample depends on the other samples of the batch
BATCH_STATISTICS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


def batching_refusal(client: FederatedClient, precision: str, optimizer_state: str,
                     gradient_clip_val: float | None) -> str | None:
    """Why ``client`` cannot train batched in this setting (see the package docstring), or
    None when it can."""
    undeclared = undeclared_step(client)
    if undeclared is not None:
        return undeclared
    for name in LOOP_HOOKS:
        if overrides(client, name):
            return f"{type(client).__name__} overrides the loop hook {name}"
    dropout = next((type(m).__name__ for m in client.modules()
                    if isinstance(m, DROPOUT) and m.p > 0), None)
    if dropout is not None:
        return (f"its model has torch's {dropout}, whose masks come from one global generator "
                "(fedlight.core.noise.Dropout draws per client)")
    if str(precision).startswith("16"):
        return "precision 16-mixed keeps one loss scaler per client"
    if optimizer_state != "fresh":
        return "optimizer_state persist keeps one optimizer state per client"
    if gradient_clip_val is not None:
        return "gradient clipping works on one client's gradients"
    return None


def scoring_refusal(client: FederatedClient) -> str | None:
    """Why the batched engine scores ``client``'s clients one after another (its evaluation
    phases fine-tune each client first; ``eval_outputs`` overridden without a ``batchable``
    declaration), or None when it scores them together."""
    if client.evaluation_phases():
        return f"{type(client).__name__} fine-tunes each client before scoring it"
    return undeclared_step(client, SCORING_METHODS)


def padding_refusal(client: FederatedClient) -> str | None:
    """Why a client's smaller last batch cannot be padded to the group's batch size with
    samples of weight 0 (its model has BatchNorm, whose batch statistics would see the
    padding; its step does not declare ``sample_weighted``), or None when it can: then every
    step of a group has one shape."""
    norm = next((type(m).__name__ for m in client.modules()
                 if isinstance(m, BATCH_STATISTICS)), None)
    if norm is not None:
        return f"its model has {norm}, whose batch statistics would see the padding"
    return undeclared_step(client, SAMPLE_METHODS, "sample_weighted")


def undeclared_step(client: FederatedClient, methods: Sequence[str] = STEP_METHODS,
                    declaration: str = "batchable") -> str | None:
    """The first of ``methods`` overridden (by a class, or on the instance) without a
    ``declaration = True`` (``batchable``, ``sample_weighted``) in the overriding class's own
    body, as a reason."""
    for name in methods:
        if name in vars(client):
            return f"{type(client).__name__} overrides {name} on the instance"
    for cls in type(client).__mro__:
        if cls is FederatedClient:
            break
        own = vars(cls)
        overridden = [name for name in methods if name in own]
        if overridden and own.get(declaration) is not True:
            return f"{cls.__name__} overrides {overridden[0]} (not declared {declaration})"
    return None


__all__ = ["BATCH_STATISTICS", "DROPOUT", "LOOP_HOOKS", "SAMPLE_METHODS", "SCORING_METHODS",
           "STEP_METHODS", "batching_refusal", "padding_refusal", "scoring_refusal",
           "undeclared_step"]
