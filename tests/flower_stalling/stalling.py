"""A SuperNode that stops answering in one round: fedlight's ClientApp, except that the train
message of client stall-client in round stall-round (run config) is never answered. Its
ClientApp writes the file stall-marker and waits for its SuperNode to be stopped, so
tests/test_flower_runtime.py stops a SuperNode while it holds a round's task (a known point)
rather than after a guessed delay."""

from __future__ import annotations

import time
from pathlib import Path

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedlight.flower.client import build_client_app
from fedlight.flower.codec import decode_task
from tests.flower_apps import with_train

#: seconds a stalled ClientApp waits for its SuperNode to be stopped before it gives up
STALL_LIMIT = 600.0


def stall_app(inner: ClientApp) -> ClientApp:
    """A ClientApp that answers as inner does, except the one train message the run config
    names (stall-client, stall-round): that one it holds until its process is stopped."""

    def train(message: Message, context: Context) -> Message:
        task, _ = decode_task(message.content)
        settings = context.run_config
        if (task.client_id, task.round_idx) == (int(settings["stall-client"]),
                                                int(settings["stall-round"])):
            Path(str(settings["stall-marker"])).touch()
            time.sleep(STALL_LIMIT)
            raise TimeoutError(f"client {task.client_id} was not stopped within "
                               f"{STALL_LIMIT} s of stalling")
        return inner(message, context)

    return with_train(inner, train)


client_app = stall_app(build_client_app())
