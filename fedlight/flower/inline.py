"""Flower apps without Flower's Ray backend: every SuperNode is a call of the ClientApp in this
process, one message after another.

InlineGrid implements Flower's Grid (the ServerApp's handle on the SuperNodes) by handing each
message straight to the ClientApp with that node's Context (partition-id and num-partitions in
its node config, as Flower's simulation engine sets them) and keeping the reply for
pull_messages. Messages are the same Message / RecordDict objects as over the network; only
the transport is missing. As on Flower's runtimes, an exception in the ClientApp becomes an
error reply (the server side counts the client as dropped), not an exception of the run. It is
for quick checks and tests, and for machines where Ray is not installed;
run_inline(server_app, client_app, n) is its entry point. Flower's simulation engine
(simulate, flwr run) runs the same apps in Ray worker processes.
"""

from __future__ import annotations

import copy
import secrets
import uuid
from collections.abc import Iterable
from typing import Any

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fedlight.compat.flower_internals import empty_flower_run, set_task_identity, stamp_message_id
from fedlight.core.errors import ConfigError

SUPERLINK_NODE_ID = 1  # the node id Flower gives the SuperLink
FIRST_NODE_ID = 1000  # SuperNodes get ids apart from their partition ids, as under Flower
CLIENT_APP_RAISED_EXCEPTION = 2  # Flower's error code for an exception in a ClientApp


class InlineGrid(Grid):
    """A Grid over num_nodes SuperNodes that run client_app in this process.

    Args:
        client_app: the ClientApp every node runs.
        num_nodes: SuperNodes; node k has partition-id k.
        run_config: Flower's run config given to every node.
        run_id: the run's id (the nodes' Context.run_id); default a random one, as Flower
            draws, so runs sharing a state folder never read each other's client states.
    """

    def __init__(self, client_app: ClientApp, num_nodes: int,
                 run_config: dict[str, Any] | None = None, run_id: int | None = None) -> None:
        if num_nodes < 1:
            raise ConfigError(f"num_nodes must be at least 1, got {num_nodes}")
        self.client_app = client_app
        run_id = secrets.randbits(63) if run_id is None else run_id
        self._run = empty_flower_run(run_id)
        self.contexts = {
            FIRST_NODE_ID + k: Context(
                run_id=run_id, node_id=FIRST_NODE_ID + k,
                node_config={"partition-id": k, "num-partitions": num_nodes},
                state=RecordDict(), run_config=dict(run_config or {}))
            for k in range(num_nodes)}
        self.replies: dict[str, Message] = {}
        set_task_identity(run_id, 1, SUPERLINK_NODE_ID)

    def set_run(self, run: Any) -> None:
        self._run = run

    @property
    def run(self) -> Any:
        return self._run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int,
                       group_id: str, ttl: float | None = None) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Deliver each message to its node now; the reply waits for pull_messages."""
        ids = []
        for message in messages:
            message_id = str(uuid.uuid4())
            stamp_message_id(message, message_id)
            context = self.contexts[message.metadata.dst_node_id]
            try:  # a copy, as over the network: a ClientApp may change what it receives
                reply = self.client_app(copy.deepcopy(message), context)
            except Exception as error:  # as a SuperNode reports a ClientApp's exception
                reply = Message(Error(CLIENT_APP_RAISED_EXCEPTION, repr(error)),
                                reply_to=message)
            self.replies[message_id] = reply
            ids.append(message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self.replies.pop(i) for i in message_ids if i in self.replies]

    def send_and_receive(self, messages: Iterable[Message], *,
                         timeout: float | None = None) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))


def run_inline(server_app: ServerApp, client_app: ClientApp, num_nodes: int,
               run_config: dict[str, Any] | None = None, run_id: int | None = None) -> None:
    """Run server_app against num_nodes in-process SuperNodes running client_app."""
    grid = InlineGrid(client_app, num_nodes, run_config, run_id)
    server_app(grid, Context(run_id=grid.run.run_id, node_id=SUPERLINK_NODE_ID, node_config={},
                             state=RecordDict(), run_config=dict(run_config or {})))


__all__ = ["InlineGrid", "run_inline"]
