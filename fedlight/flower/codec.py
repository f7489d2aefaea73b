"""What travels between the fedlight apps, as Flower records: a TrainTask and an evaluation
request down, a ClientResult and scores up.

Shared states go as an ArrayRecord (one array per state-dict key, dtype kept; bfloat16, which
NumPy lacks, travels bit for bit as int16 with its keys listed beside it). Everything else a
method sends (the server's message: prototypes, teacher states...; a client's payload; logged
values; scores) is a nested structure of tensors and numbers: it goes as bytes in a
ConfigRecord, written with torch.save and read back with torch.load(weights_only=True), which
refuses any object other than tensors, containers and primitives, so a peer cannot make the
reader run code.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Mapping
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, RecordDict
from torch import Tensor

from fedlight.core.client import Upload
from fedlight.core.messages import ClientResult, Score, TrainTask
from fedlight.core.rules import move


def put_state(content: RecordDict, name: str, state: Mapping[str, Tensor]) -> None:
    """Store a state dict in content under name (CPU copies, keys in order)."""
    bf16 = [k for k, v in state.items() if v.dtype == torch.bfloat16]
    content[name] = ArrayRecord.from_torch_state_dict({
        k: (v.view(torch.int16) if v.dtype == torch.bfloat16 else v).detach().cpu().contiguous()
        for k, v in state.items()})
    content[f"{name}-bfloat16"] = ConfigRecord({"keys": bf16})


def get_state(content: RecordDict, name: str) -> dict[str, Tensor]:
    """The state dict put_state stored (writable tensors)."""
    bf16 = set(content[f"{name}-bfloat16"]["keys"])
    return {k: v.clone().view(torch.bfloat16) if k in bf16 else v.clone()
            for k, v in content[name].to_torch_state_dict().items()}


def pack(obj: Any) -> bytes:
    """A nested structure of tensors and numbers as bytes (tensors moved to the CPU)."""
    buffer = io.BytesIO()
    torch.save(move(obj, torch.device("cpu")), buffer)
    return buffer.getvalue()


def unpack(data: bytes) -> Any:
    """The structure that pack wrote; only tensors, containers and primitives are accepted."""
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def pack_scores(scores: Mapping[str, Score]) -> bytes:
    """Per-output scores of one client: every Score field (correct, total, summed loss, AUC and,
    where the run shares them, the per-class stat scores)."""
    return pack({name: dataclasses.asdict(s) for name, s in scores.items()})


def unpack_scores(data: bytes) -> dict[str, Score]:
    return {name: Score(**fields) for name, fields in unpack(data).items()}


def encode_task(task: TrainTask, run_key: str) -> RecordDict:
    """A TrainTask as a train message's content; run_key names the fedlight run (the folder the
    client keeps its private state in)."""
    content = RecordDict()
    put_state(content, "arrays", task.shared)
    content["task"] = ConfigRecord({
        "client-id": task.client_id, "round": task.round_idx, "message": pack(task.message),
        "score": task.score, "loss-scale": pack(task.loss_scale), "keep-from": task.keep_from,
        "run": run_key})
    return content


def decode_task(content: RecordDict) -> tuple[TrainTask, str]:
    task = content["task"]
    return TrainTask(int(task["client-id"]), int(task["round"]), get_state(content, "arrays"),
                     unpack(task["message"]), bool(task["score"]), unpack(task["loss-scale"]),
                     int(task["keep-from"])), str(task["run"])


def encode_result(result: ClientResult, round_idx: int) -> RecordDict:
    """A ClientResult as the reply to round_idx's train message: exactly the upload (state,
    weight, payload), the training statistics, the logged values and the scores the task asked
    for, and the round it answers (the server refuses a reply naming another round)."""
    content = RecordDict()
    put_state(content, "arrays", result.upload.state)
    content["result"] = ConfigRecord({
        "round": round_idx, "weight": float(result.upload.weight),
        "payload": pack(result.upload.payload),
        "loss-sum": float(result.loss_sum), "steps": int(result.steps),
        "logs": pack({k: float(v) for k, v in result.logs.items()}),
        "scores": pack_scores(result.scores), "loss-scale": pack(result.loss_scale)})
    return content


def reply_round(content: RecordDict) -> int:
    """The round a train reply answers."""
    return int(content["result"]["round"])


def decode_result(client_id: int, content: RecordDict) -> ClientResult:
    result = content["result"]
    upload = Upload(get_state(content, "arrays"), float(result["weight"]),
                    unpack(result["payload"]))
    return ClientResult(client_id, upload, float(result["loss-sum"]), int(result["steps"]),
                        unpack(result["logs"]), unpack_scores(result["scores"]),
                        unpack(result["loss-scale"]))


def encode_evaluation(client_id: int, round_idx: int, shared: Mapping[str, Tensor],
                      run_key: str) -> RecordDict:
    """An evaluation request: score the model made of shared and the client's private state."""
    content = RecordDict()
    put_state(content, "arrays", shared)
    content["task"] = ConfigRecord({"client-id": client_id, "round": round_idx, "run": run_key})
    return content


__all__ = ["decode_result", "decode_task", "encode_evaluation", "encode_result", "encode_task",
           "get_state", "pack", "pack_scores", "put_state", "reply_round", "unpack",
           "unpack_scores"]
