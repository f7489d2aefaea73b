"""Run checkpoints: which file ckpt_path names, and durable writes.

ckpt_path="last" resumes the newest checkpoint of THIS configuration's run: the folder named
exactly <run name> or <run name>-v<k> (the versions a re-run creates), never a run whose
name merely starts the same (...-s1 does not match ...-s10). Writes go to a temporary
file that is flushed and fsynced, renamed over the old checkpoint, and the folder is fsynced,
so a crash or power cut leaves either the old or the new checkpoint, whole.
"""

from __future__ import annotations

import json
import pickle
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from fedlight.core.errors import ConfigError, DamagedFileError, MissingFileError
from fedlight.core.files import atomic_write
from fedlight.federation.server.base import ServerRule, move

CHECKPOINT_VERSION = 2
LAST = "last.ckpt"
BEST = "best.ckpt"  # the round chosen on validation (data.val_fraction > 0)
#: ``ckpt_path`` names that pick a file of this configuration's newest run.
NAMED = {"last": LAST, "best": BEST}
#: Configuration entries a resumed run may change: they do not change what is trained
#: (``trainer.rounds`` extends or shortens the run; the others only say where data is read).
#: Configuration keys a resume may change. trainer.rounds extends (or shortens) a run: the
#: rounds trained are the same as in a run planned that long (sampling, batches and every draw
#: are functions of (seed, round, client)) unless the method reads the planned number of
#: rounds (FederatedClient.reads_planned_rounds, e.g. MAP; refused); the old last round keeps
#: its evaluated row and checkpoint. data.root and data.download say where the same data is;
#: data.batch_size only sizes the plain-Lightning views of a client (training uses
#: trainer.batch_size).
RESUMABLE_CHANGES = ("trainer.rounds", "data.root", "data.download", "data.batch_size")


def find_checkpoint(ckpt_path: str, root: Path, run_name: str) -> Path:
    """The checkpoint file ckpt_path names: a path, or last (best) for the newest
    <root>/<run_name>[-v<k>]/checkpoints/last.ckpt (best.ckpt).

    Raises:
        FileNotFoundError: no such file / no such run, naming what was looked for.
    """
    if ckpt_path not in NAMED:
        path = Path(ckpt_path)
        if not path.is_file():
            raise MissingFileError(f"checkpoint {ckpt_path!r} does not exist; give a "
                                    "checkpoint file, last or best")
        return path
    name = NAMED[ckpt_path]
    pattern = re.compile(rf"{re.escape(run_name)}(-v\d+)?")
    candidates = [p for p in root.glob(f"{run_name}*/checkpoints/{name}")
                  if pattern.fullmatch(p.parent.parent.name)]
    if not candidates:
        raise MissingFileError(
            f"ckpt_path={ckpt_path!r} but no run named {run_name!r} with checkpoints/{name} "
            f"exists under {str(root)!r}; pass a checkpoint path or run fit first")
    return max(candidates, key=lambda p: p.stat().st_mtime)


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint written by save_checkpoint (CPU tensors).

    Raises:
        DamagedFileError: the file is not a whole fedlight checkpoint (e.g. truncated).
        ConfigError: it was written by a fedlight with another checkpoint format.
    """
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    except (RuntimeError, EOFError, pickle.UnpicklingError, OSError) as error:
        if isinstance(error, FileNotFoundError):
            raise
        reason = (str(error).splitlines() or [type(error).__name__])[0]
        raise DamagedFileError(
            f"checkpoint {str(path)!r} is damaged and cannot be read ({reason}); give another "
            "checkpoint file with --ckpt_path, or start the run again without ckpt_path"
        ) from error
    if not isinstance(checkpoint, dict):
        raise DamagedFileError(f"{str(path)!r} is not a fedlight checkpoint; give a checkpoint "
                               "file written by fedlight with --ckpt_path")
    if checkpoint.get("version") != CHECKPOINT_VERSION:
        raise ConfigError(f"checkpoint {str(path)!r} has version {checkpoint.get('version')}; "
                          f"this fedlight reads version {CHECKPOINT_VERSION}")
    return checkpoint


def run_checkpoint(rounds_done: int, method: str, server: ServerRule,
                   population: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """What a run's checkpoint holds: rounds done, the method and server rule names (checked on
    resume), the rule's state on CPU, every client's state (population) and extra
    (grad scale, history, totals)."""
    return {"rounds_done": rounds_done, "method": method, "server_rule": type(server).__name__,
            "server": move(server.state_dict(), torch.device("cpu")), **population, **extra}


def check_compatible(checkpoint: dict[str, Any], method: str, server_rule: str | None) -> None:
    """Refuse a checkpoint written by another method (or, unless server_rule is None,
    another server rule), naming both."""
    if checkpoint["method"] != method:
        raise ConfigError(f"checkpoint was written by {checkpoint['method']}, not {method}")
    if server_rule is not None and checkpoint["server_rule"] != server_rule:
        raise ConfigError(f"checkpoint was written with server rule "
                         f"{checkpoint['server_rule']}, not {server_rule}")


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"data": {"beta": 0.1}}`` -> ``{"data.beta": 0.1}`` (tuples as lists, paths as
    strings, so a configuration compares equal to its checkpointed copy)."""
    flat: dict[str, Any] = {}
    for key, value in json.loads(json.dumps(config, default=str)).items():
        if isinstance(value, dict) and value:
            flat.update(flatten_config(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def check_same_config(saved: Mapping[str, Any] | None, current: Mapping[str, Any],
                      ignore: tuple[str, ...] = RESUMABLE_CHANGES) -> None:
    """Refuse to continue a run under a configuration that changes its result.

    Compares the configuration stored in a checkpoint with the current one, key by key, except
    the ``ignore`` keys (or key prefixes ending in a dot). A checkpoint without a stored
    configuration (an older fedlight) is not checked, nor a key an older fedlight did not
    record (e.g. ``trainer.threads``).

    Raises:
        ValueError: listing every differing key with its checkpointed and current value.
    """
    if saved is None:
        return
    old, new = flatten_config(saved), flatten_config(current)
    missing = object()
    keys = sorted(k for k in old.keys() | new.keys()
                  if old.get(k, missing) != new.get(k, missing) and k in old
                  and not any(k == i or (i.endswith(".") and k.startswith(i)) for i in ignore))
    if keys:
        changes = "; ".join(f"{k}: {old.get(k, '<unset>')!r} -> {new.get(k, '<unset>')!r}"
                            for k in keys)
        raise ConfigError(
            f"the checkpoint's run was trained with a different configuration ({changes}); "
            "resume it with its own configuration (only trainer.rounds may change, where the "
            "method allows it) or start a new run without ckpt_path")


def save_checkpoint(obj: dict[str, Any], path: Path) -> None:
    """Write obj to path durably and atomically (:func:`fedlight.core.files.atomic_write`)."""
    atomic_write(path, lambda stream: torch.save({**obj, "version": CHECKPOINT_VERSION}, stream))


__all__ = [
    "BEST", "CHECKPOINT_VERSION", "LAST", "NAMED", "RESUMABLE_CHANGES", "check_compatible",
    "check_same_config", "find_checkpoint", "flatten_config", "load_checkpoint",
    "run_checkpoint", "save_checkpoint",
]
