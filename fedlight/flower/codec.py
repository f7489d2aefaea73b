"""What travels between the fedlight apps, as Flower records.

Shared states go as an ArrayRecord (one array per state-dict key, dtype kept). Everything else
a method sends (the server's message: prototypes, teacher states...; a client's payload;
scores) is a nested structure of tensors and numbers: it goes as bytes in a ConfigRecord,
written with torch.save and read back with torch.load(weights_only=True), which refuses any
object other than tensors, containers and primitives, so a peer cannot make the reader run
code.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Mapping
from typing import Any

import torch
from flwr.app import ArrayRecord
from torch import Tensor

from fedlight.federation.evaluation import Score
from fedlight.federation.server.base import move


def state_to_record(state: Mapping[str, Tensor]) -> ArrayRecord:
    """A state dict as an ArrayRecord (CPU copies, keys in order)."""
    return ArrayRecord.from_torch_state_dict(
        {k: v.detach().cpu().contiguous() for k, v in state.items()})


def record_to_state(record: ArrayRecord) -> dict[str, Tensor]:
    """An ArrayRecord back as a state dict of writable tensors."""
    return {k: v.clone() for k, v in record.to_torch_state_dict().items()}


def pack(obj: Any) -> bytes:
    """A nested structure of tensors and numbers as bytes (tensors moved to the CPU)."""
    buffer = io.BytesIO()
    torch.save(move(obj, torch.device("cpu")), buffer)
    return buffer.getvalue()


def unpack(data: bytes) -> Any:
    """The structure that pack wrote; only tensors, containers and primitives are accepted."""
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def pack_scores(scores: Mapping[str, Score]) -> bytes:
    """Per-output scores of one client: every Score field (correct, total, summed loss,
    per-class stat scores, AUC), so the server computes the same metrics as the simulator."""
    return pack({name: dataclasses.asdict(s) for name, s in scores.items()})


def unpack_scores(data: bytes) -> dict[str, Score]:
    return {name: Score(**fields) for name, fields in unpack(data).items()}


__all__ = ["pack", "pack_scores", "record_to_state", "state_to_record", "unpack",
           "unpack_scores"]
