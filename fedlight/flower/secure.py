"""Secure aggregation of the shared partition with Flower's SecAgg+ (Bell et al., CCS 2020):
the server learns only the weighted sum of the clients' updates, never one client's.

Turned on by the run config (secure-aggregation = true, with secagg-shares: the shares each
client's key is split into, an integer > 2 or a fraction of the round's participants, and
secagg-threshold: the shares needed to reconstruct a dropped client's mask, an integer or a
fraction of the shares) or fedlight flower --secure-aggregation. Each round, the FlowerEngine
runs Flower's SecAggPlusWorkflow over the round's participants and each ClientApp answers
through Flower's secaggplus_mod:

* a client trains its task as usual, then sends its update (uploaded shared state minus the
  state it was sent, one array per key) with its aggregation weight (sample count, or 1 under
  trainer.weighting: uniform) as the SecAgg+ weight: the mod multiplies the update by the
  weight before quantizing and masking it (weights folded in before masking), and the server
  unmasks only the sum and the sum of weights, i.e. the weighted mean of the updates;
* the weighted mean is exact up to SecAgg+'s quantization: each client's weighted update is
  clipped to [-secagg-clipping-range, secagg-clipping-range] (default 8; updates are far
  smaller) and quantized to quantization_bound's step; max_weight is the largest client's
  weight, so no weight overflows;
* every participant's result is then the same aggregate state (sent state plus the mean
  update), so the round protocol's mean of them is the aggregate, the server rule's apply
  (FedAvg's mean, FedAdam's step...) follows, and update_problem checks the aggregate;
* the training loss, step count, logged values, weight and scores travel in clear beside the
  masked vector, as without secure aggregation; the private partition never leaves the node.

Only rules that use nothing but the weighted mean of the shared states can run on it (see
refusal): WeightedMean, the server optimizers (FedAdam, FedAvgM, FedYogi, FedAdagrad) and
DPFedAvg around one of them. With DPFedAvg, each ClientApp clips its own update to the rule's
clip_norm before masking (the server cannot clip what it cannot see); the server's noise on
the sum then gives the model it releases the same (epsilon, delta) guarantee as without
secure aggregation. The server itself sees the sum of clipped updates before its noise: a
guarantee against the server too would need the noise added inside the sum by the clients
(distributed DP), which fedlight does not do.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.client.mod import secaggplus_mod
from flwr.common import (
    Code,
    FitIns,
    FitRes,
    Parameters,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
from flwr.compat.common.recorddict_compat import fitres_to_recorddict, recorddict_to_fitins
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.strategy import Strategy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.serverapp import Grid
from torch import Tensor

from fedlight.core.client import Upload
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ClientFailure, ClientResult, Score, TrainTask
from fedlight.core.rules import ServerRule, aggregation_weight
from fedlight.flower.codec import pack, unpack
from fedlight.server.dp import DPFedAvg
from fedlight.server.fedopt import ServerOptimizer
from fedlight.server.mean import WeightedMean

TASK = "fedlight-task"  # the TrainTask, in the fit instructions' config
RESULT = "fedlight-result"  # the clear part of the result, in the fit result's metrics
QUANTIZATION_RANGE = 2**22  # SecAgg+'s default quantization levels
MODULUS_RANGE = 2**32  # SecAgg+'s default mask modulus


@dataclass(frozen=True)
class SecureAggregation:
    """SecAgg+'s settings: shares (int > 2, or a fraction of the participants), threshold
    (int below shares, or a fraction of them) and the clipping range of a weighted update."""

    shares: int | float = 1.0
    threshold: int | float = 0.5
    clipping_range: float = 8.0

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> SecureAggregation | None:
        """The settings of an app's run config (secure-aggregation, secagg-shares,
        secagg-threshold, secagg-clipping-range); None when secure aggregation is off."""
        if str(settings.get("secure-aggregation", False)).lower() not in ("true", "1"):
            return None
        return cls(number(settings.get("secagg-shares", cls.shares), "secagg-shares"),
                   number(settings.get("secagg-threshold", cls.threshold), "secagg-threshold"),
                   float(settings.get("secagg-clipping-range", cls.clipping_range)))

    def workflow(self, max_weight: float, timeout: float | None) -> SecAggPlusWorkflow:
        try:
            return SecAggPlusWorkflow(self.shares, self.threshold, max_weight=max_weight,
                                      clipping_range=self.clipping_range, timeout=timeout)
        except (TypeError, ValueError) as error:
            raise ConfigError(f"secure aggregation: {error} (secagg-shares={self.shares}, "
                              f"secagg-threshold={self.threshold})") from None

    def quantization_bound(self, weights: Sequence[float], max_weight: float) -> float:
        """The largest error of one coordinate of the weighted mean: each client's weighted
        update is rounded to a step of 2 clipping_range / QUANTIZATION_RANGE."""
        step = 2 * self.clipping_range / (QUANTIZATION_RANGE - 1)
        return len(weights) * step / (sum(weights) / max_weight)


def number(value: Any, name: str) -> int | float:
    """A run config's share count or threshold: an integer, or a fraction in (0, 1]."""
    try:
        text = str(value)
        return int(text) if text.lstrip("-").isdigit() else float(text)
    except ValueError:
        raise ConfigError(f"{name} must be an integer or a fraction, got {value!r}") from None


