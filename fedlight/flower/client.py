"""The client side: one fedlight client behind a Flower SuperNode, and the ClientApp.

A SuperNode serves the client id of its node config (partition-id, as Flower's simulation
engine sets it and as a deployment passes it with flower-supernode --node-config
"partition-id=3"). A train message carries a TrainTask; the node trains it with the
simulator's own train_client (same seed per (seed, round, client), same hooks, same upload) and
replies with exactly the ClientResult: the upload, the training statistics, the logged values,
and the scores when the task asks for them (methods evaluated right after local training).

The private partition (and, with optimizer_state: persist, the optimizer state) never leaves
the node: after each round it is written to
<state-dir>/<run folder name>/client-<id>/round-<r>.pt and read back before the next message,
so a restarted SuperNode keeps its personalization. Each round's state is its own file, so a
run resumed from an earlier checkpoint restarts every client from its state as of that round;
files no resume can need any more are deleted. The state folder is the node config's
state-dir, else the run config's, else ~/.fedlight/flower.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from fedlight.config import RunConfig
from fedlight.core.errors import ConfigError
from fedlight.federation.evaluation import Evaluator, Score
from fedlight.federation.local import LocalLoop
from fedlight.federation.memory_format import apply_memory_format
from fedlight.federation.population import Population
from fedlight.federation.precision import ClientGradScale
from fedlight.federation.protocol import ClientResult, OwnedClients, TrainTask, private_scores
from fedlight.federation.round import train_client
from fedlight.federation.sampling import derive_seed
from fedlight.federation.setup import prepare_run
from fedlight.flower.codec import (
    decode_task,
    encode_result,
    get_state,
    pack_scores,
)
from fedlight.flower.settings import app_settings, load_from

DEFAULT_STATE_DIR = "~/.fedlight/flower"
_ROUND_FILE = re.compile(r"round-(\d+)\.pt")

_NODES: dict[tuple[Any, ...], ClientNode] = {}  # the nodes this process serves
# id(run) -> the model's initial private state and the memory format of its image batches
_PREPARED: dict[int, tuple[dict[str, torch.Tensor], torch.memory_format]] = {}


def prepared(run: RunConfig) -> tuple[dict[str, torch.Tensor], torch.memory_format]:
    """Prepare run's model and data as fit does before round 1 (once per process); returns the
    model's initial private state and the memory format its image batches must have."""
    if id(run) not in _PREPARED:
        model, trainer = run.model, run.trainer
        prepare_run(model, run.datamodule, trainer.seed, trainer.reinitialize, trainer.threads,
                    trainer.fabric.device)
        trainer.fabric.setup_module(model)
        memory_format = apply_memory_format(model, trainer.memory_format, trainer.fabric.device)
        model.capture_logs(True)
        _PREPARED[id(run)] = model.client_state(), memory_format
    return _PREPARED[id(run)]


