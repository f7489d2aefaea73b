"""The Flower engine: carries a round's TrainTasks to the SuperNodes over a Flower Grid and
brings their ClientResults back. The round itself (sampling, dropout, downloads, reduction,
evaluation, the row, checkpoints) is fedlight's RoundProtocol, driven by
FederatedTrainer.federate exactly as in fedlight fit; this module only moves messages.

Which SuperNode plays which client: every SuperNode answers a query message with its
partition-id (and, under Flower's simulation engine, num-partitions). Nodes that join later (a
restarted SuperNode gets a new node id) are asked before every round, and the newest node of a
client replaces the old one. A task whose node is missing, does not answer within
round-timeout, or answers with an error (a killed SuperNode, an exception in the ClientApp)
comes back as a ClientFailure: the client counts as dropped for that round. A reply that
cannot be read, or that answers another round than the one asked (a replayed reply), comes
back as a RefusedUpdate: the round protocol checks every other reply (keys, shapes, finite
values) and refuses it, the client counts as dropped, and the line naming it is printed.

With secure aggregation (fedlight.flower.secure), a round's training runs Flower's SecAgg+
workflow instead: the engine gets only the weighted mean of the updates, and every
participant's result carries that aggregate (the checks then guard the aggregate).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from flwr.app import Message, MessageType, RecordDict
from flwr.serverapp import Grid
from torch import Tensor

from fedlight.core.errors import ConfigError
from fedlight.core.messages import ClientFailure, ClientResult, EngineHost, Score, TrainTask
from fedlight.federation.protocol import RefusedUpdate
from fedlight.flower.codec import (
    decode_result,
    encode_evaluation,
    encode_task,
    reply_round,
    unpack_scores,
)
from fedlight.flower.secure import SecureAggregation, secure_round

NAME = "flower"


def mismatch(num_supernodes: int, num_clients: int) -> ConfigError:
    """The error of a federation whose SuperNode count is not the config's client count."""
    return ConfigError(f"the federation has {num_supernodes} SuperNodes (num-supernodes) but the "
                       f"config has data.num_clients={num_clients}; they must be equal (one "
                       "SuperNode per client)")


