"""The round protocol: the server side of every federated run, simulated or deployed.

Each round RoundProtocol samples the participants and those that will drop
(fedlight.core.seeding), asks the server rule what each participant downloads, hands these
tasks to a ClientEngine (the engine that carries out the clients' work: engines/sequential.py
trains them in this process, fedlight.flower's engine sends them to Flower SuperNodes), folds
every result into the rule with its aggregation weight, ends the round across processes,
decides whether the round is evaluated, pools the clients' scores with the global model's and
returns the round's row. FederatedTrainer drives it round after round and owns the run folder
and its checkpoints, so every engine writes the same rows, names and checkpoints.

What counts as a dropped client: a participant drawn by trainer.drop_rate (it trains, its
result is discarded), and a participant whose engine reports a ClientFailure (a SuperNode that
did not answer or answered with an error). Both are left out of the reduction and counted in
the row's dropped column. The simulator's SequentialEngine never reports a failure: an exception
while training a simulated client is a fault of the code and stops the run (the run folder is
kept once a round is written).

What counts as a refused update: a result that cannot be trusted into the reduction (see
update_problem: the state's keys and shapes against the state sent, finite values, a
non-negative finite weight; a result of a client not asked this round or a second result of
one client; an engine's RefusedUpdate, e.g. a Flower reply naming another round). It is left
out like a dropped client, named with its cause in one line on stderr, kept in
RoundProtocol.refusals and counted in the row's refused column; a round left with no accepted
update is skipped (the rule keeps its state), never averaged from nothing. The check guards
every engine, the simulator's included: an engine bug cannot slip a wrong shape or a NaN into
the global model.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from fedlight.clients.base import FederatedClient
from fedlight.core.messages import (
    ClientEngine,
    ClientFailure,
    ClientResult,
    Score,
    TrainTask,
    state_bytes,
)
from fedlight.core.rules import Report, ServerRule, aggregation_weight
from fedlight.core.seeding import drop_clients, sample_clients
from fedlight.federation.evaluation import Evaluator
from fedlight.federation.processes.collectives import Distributed


class RoundGradScale:
    """The fp16 loss scale of a round (precision: 16-mixed), as the server side keeps it.

    Every client of round r starts from the same scale S_r (growth counter at 0) and S_{r+1}
    is the smallest scale any of them ended with (a min over the round's results and across
    processes: exact and independent of who trained whom, in which order, on which engine).
    value is None without a scaler; checkpoints keep it, so resumed runs match.
    """

    def __init__(self, value: float | None) -> None:
        self.value = value

    def end_round(self, ended: Iterable[float | None], dist: Distributed) -> None:
        if self.value is None:
            return
        smallest = dist.reduce_min(min((v for v in ended if v is not None), default=math.inf))
        if math.isfinite(smallest):
            self.value = smallest

    def load(self, value: float | None) -> None:
        if value is not None and self.value is not None:
            self.value = float(value)


@dataclass
class RefusedUpdate(ClientFailure):
    """A participant's result the server refused to aggregate; reason says why (counted as
    dropped and as refused)."""


def update_problem(task: TrainTask, result: ClientResult) -> str | None:
    """Why result cannot be aggregated as the answer to task, in a few words; None if it can.

    Checked: the uploaded state has exactly the keys of the shared state sent, each with its
    shape; every floating value of the state and the payload is finite; the weight is finite
    and non-negative; the summed training loss is finite.
    """
    state, sent = result.upload.state, task.shared
    missing, unexpected = sorted(set(sent) - set(state)), sorted(set(state) - set(sent))
    if missing or unexpected:
        return (f"its state's keys differ from the state sent (missing: {few(missing)}; "
                f"unexpected: {few(unexpected)})")
    for key, value in state.items():
        if not isinstance(value, Tensor):
            return f"state entry {key!r} is a {type(value).__name__}, not a tensor"
        if tuple(value.shape) != tuple(sent[key].shape):
            return f"{key!r} has shape {tuple(value.shape)}, expected {tuple(sent[key].shape)}"
    where = non_finite(state) or non_finite(result.upload.payload, "payload ")
    if where:
        return f"{where} has non-finite values"
    weight = result.upload.weight
    if not (isinstance(weight, (int, float)) and math.isfinite(weight) and weight >= 0):
        return f"its weight {weight!r} is not a finite non-negative number"
    if not math.isfinite(float(result.loss_sum)):
        return "its training loss is not finite"
    return None


def few(names: list[str], shown: int = 3) -> str:
    """Up to ``shown`` names, and how many more."""
    if not names:
        return "none"
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(repr(n) for n in names[:shown]) + more


def non_finite(obj: Any, prefix: str = "") -> str | None:
    """The first place (key path) in a nested structure of tensors that holds a NaN or an
    Inf; None if every floating tensor is finite (checked with one device sync)."""
    places = dict(floating_tensors(obj, prefix))
    if not places:
        return None
    flags = [torch.isfinite(t).all() for t in places.values()]
    finite = torch.stack([flag.to(flags[0].device) for flag in flags]).cpu()
    if bool(finite.all()):
        return None
    return list(places)[int((~finite).nonzero()[0])]


def floating_tensors(obj: Any, place: str) -> Iterator[tuple[str, Tensor]]:
    """(key path, tensor) of every floating tensor in a nested structure of tensors."""
    if isinstance(obj, Tensor):
        if obj.is_floating_point():
            yield place.strip() or "a tensor", obj
        return
    items: Iterable[tuple[Any, Any]]
    if isinstance(obj, Mapping):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        return
    for key, value in items:
        yield from floating_tensors(value, f"{place}{key!r} " if not place.strip()
                                    else f"{place.strip()}[{key!r}] ")


def stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class RoundPlan:
    """Who trains in a round, who drops, and whether (and how) the round is evaluated."""

    round_idx: int
    participants: list[int]
    dropped: set[int]
    evaluate: bool
    scores_after_training: bool


class RoundProtocol:
    """The server side of one run's rounds (see the module docstring).

    Args:
        rule: the set-up server rule.
        engine: carries out the clients' work.
        evaluator: scores the global model (rank 0) and pools the clients' scores.
        dist: the collectives of the server side (the processes of a simulated run).
        client: the live client module (scores the global model).
        num_clients, rounds, join_ratio, drop_rate, weighting, seed, eval_every: the run's.
        grad_scale: the fp16 loss scale.
        random_join_ratio: draw each round's share of participants between join_ratio and 1.
    """

    def __init__(self, rule: ServerRule, engine: ClientEngine, evaluator: Evaluator,
                 dist: Distributed, client: FederatedClient, num_clients: int, rounds: int,
                 join_ratio: float, drop_rate: float, weighting: str, seed: int,
                 eval_every: int, grad_scale: RoundGradScale,
                 random_join_ratio: bool = False) -> None:
        self.rule, self.engine, self.evaluator, self.dist = rule, engine, evaluator, dist
        self.client = client
        self.num_clients, self.rounds, self.join_ratio = num_clients, rounds, join_ratio
        self.drop_rate, self.weighting, self.seed = drop_rate, weighting, seed
        self.eval_every, self.grad_scale = eval_every, grad_scale
        self.random_join_ratio = random_join_ratio
        self.keep_from = 0  # the newest checkpointed round (see TrainTask.keep_from)
        #: called with (clients done, clients) as this process's clients of a round finish
        self.on_client_done: Callable[[int, int], None] | None = None
        #: every refused update of the run so far: {"round", "client", "cause"}
        self.refusals: list[dict[str, Any]] = []
        #: prints one line (a refused update, a skipped round)
        self.warn: Callable[[str], None] = stderr_line

    def plan(self, round_idx: int) -> RoundPlan:
        """The participants, the dropped and the evaluation decision of round_idx."""
        participants = sample_clients(self.num_clients, self.join_ratio, self.seed, round_idx,
                                      self.random_join_ratio)
        evaluate = (round_idx + 1) % self.eval_every == 0 or round_idx + 1 == self.rounds
        return RoundPlan(round_idx, participants,
                         set(drop_clients(participants, self.drop_rate, self.seed, round_idx)),
                         evaluate, evaluate and self.client.evaluate_after_local_training)

    def tasks(self, plan: RoundPlan) -> Iterator[TrainTask]:
        """One task per participant this process serves, each with the rule's download."""
        for client_id in self.dist.owned(plan.participants):
            shared, message = self.rule.download(client_id)
            yield TrainTask(client_id, plan.round_idx, shared, message,
                            plan.scores_after_training, self.grad_scale.value, self.keep_from)

    def run_round(self, round_idx: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Train and reduce round round_idx; returns its training columns (train_loss, bytes,
        dropped, seconds, train/*) and, on evaluated rounds, the row to write."""
        started = time.perf_counter()
        plan = self.plan(round_idx)
        self.rule.begin_round(round_idx)
        stats: dict[int, dict[str, Any]] = {}
        scores: dict[int, dict[str, Score]] = {}
        ended: list[float | None] = []
        tasks = {}
        for task in self.tasks(plan):
            tasks[task.client_id] = task
        accepted = 0
        for done, outcome in enumerate(self.engine.train(list(tasks.values())), 1):
            if self.on_client_done is not None:
                self.on_client_done(done, len(tasks))
            client_id = outcome.client_id
            if client_id not in tasks or client_id in stats:
                self.refuse(round_idx, RefusedUpdate(
                    client_id, "a second result" if client_id in stats
                    else "not a participant of the round"))
                continue
            sent = state_bytes(tasks[client_id].shared) + state_bytes(tasks[client_id].message)
            stats[client_id] = {"bytes_down": sent, "bytes_up": 0, "failed": True}
            if isinstance(outcome, ClientResult):
                problem = update_problem(tasks[client_id], outcome)
                if problem is not None:
                    outcome = RefusedUpdate(client_id, problem)
            if isinstance(outcome, RefusedUpdate):
                stats[client_id]["refused"] = True
                self.refuse(round_idx, outcome)
            if isinstance(outcome, ClientFailure):
                continue
            stats[client_id].update(loss=outcome.loss_sum, steps=outcome.steps,
                                    logs=outcome.logs, failed=client_id in plan.dropped)
            ended.append(outcome.loss_scale)
            if client_id not in plan.dropped:  # a dropped client trained but never reports
                upload = outcome.upload
                self.rule.add(Report(client_id, upload.state,
                                     aggregation_weight(upload.weight, self.weighting),
                                     upload.payload))
                stats[client_id]["bytes_up"] = state_bytes(upload.state) + state_bytes(
                    upload.payload)
                accepted += 1
            if plan.scores_after_training:
                scores[client_id] = outcome.scores
        # the rule reduces only if some process accepted an update: a round whose every
        # update was refused or lost keeps the rule's state (max over processes, as -min(-x))
        if -self.dist.reduce_min(-float(accepted)) > 0:
            self.rule.end_round(self.dist)
        elif tasks:
            self.warn(f"fedlight: round {round_idx + 1} skipped: no update was accepted")
        self.grad_scale.end_round(ended, self.dist)
        row = round_stats(self.dist.gather_by_client(stats), self.dist.device)
        if not (self.drop_rate or row["dropped"]):
            del row["dropped"]  # the column only where clients can drop
        if not row["refused"]:
            del row["refused"]  # the column only where an update was refused
        row["seconds"] = time.perf_counter() - started
        if not plan.evaluate:
            return row, None
        metrics = self.evaluate(round_idx, scores if plan.scores_after_training else None)
        full = {"round": round_idx + 1, **metrics, **row}
        full.update(self.rule.round_metrics(round_idx + 1))
        return row, full

    def refuse(self, round_idx: int, refusal: RefusedUpdate) -> None:
        """Leave refusal's update out: one line on stderr, kept in refusals."""
        self.refusals.append({"round": round_idx + 1, "client": refusal.client_id,
                              "cause": refusal.reason})
        self.warn(f"fedlight: round {round_idx + 1}: the update of client {refusal.client_id} "
                  f"was refused: {refusal.reason}")

    def evaluate(self, round_idx: int,
                 after_training: Mapping[int, dict[str, Score]] | None) -> dict[str, Any]:
        """The global model's scores and every client's, pooled; clients are scored by the
        engine on the model the rule would send them, unless after_training has their scores
        from right after local training."""
        if after_training is None:
            downloads = {i: self.rule.download(i)[0]
                         for i in self.dist.owned(range(self.num_clients))}
            after_training = self.engine.evaluate(round_idx, downloads)
        return self.evaluator.evaluate(self.client, self.rule, round_idx, after_training)


def round_stats(stats: Mapping[int, Mapping[str, Any]], device: torch.device) -> dict[str, Any]:
    """Train loss, bytes, dropped count and logged values of a round, accumulated in client-id
    order (so the figures do not depend on which process or engine trained which client).
    Logged values are averaged over the reporting clients."""
    loss = torch.zeros((), device=device)
    steps = 0
    logs: dict[str, list[Tensor]] = {}
    for entry in stats.values():
        if entry["failed"]:
            continue
        loss += entry["loss"]
        steps += entry["steps"]
        for name, value in entry["logs"].items():
            if name != "train_loss":  # already the round's train_loss column
                logs.setdefault(name, []).append(torch.as_tensor(value))
    row: dict[str, Any] = {
        "train_loss": float(loss) / max(steps, 1),
        "bytes_up": sum(e["bytes_up"] for e in stats.values()),
        "bytes_down": sum(e["bytes_down"] for e in stats.values()),
        "dropped": sum(e["failed"] for e in stats.values()),
        "refused": sum(bool(e.get("refused")) for e in stats.values()),
    }
    row.update({f"train/{k}": float(torch.stack(v).mean()) for k, v in logs.items()})
    return row


__all__ = ["RefusedUpdate", "RoundGradScale", "RoundPlan", "RoundProtocol", "round_stats",
           "update_problem"]
