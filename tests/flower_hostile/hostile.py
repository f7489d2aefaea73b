"""SuperNodes that send bad updates: the ClientApp of fedlight, with the train replies of the
clients and rounds of a schedule spoiled in one way each (FAULTS), and the cause the server is
expected to name. tests/test_flower_hostile.py uses it in process, tests/test_flower_runtime.py
as a Flower app on the real runtime."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedlight.core.client import Upload
from fedlight.flower.client import build_client_app
from fedlight.flower.codec import decode_result, decode_task, encode_result
from tests.flower_apps import with_train


def renamed(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    first = next(iter(state))
    return {("renamed." + k if k == first else k): v for k, v in state.items()}


def reshaped(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    first = next(iter(state))
    return {k: (v.flatten() if k == first else v) for k, v in state.items()}


def with_nan(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    first = next(iter(state))
    return {k: (torch.full_like(v, float("nan")) if k == first else v) for k, v in state.items()}


#: each kind of bad update: the part spoiled, how, and (a regular expression of) the cause the
#: server names
FAULTS: dict[str, tuple[str, Any, str]] = {
    "keys": ("state", renamed, r"its state's keys differ from the state sent \(missing: '"),
    "shape": ("state", reshaped, r"'[\w.]+' has shape \(\d+,\), expected \(\d+, \d+"),
    "nan": ("state", with_nan, r"'[\w.]+' has non-finite values"),
    "weight": ("weight", float("inf"), r"its weight inf is not a finite non-negative number"),
    "round": ("round", -1, r"its reply answers round \d, not round \d"),
    "bytes": ("bytes", b"not a torch file", r"its reply cannot be read \(\w+"),
}

#: the runtime test's schedule (round index -> {client: fault}): three clients, client 0
#: honest, every kind of fault once
SCHEDULE: dict[int, dict[int, str]] = {0: {1: "keys", 2: "nan"}, 1: {1: "shape", 2: "round"},
                                       2: {1: "weight", 2: "bytes"}}


def spoil(content: Any, round_idx: int, fault: str) -> Any:
    """A train reply's content with one fault."""
    part, change, _ = FAULTS[fault]
    result = decode_result(0, content)
    if part == "state":
        result.upload = Upload(change(result.upload.state), result.upload.weight,
                               result.upload.payload)
    elif part == "weight":
        result.upload = Upload(result.upload.state, change, result.upload.payload)
    spoiled = encode_result(result, round_idx + change if part == "round" else round_idx)
    if part == "bytes":
        spoiled["result"]["payload"] = change
    return spoiled


def hostile_app(inner: Callable[[Message, Context], Message],
                schedule: Mapping[int, Mapping[int, str]],
                honest: dict[int, dict[str, torch.Tensor]] | None = None) -> ClientApp:
    """A ClientApp that answers as inner does, except the train replies schedule spoils; the
    honest uploads are kept in honest (by round) where given."""

    def train(message: Message, context: Context) -> Message:
        reply = inner(message, context)
        task, _ = decode_task(message.content)
        fault = schedule.get(task.round_idx, {}).get(task.client_id)
        if fault is None:
            if honest is not None:
                honest[task.round_idx] = decode_result(0, reply.content).upload.state
            return reply
        return Message(spoil(reply.content, task.round_idx, fault), reply_to=message)

    return with_train(inner, train)


client_app = hostile_app(build_client_app(), SCHEDULE)
