"""The client side: one fedlight client behind a Flower SuperNode, and the ClientApp.

A SuperNode serves the client id of its node config (partition-id, as Flower's simulation
engine sets it and as a deployment passes it with flower-supernode --node-config
"partition-id=3"). A train message carries a TrainTask; the node hands it to fedlight's client
runtime (fedlight.federation.runtime: the same seed per (seed, round, client), hooks, upload
and scores as the simulator) and replies with exactly the ClientResult.

The private partition (and, with optimizer_state: persist, the optimizer state) never leaves
the node: after each round it is written to <state-dir>/<run folder name>/client-<id>/ by
fedlight.federation.state.node_files and read back before the next message, so a restarted
SuperNode keeps its personalization. The state folder is the node config's state-dir, else
the run config's, else ~/.fedlight/flower.

The ClientApp parses its config itself (it shares no object with the ServerApp, even in one
process) and keeps the nodes of one run at a time: a message of another run or config
replaces them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from fedlight.config import InstantiatedConfig
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ClientResult, Score, TrainTask
from fedlight.federation.client_setup import set_up_client
from fedlight.federation.processes.collectives import OwnedClients
from fedlight.federation.runtime import ClientRuntime
from fedlight.federation.state.node_files import NodeStateFiles
from fedlight.flower.codec import decode_task, encode_result, get_state, pack_scores
from fedlight.flower.secure import (
    dp_clip_norm,
    is_secure,
    secure_aggregation_mod,
    secure_reply,
    secure_task,
)
from fedlight.flower.settings import app_settings, load_from

DEFAULT_STATE_DIR = "~/.fedlight/flower"


@dataclass
class PreparedModule:
    """A run's client module as every node of a process starts from it: its private state
    right after preparation and the memory format of its image batches."""

    initial_private: dict[str, torch.Tensor]
    memory_format: torch.memory_format


def prepare_module(run: InstantiatedConfig) -> PreparedModule:
    """Set run's client module up as fit does before round 1 (the one client set-up)."""
    trainer = run.trainer
    memory_format = set_up_client(trainer, trainer.fabric, run.model, run.datamodule,
                                  trainer.reinitialize)
    return PreparedModule(run.model.client_state(), memory_format)


class ClientNode:
    """Client client_id of run: its client runtime and its state files.

    Args:
        run: the parsed config (model, data, trainer options).
        client_id: the fedlight client this node plays.
        folder: the folder of this client's private states (created when missing).
        prepared: the run's module as prepared for this process (default: prepared now).
    """

    def __init__(self, run: InstantiatedConfig, client_id: int, folder: str | Path,
                 prepared: PreparedModule | None = None) -> None:
        num_clients = run.datamodule.num_clients
        if not 0 <= client_id < num_clients:
            raise ConfigError(f"client id {client_id} is outside 0..{num_clients - 1} (the "
                              "config's data.num_clients)")
        prepared = prepared or prepare_module(run)
        fabric = run.trainer.fabric
        self.runtime = ClientRuntime(fabric, run.model, run.datamodule,
                                     OwnedClients(fabric, [client_id]),
                                     prepared.initial_private, run.trainer,
                                     prepared.memory_format)
        self.client_id = client_id
        self.files = NodeStateFiles(folder)

    def train(self, task: TrainTask) -> ClientResult:
        """One round of local training from the client's state before task's round."""
        self.restore(before=task.round_idx)
        result = self.runtime.train(task)
        self.files.save(task.round_idx, task.keep_from,
                        self.runtime.population.snapshot(self.client_id))
        return result

    def evaluate(self, round_idx: int, shared: dict[str, torch.Tensor]) -> dict[str, Score]:
        """Scores of this client's model (shared from the server, private from disk as of
        round_idx) on its local test split, after its evaluation phases if it has any."""
        self.restore(before=round_idx + 1)
        return self.runtime.score(self.client_id, round_idx, shared)

    def restore(self, before: int) -> None:
        """The client as it was before round ``before`` (its newest state file)."""
        population = self.runtime.population
        population.restore_client(self.client_id,
                                  self.files.load(before, population.initial_private))


def client_id_of(context: Context) -> int:
    """The fedlight client id a SuperNode plays: its node config's partition-id."""
    if "partition-id" not in context.node_config:
        raise ConfigError("the SuperNode has no partition-id in its node config; start it with "
                          "--node-config \"partition-id=<fedlight client id>\"")
    return int(context.node_config["partition-id"])


@dataclass
class ServedRun:
    """The one run a ClientApp serves at a time: its settings and run key, the config parsed
    for it, the module prepared once, and the nodes built so far (by client id)."""

    key: tuple[str, ...]
    run: InstantiatedConfig
    prepared: PreparedModule
    nodes: dict[int, ClientNode] = field(default_factory=dict)


def build_client_app(config: str | None = None, overrides: str | list[str] | None = None,
                     state_dir: str | None = None) -> ClientApp:
    """The ClientApp: query (which client am I), train, evaluate.

    config, overrides and state_dir, when given, fix those settings; otherwise they are read
    from Flower's run config (config, overrides, state-dir).
    """
    app = ClientApp(mods=[secure_aggregation_mod])  # SecAgg+ for secure rounds only
    served: list[ServedRun] = []  # the run of the last message (replaced by another run's)

    def node_for(context: Context, client: int, run_key: str) -> ClientNode:
        settings = app_settings(context.run_config, config=config, overrides=overrides,
                                state_dir=state_dir)
        key = (str(settings.get("config")), str(settings.get("overrides")), run_key)
        if not served or served[0].key != key:
            run = load_from(settings)
            served[:] = [ServedRun(key, run, prepare_module(run))]
        client_id = client_id_of(context)
        if client != client_id:
            raise ConfigError(f"a message for client {client} reached the SuperNode of client "
                              f"{client_id}")
        current = served[0]
        if client_id not in current.nodes:
            root = (context.node_config.get("state-dir") or settings.get("state-dir")
                    or DEFAULT_STATE_DIR)
            folder = Path(str(root)).expanduser() / run_key / f"client-{client_id}"
            current.nodes[client_id] = ClientNode(current.run, client_id, folder,
                                                  current.prepared)
        return current.nodes[client_id]

    @app.query()
    def query(message: Message, context: Context) -> Message:
        answer: dict[str, int] = {"client-id": client_id_of(context)}
        if "num-partitions" in context.node_config:  # set by Flower's simulation engine
            answer["num-partitions"] = int(context.node_config["num-partitions"])
        return Message(RecordDict({"client": ConfigRecord(answer)}), reply_to=message)

    @app.train()
    def train(message: Message, context: Context) -> Message:
        secure = is_secure(message.content)
        task, run_key = (secure_task if secure else decode_task)(message.content)
        node = node_for(context, task.client_id, run_key)
        result = node.train(task)
        if secure:  # the update goes to secaggplus_mod, which masks it
            run = served[0].run
            return Message(secure_reply(task, result, run.trainer.weighting,
                                        dp_clip_norm(run.server)), reply_to=message)
        return Message(encode_result(result, task.round_idx), reply_to=message)

    @app.evaluate()
    def evaluate(message: Message, context: Context) -> Message:
        task = message.content["task"]
        node = node_for(context, int(task["client-id"]), str(task["run"]))
        scores = node.evaluate(int(task["round"]), get_state(message.content, "arrays"))
        reply = RecordDict({"scores": ConfigRecord({"scores": pack_scores(scores)})})
        return Message(reply, reply_to=message)

    return app


__all__ = ["ClientNode", "PreparedModule", "build_client_app", "client_id_of", "prepare_module"]