def refusal(rule: ServerRule, method: str) -> str | None:
    """Why rule cannot run on securely aggregated updates (None: it can): it must use nothing
    but the weighted mean of the shared states."""
    inner = rule.rule if isinstance(rule, DPFedAvg) else rule
    if type(inner) is WeightedMean or isinstance(inner, ServerOptimizer):
        return None
    return (f"secure aggregation gives the server only the weighted mean of the updates, but "
            f"{method}'s server rule {type(inner).__name__} reads each client's own upload "
            "(individual states or payloads); valid: rules on the mean alone (WeightedMean, "
            "FedAdam, FedAvgM, FedYogi, FedAdagrad, DPFedAvg around one of them)")


# ----------------------------------------------------------------- the client side
def secure_aggregation_mod(message: Message, context: Context, call_next: Any) -> Message:
    """Flower's secaggplus_mod for the messages of a secure round; other messages pass."""
    if RECORD_KEY_CONFIGS in message.content.config_records:
        return secaggplus_mod(message, context, call_next)
    return call_next(message, context)


def is_secure(content: RecordDict) -> bool:
    """Whether a train message is a secure round's (fit instructions instead of a task)."""
    return "fitins.config" in content.config_records


def secure_task(content: RecordDict) -> tuple[TrainTask, str]:
    """The TrainTask and run key of a secure round's fit instructions."""
    fields = unpack(recorddict_to_fitins(content, keep_input=True).config[TASK])
    return TrainTask(**fields["task"]), fields["run"]


def secure_reply(task: TrainTask, result: ClientResult, weighting: str,
                 clip_norm: float | None) -> RecordDict:
    """The fit result secaggplus_mod masks: the update as arrays (clipped to clip_norm where
    the run is DP), the aggregation weight as its example count, the rest in clear."""
    if result.upload.payload:
        raise ConfigError("this method sends a payload beside its state, which secure "
                          "aggregation cannot sum; turn secure-aggregation off")
    update = {k: result.upload.state[k].double() - v.double() for k, v in task.shared.items()}
    if clip_norm is not None:
        from fedlight.server.dp import ClientLevelDP

        update = ClientLevelDP(clip_norm, 0.0).clip(update)
    weight = aggregation_weight(result.upload.weight, weighting)
    clear = {"round": task.round_idx, "weight": weight, "loss-sum": float(result.loss_sum),
             "steps": result.steps, "logs": {k: float(v) for k, v in result.logs.items()},
             "scores": {n: dataclasses.asdict(s) for n, s in result.scores.items()},
             "loss-scale": result.loss_scale}
    arrays = [v.cpu().numpy().astype(np.float64) for v in update.values()]
    return fitres_to_recorddict(FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays),
                                       int(round(weight)) if weighting == "samples" else 1,
                                       {RESULT: pack(clear)}), keep_input=True)


def dp_clip_norm(rule: ServerRule | None) -> float | None:
    """The clip norm a ClientApp applies before masking: DPFedAvg's, else none."""
    return rule.dp.clip_norm if isinstance(rule, DPFedAvg) else None