class ClientNode:
    """Client client_id of run, with its data, its private states on disk, and the local loop.

    Args:
        run: the parsed config (model, data, trainer options).
        client_id: the fedlight client this node plays.
        folder: the folder of this client's private states (created when missing).
    """

    def __init__(self, run: RunConfig, client_id: int, folder: str | Path) -> None:
        num_clients = run.datamodule.num_clients
        if not 0 <= client_id < num_clients:
            raise ConfigError(f"client id {client_id} is outside 0..{num_clients - 1} (the "
                             "config's data.num_clients)")
        initial_private, memory_format = prepared(run)
        trainer = run.trainer
        self.run, self.client_id = run, client_id
        self.folder = Path(folder).expanduser()
        dist = OwnedClients(trainer.fabric, [client_id])
        self.population = Population(
            run.datamodule, dist, initial_private, "memory", self.folder, trainer.rounds,
            trainer.join_ratio, trainer.batch_size, memory_format)
        self.loop = LocalLoop(trainer.fabric, trainer.batch_size, **trainer.local_options)
        self.evaluator = Evaluator(trainer.fabric, dist, self.population, self.loop, (),
                                   trainer.eval_batch_size, trainer.seed)
        self.grad_scale = ClientGradScale(trainer.fabric)

    # ----------------------------------------------------------------- the two tasks
    def train(self, task: TrainTask) -> ClientResult:
        """One round of local training from the client's state before task's round."""
        self.restore(before=task.round_idx)
        trainer = self.run.trainer
        result = train_client(self.run.model, self.population, self.loop, self.evaluator,
                              self.grad_scale, task,
                              derive_seed(trainer.seed, task.round_idx, self.client_id),
                              trainer.local_epochs, trainer.share_class_counts)
        self.save(task.round_idx, task.keep_from)
        return result

    def evaluate(self, round_idx: int, shared: dict[str, torch.Tensor]) -> dict[str, Score]:
        """Scores of this client's model (shared from the server, private from disk as of
        round_idx) on its local test split, after its evaluation phases if it has any."""
        self.restore(before=round_idx + 1)
        scores = self.evaluator.score_client(self.run.model, self.client_id, round_idx, shared)
        return private_scores(scores, self.run.trainer.share_class_counts)

    # ----------------------------------------------------------------- the disk
    def rounds_saved(self) -> list[int]:
        """The rounds whose state this node holds, oldest first."""
        if not self.folder.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.folder.iterdir()
                      if (m := _ROUND_FILE.fullmatch(p.name)))

    def save(self, round_idx: int, keep_from: int) -> None:
        """Write the state after round_idx (atomically), then delete the states no resume from
        round keep_from or later can need."""
        population, client_id = self.population, self.client_id
        self.folder.mkdir(parents=True, exist_ok=True)
        file = self.folder / f"round-{round_idx}.pt"
        partial = file.with_suffix(".partial")
        torch.save({"private": population.states[client_id],
                    "optimizer": population.optimizer_states.get(client_id),
                    "participations": population.participations[client_id]}, partial)
        os.replace(partial, file)
        saved = self.rounds_saved()
        needed = max((r for r in saved if r < keep_from), default=None)
        for old in saved:
            if needed is not None and old < needed:
                (self.folder / f"round-{old}.pt").unlink(missing_ok=True)

    def restore(self, before: int) -> None:
        """Load the newest state written for a round before before (the initial state when
        there is none)."""
        population, client_id = self.population, self.client_id
        population.states.pop(client_id, None)
        population.optimizer_states.pop(client_id, None)
        population.participations[client_id] = 0
        rounds = [r for r in self.rounds_saved() if r < before]
        if not rounds:
            return
        file = self.folder / f"round-{rounds[-1]}.pt"
        saved = torch.load(file, map_location="cpu", weights_only=False)  # our own file
        if set(saved["private"]) != set(self.population.initial_private):
            raise ConfigError(f"{file} holds the private state of another model (keys "
                             f"{sorted(saved['private'])[:3]}...); give this run its own state-dir")
        population.states[client_id] = saved["private"]
        if saved["optimizer"]:
            population.optimizer_states[client_id] = saved["optimizer"]
        population.participations[client_id] = saved["participations"]


def client_id_of(context: Context) -> int:
    """The fedlight client id a SuperNode plays: its node config's partition-id."""
    if "partition-id" not in context.node_config:
        raise ConfigError("the SuperNode has no partition-id in its node config; start it with "
                         "--node-config \"partition-id=<fedlight client id>\"")
    return int(context.node_config["partition-id"])


def node_of(context: Context, settings: dict[str, Any], run_key: str) -> ClientNode:
    """The ClientNode of this SuperNode in fedlight run run_key (built once per process)."""
    client_id = client_id_of(context)
    root = context.node_config.get("state-dir") or settings.get("state-dir") or DEFAULT_STATE_DIR
    folder = Path(str(root)).expanduser() / run_key / f"client-{client_id}"
    key = (str(settings.get("config")), str(settings.get("overrides")), client_id, str(folder))
    if key not in _NODES:
        _NODES[key] = ClientNode(load_from(settings), client_id, folder)
    return _NODES[key]


def build_client_app(config: str | None = None, overrides: str | list[str] | None = None,
                     state_dir: str | None = None) -> ClientApp:
    """The ClientApp: query (which client am I), train, evaluate.

    config, overrides and state_dir, when given, fix those settings; otherwise they are read
    from Flower's run config (config, overrides, state-dir).
    """
    app = ClientApp()

    def node_for(context: Context, task: ConfigRecord) -> ClientNode:
        node = node_of(context, app_settings(context.run_config, config=config,
                                             overrides=overrides, state_dir=state_dir),
                       str(task["run"]))
        if int(task["client-id"]) != node.client_id:
            raise ConfigError(f"a message for client {task['client-id']} reached the SuperNode "
                             f"of client {node.client_id}")
        return node

    @app.query()
    def query(message: Message, context: Context) -> Message:
        answer: dict[str, int] = {"client-id": client_id_of(context)}
        if "num-partitions" in context.node_config:  # set by Flower's simulation engine
            answer["num-partitions"] = int(context.node_config["num-partitions"])
        return Message(RecordDict({"client": ConfigRecord(answer)}), reply_to=message)

    @app.train()
    def train(message: Message, context: Context) -> Message:
        task, _ = decode_task(message.content)
        result = node_for(context, message.content["task"]).train(task)
        return Message(encode_result(result), reply_to=message)

    @app.evaluate()
    def evaluate(message: Message, context: Context) -> Message:
        task = message.content["task"]
        scores = node_for(context, task).evaluate(int(task["round"]),
                                                  get_state(message.content, "arrays"))
        reply = RecordDict({"scores": ConfigRecord({"scores": pack_scores(scores)})})
        return Message(reply, reply_to=message)

    return app


__all__ = ["ClientNode", "build_client_app", "client_id_of", "node_of", "prepared"]
