"""The client side: one fedlight client behind a Flower SuperNode, and the ClientApp.

A SuperNode serves the client id of its node config (partition-id, as Flower's simulation
engine sets it and as a deployment passes it with flower-supernode --node-config
"partition-id=3"). Each train message runs the method's local phases with fedlight's LocalLoop,
exactly as the simulator trains a client: the same seed per (seed, round, client), the same
hooks in the same order, the same upload. The private partition (and, with optimizer_state:
persist, the optimizer state) never leaves the node: it is written after every round to
<state-dir>/run-<Flower run id>/client-<id>/state.pt and read back before the next message, so
a restarted SuperNode keeps its personalization. The state folder is the node config's
state-dir, else the run config's, else ~/.fedlight/flower.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from fedlight.federation.evaluation import Evaluator, Score
from fedlight.federation.local import LocalLoop, LocalResult
from fedlight.federation.population import Population
from fedlight.federation.sampling import derive_seed
from fedlight.flower.codec import pack, pack_scores, record_to_state, state_to_record, unpack
from fedlight.flower.nodes import OwnedClients
from fedlight.flower.setup import FlowerRun, app_config, load_from

DEFAULT_STATE_DIR = "~/.fedlight/flower"

_NODES: dict[tuple[Any, ...], ClientNode] = {}  # the nodes this process serves


class ClientNode:
    """Client client_id of run, with its data, its private state on disk, and the local loop.

    Args:
        run: the parsed config (model, data, trainer options).
        client_id: the fedlight client this node plays.
        state_dir: the folder of this client's private state (created when missing).
    """

    def __init__(self, run: FlowerRun, client_id: int, state_dir: str | Path) -> None:
        num_clients = run.datamodule.num_clients
        if not 0 <= client_id < num_clients:
            raise ValueError(f"client id {client_id} is outside 0..{num_clients - 1} (the "
                             "config's data.num_clients)")
        trainer = run.trainer
        self.run, self.client_id = run, client_id
        self.file = Path(state_dir).expanduser() / "state.pt"
        dist = OwnedClients(trainer.fabric, [client_id])
        self.population = Population(
            run.datamodule, dist, run.initial_private, "memory", self.file.parent,
            trainer.rounds, trainer.join_ratio, trainer.batch_size)
        self.loop = LocalLoop(trainer.fabric, trainer.batch_size, **trainer.local_options)
        self.evaluator = Evaluator(trainer.fabric, dist, self.population, self.loop, (),
                                   trainer.eval_batch_size, trainer.seed)

    # ----------------------------------------------------------------- the two tasks
    def train(self, round_idx: int, shared: dict[str, torch.Tensor], message: dict[str, Any],
              score: bool = False) -> tuple[LocalResult, dict[str, float], dict[str, Score]]:
        """One round of local training; returns the local result (its upload is what leaves
        the node), the logged values and, when score is set, the scores right after training
        (methods that evaluate after local training)."""
        self.restore()
        model, client_id, trainer = self.run.model, self.client_id, self.run.trainer
        result = self.population.train(
            model, self.loop, client_id, round_idx, shared, message,
            derive_seed(trainer.seed, round_idx, client_id), trainer.local_epochs)
        self.save()
        logs = {k: float(v) for k, v in model.pop_federated_logs().items()}
        scores = self.evaluator.score_client(model, client_id, round_idx) if score else {}
        return result, logs, scores

    def evaluate(self, round_idx: int, shared: dict[str, torch.Tensor]) -> dict[str, Score]:
        """Scores of this client's model (shared from the server, private from disk) on its
        local test split, after its evaluation phases if the method has any."""
        self.restore()
        return self.evaluator.score_client(self.run.model, self.client_id, round_idx, shared)

    # ----------------------------------------------------------------- the disk
    def save(self) -> None:
        """Write the private state, optimizer state and participation count (atomically)."""
        population, client_id = self.population, self.client_id
        self.file.parent.mkdir(parents=True, exist_ok=True)
        partial = self.file.with_suffix(".partial")
        torch.save({"private": population.states[client_id],
                    "optimizer": population.optimizer_states.get(client_id),
                    "participations": population.participations[client_id]}, partial)
        os.replace(partial, self.file)

    def restore(self) -> None:
        """Read what save wrote (nothing to read before the client's first round)."""
        if not self.file.is_file():
            return
        saved = torch.load(self.file, map_location="cpu", weights_only=False)  # our own file
        if set(saved["private"]) != set(self.run.initial_private):
            raise ValueError(f"{self.file} holds the private state of another model (keys "
                             f"{sorted(saved['private'])[:3]}...); give this run its own state-dir")
        self.population.states[self.client_id] = saved["private"]
        if saved["optimizer"]:
            self.population.optimizer_states[self.client_id] = saved["optimizer"]
        self.population.participations[self.client_id] = saved["participations"]


def client_id_of(context: Context) -> int:
    """The fedlight client id a SuperNode plays: its node config's partition-id."""
    if "partition-id" not in context.node_config:
        raise ValueError("the SuperNode has no partition-id in its node config; start it with "
                         "--node-config \"partition-id=<fedlight client id>\"")
    return int(context.node_config["partition-id"])


def node_of(context: Context, settings: dict[str, Any]) -> ClientNode:
    """The ClientNode of this SuperNode in this run (built once per process and client)."""
    client_id = client_id_of(context)
    root = context.node_config.get("state-dir") or settings.get("state-dir") or DEFAULT_STATE_DIR
    folder = Path(str(root)).expanduser() / f"run-{context.run_id}" / f"client-{client_id}"
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

    def node_for(context: Context) -> ClientNode:
        return node_of(context, app_config(context.run_config, config=config,
                                           overrides=overrides, state_dir=state_dir))

    @app.query()
    def query(message: Message, context: Context) -> Message:
        record = ConfigRecord({"client-id": client_id_of(context)})
        return Message(RecordDict({"client": record}), reply_to=message)

    @app.train()
    def train(message: Message, context: Context) -> Message:
        node = node_for(context)
        task = message.content["task"]
        _check_addressee(node, task)
        result, logs, scores = node.train(
            int(task["round"]), record_to_state(message.content["arrays"]),
            unpack(task["message"]), bool(task["score"]))
        upload = result.upload
        reply = RecordDict({
            "arrays": state_to_record(upload.state),
            "upload": ConfigRecord({"weight": float(upload.weight),
                                    "payload": pack(upload.payload)}),
            "stats": ConfigRecord({"loss_sum": float(result.loss_sum), "steps": result.steps,
                                   "logs": pack(logs), "scores": pack_scores(scores)}),
        })
        return Message(reply, reply_to=message)

    @app.evaluate()
    def evaluate(message: Message, context: Context) -> Message:
        node = node_for(context)
        task = message.content["task"]
        _check_addressee(node, task)
        scores = node.evaluate(int(task["round"]), record_to_state(message.content["arrays"]))
        stats = ConfigRecord({"scores": pack_scores(scores)})
        return Message(RecordDict({"stats": stats}), reply_to=message)

    return app


def _check_addressee(node: ClientNode, task: ConfigRecord) -> None:
    if int(task["client-id"]) != node.client_id:
        raise ValueError(f"a message for client {task['client-id']} reached the SuperNode of "
                         f"client {node.client_id}")


__all__ = ["ClientNode", "build_client_app", "client_id_of", "node_of"]