# ----------------------------------------------------------------- the server side
class RoundStrategy(Strategy):
    """The legacy Strategy SecAggPlusWorkflow asks: this round's fit instructions, and the
    aggregate it hands back."""

    def __init__(self, instructions: list[tuple[ClientProxy, FitIns]]) -> None:
        self.instructions = instructions
        self.results: list[tuple[ClientProxy, FitRes]] = []
        self.aggregate: Parameters | None = None

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return None

    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        return self.instructions

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                      failures: Any) -> tuple[Parameters | None, dict[str, Any]]:
        self.results = results
        self.aggregate = results[0][1].parameters if results else None
        return self.aggregate, {}

    def configure_evaluate(self, server_round: int, parameters: Parameters,
                           client_manager: ClientManager) -> list[Any]:
        return []

    def aggregate_evaluate(self, server_round: int, results: Any,
                           failures: Any) -> tuple[float | None, dict[str, Any]]:
        return None, {}

    def evaluate(self, server_round: int, parameters: Parameters) -> None:
        return None


def secure_round(grid: Grid, settings: SecureAggregation, nodes: Mapping[int, int],
                 tasks: Sequence[TrainTask], run_key: str, max_weight: float,
                 timeout: float | None) -> dict[int, ClientResult | ClientFailure]:
    """Run one SecAgg+ round over the tasks' SuperNodes (nodes: client id -> node id): each
    task's client gets the aggregate state as its result, or a failure (no SuperNode, dropped
    during the protocol, or a halted protocol)."""
    outcome: dict[int, ClientResult | ClientFailure] = {
        t.client_id: ClientFailure(t.client_id, "no SuperNode") for t in tasks}
    asked = [t for t in tasks if t.client_id in nodes]
    if not asked:
        return outcome
    run_id = grid.run.run_id
    strategy = RoundStrategy([
        (GridClientProxy(nodes[t.client_id], grid, run_id),
         FitIns(Parameters([], ""), {TASK: pack({"task": dataclasses.asdict(t), "run": run_key})}))
        for t in asked])
    context = LegacyContext(Context(run_id, 0, {}, RecordDict(), {}), strategy=strategy)
    context.state[MAIN_CONFIGS_RECORD] = ConfigRecord({"current_round": tasks[0].round_idx + 1})
    context.state[MAIN_PARAMS_RECORD] = ArrayRecord()
    settings.workflow(max_weight, timeout)(grid, context)
    if strategy.aggregate is None:
        for task in asked:
            outcome[task.client_id] = ClientFailure(
                task.client_id, "secure aggregation halted: too few SuperNodes answered for "
                                "its reconstruction threshold")
        return outcome
    for task in asked:
        outcome[task.client_id] = ClientFailure(task.client_id, "dropped during secure "
                                                                "aggregation")
    state = aggregate_state(tasks[0].shared, parameters_to_ndarrays(strategy.aggregate))
    client_of = {nodes[t.client_id]: t.client_id for t in asked}
    for proxy, fitres in strategy.results:
        client_id = client_of[int(proxy.node_id)]
        clear = unpack(fitres.metrics[RESULT])
        outcome[client_id] = ClientResult(
            client_id, Upload(state, float(clear["weight"]), {}), clear["loss-sum"],
            int(clear["steps"]), clear["logs"],
            {n: Score(**s) for n, s in clear["scores"].items()}, clear["loss-scale"])
    return outcome


def aggregate_state(sent: Mapping[str, Tensor], mean_update: Sequence[np.ndarray]
                    ) -> dict[str, Tensor]:
    """The state sent plus the unmasked weighted mean of the updates, in each key's dtype."""
    state = {}
    for (key, value), update in zip(sent.items(), mean_update, strict=True):
        new = value.double() + torch.from_numpy(np.asarray(update, np.float64)).reshape(
            value.shape).to(value.device)
        state[key] = new.to(value.dtype) if value.is_floating_point() else (
            new.round().to(value.dtype))
    return state


__all__ = ["SecureAggregation", "aggregate_state", "dp_clip_norm", "is_secure", "refusal",
           "secure_aggregation_mod", "secure_reply", "secure_round", "secure_task"]
