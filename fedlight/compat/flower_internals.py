"""What a Flower grid without a SuperLink must set itself (flwr has no public setter)."""

from __future__ import annotations

from typing import Any


def stamp_message_id(message: Any, message_id: str) -> None:
    """Give a Message the id a SuperLink would give it when it is pushed. Flower's Message has
    no public setter (the id is assigned by the SuperLink); fedlight's in-process grid
    (fedlight.flower.inline), which stands in for the SuperLink, needs it so replies point
    at their message."""
    message.metadata.__dict__["_message_id"] = message_id


def empty_flower_run(run_id: int) -> Any:
    """The Run record a Grid reports, for a grid without a SuperLink (flwr.supercore.run.Run
    is not exported by flwr.app / flwr.serverapp)."""
    from flwr.supercore.run import Run

    return Run.create_empty(run_id=run_id)


def set_task_identity(run_id: int, task_id: int, node_id: int) -> None:
    """Who stamps the messages a ServerApp creates in this process: what Flower's own
    in-process entry points set before calling a ServerApp (no public setter)."""
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = run_id, task_id, node_id


__all__ = ["empty_flower_run", "set_task_identity", "stamp_message_id"]