class FlowerEngine:
    """The SuperNodes behind grid as a ClientEngine.

    Args:
        grid: the ServerApp's Grid.
        num_clients: the config's data.num_clients.
        discovery_timeout: seconds to wait until every client has a SuperNode.
        round_timeout: seconds to wait for a round's replies (None: until every node answered
            or was reported unavailable by the SuperLink).
        secure: SecAgg+'s settings (None: the updates travel as they are).
        max_weight: the largest aggregation weight a client can have (SecAgg+'s max_weight).
    """

    name = NAME
    holds_clients = False
    resume_hint = ("the same flwr run with --ckpt_path last added to the run config's overrides "
                   "(--run-config \"overrides='... --ckpt_path last'\")")

    def __init__(self, grid: Grid, num_clients: int, discovery_timeout: float = 600.0,
                 round_timeout: float | None = None, secure: SecureAggregation | None = None,
                 max_weight: float = 1.0) -> None:
        self.grid, self.num_clients = grid, num_clients
        self.secure, self.max_weight = secure, max_weight
        self.discovery_timeout, self.round_timeout = discovery_timeout, round_timeout
        self.nodes: dict[int, int] = {}  # fedlight client id -> Flower node id
        self.asked: set[int] = set()  # node ids already asked which client they play
        self.host: EngineHost | None = None

    # ----------------------------------------------------------------- set-up
    def attach(self, host: EngineHost) -> None:
        """Refuse what a Flower run cannot do, then find every client's SuperNode."""
        if host.probes:
            raise ConfigError("trainer.probes are not supported under Flower (a probe needs the "
                             "whole population in one process); valid: none")
        if host.world_size != 1:
            raise ConfigError(f"trainer.devices x num_nodes = {host.world_size} "
                             "processes is not supported under Flower; valid: 1 (start more "
                             "SuperNodes)")
        self.host = host
        self.discover()

    def discover(self) -> None:
        """Ask the nodes until every client has one (or discovery_timeout passes).

        Raises:
            ValueError: the number of SuperNodes and data.num_clients differ (known at once
                under Flower's simulation engine, which tells each node num-partitions, or
                when a node plays a client id outside the federation).
            TimeoutError: some clients have no SuperNode after discovery_timeout seconds.
        """
        deadline = time.monotonic() + self.discovery_timeout
        while True:
            self.ask_new_nodes(max(1.0, deadline - time.monotonic()))
            missing = sorted(set(range(self.num_clients)) - set(self.nodes))
            if not missing:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"no SuperNode plays client(s) {missing} after "
                                   f"{self.discovery_timeout} s")
            time.sleep(0.5)

    def ask_new_nodes(self, timeout: float | None = None) -> None:
        """Ask the nodes not asked yet which client they play (waiting at most timeout
        seconds for their answers; a node that has not answered is asked again next time)."""
        new = [n for n in self.grid.get_node_ids() if n not in self.asked]
        if not new:
            return
        messages = [Message(RecordDict(), dst_node_id=n, message_type=MessageType.QUERY)
                    for n in new]
        for reply in self.grid.send_and_receive(messages, timeout=timeout):
            if reply.has_error():
                continue
            answer = reply.content["client"]
            client_id, node = int(answer["client-id"]), reply.metadata.src_node_id
            if "num-partitions" in answer and int(answer["num-partitions"]) != self.num_clients:
                raise mismatch(int(answer["num-partitions"]), self.num_clients)
            if not 0 <= client_id < self.num_clients:
                raise ConfigError(f"a SuperNode plays client {client_id} but the config has "
                                 f"data.num_clients={self.num_clients} (valid partition-id: "
                                 f"0..{self.num_clients - 1})")
            self.asked.add(node)
            self.nodes[client_id] = node  # the newest node of a client replaces the old

    @property
    def run_key(self) -> str:
        """The fedlight run the SuperNodes keep private states for: the run folder's name."""
        run_dir = None if self.host is None else self.host.run_dir
        assert run_dir is not None, "the run folder is known once the run has opened it"
        return run_dir.name

    # ----------------------------------------------------------------- a round
    def exchange(self, contents: Mapping[int, RecordDict],
                 kind: str) -> dict[int, Message | str]:
        """Send each client its content; each client's reply, or why there is none."""
        self.ask_new_nodes(self.round_timeout)
        sent = {c: Message(content, dst_node_id=self.nodes[c], message_type=kind)
                for c, content in contents.items() if c in self.nodes}
        client_of = {message.metadata.dst_node_id: c for c, message in sent.items()}
        outcome: dict[int, Message | str] = {c: "no SuperNode" for c in contents}
        outcome.update({c: "no reply" for c in sent})
        for reply in self.grid.send_and_receive(list(sent.values()), timeout=self.round_timeout):
            client_id = client_of.get(reply.metadata.src_node_id)  # known from the node
            if client_id is not None:
                outcome[client_id] = (f"error: {reply.error.reason}" if reply.has_error()
                                      else reply)
        return outcome

    def train(self, tasks: Sequence[TrainTask]) -> Iterator[ClientResult | ClientFailure]:
        if self.secure is not None:
            self.ask_new_nodes(self.round_timeout)
            outcome = secure_round(self.grid, self.secure, self.nodes, tasks, self.run_key,
                                   self.max_weight, self.round_timeout)
            yield from (outcome[task.client_id] for task in tasks)
            return
        replies = self.exchange({t.client_id: encode_task(t, self.run_key) for t in tasks},
                                MessageType.TRAIN)
        for task in tasks:
            reply = replies[task.client_id]
            yield (ClientFailure(task.client_id, reply) if isinstance(reply, str)
                   else read_reply(task, reply.content))

    def evaluate(self, round_idx: int,
                 downloads: Mapping[int, Tensor | Any]) -> dict[int, dict[str, Score]]:
        replies = self.exchange(
            {c: encode_evaluation(c, round_idx, shared, self.run_key)
             for c, shared in downloads.items()}, MessageType.EVALUATE)
        return {c: unpack_scores(r.content["scores"]["scores"]) for c, r in replies.items()
                if not isinstance(r, str)}


def read_reply(task: TrainTask, content: RecordDict) -> ClientResult | RefusedUpdate:
    """task's result from a train reply, or why the reply is refused: it cannot be read (a
    missing record, bytes that are not a structure of tensors), or it answers another round."""
    try:
        answered = reply_round(content)
        result = decode_result(task.client_id, content)
    except Exception as error:  # anything a peer's bytes can make the decoder raise
        first_line = next(iter(str(error).splitlines()), "")
        return RefusedUpdate(task.client_id, f"its reply cannot be read "
                                             f"({type(error).__name__}: {first_line})")
    if answered != task.round_idx:
        return RefusedUpdate(task.client_id, f"its reply answers round {answered + 1}, not "
                                             f"round {task.round_idx + 1}")
    return result


__all__ = ["NAME", "FlowerEngine", "mismatch", "read_reply"]
