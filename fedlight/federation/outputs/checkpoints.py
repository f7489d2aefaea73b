"""Run checkpoints: which file ckpt_path names, what a checkpoint holds, whether a run may
resume or evaluate it, and durable writes.

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
from fedlight.core.rules import ServerRule, move

CHECKPOINT_VERSION = 2
LAST = "last.ckpt"
BEST = "best.ckpt"  # the round chosen on validation (data.val_fraction > 0)
#: ``ckpt_path`` names that pick a file of this configuration's newest run.
NAMED = {"last": LAST, "best": BEST}
#: Configuration keys a resume may change. trainer.rounds extends (or shortens) a run: the
#: rounds trained are the same as in a run planned that long (sampling, batches and every draw
#: are functions of (seed, round, client)) unless the method reads the planned number of
#: rounds (FederatedClient.reads_planned_rounds, e.g. MAP; refused); the old last round keeps
#: its evaluated row and checkpoint. data.root and data.download say where the same data is;
#: data.batch_size only sizes the plain-Lightning views of a client (training uses
#: trainer.batch_size).
RESUMABLE_CHANGES = ("trainer.rounds", "data.source.init_args.root",
                     "data.source.init_args.download", "data.batch_size")


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


def check_compatible(checkpoint: Mapping[str, Any], method: str,
                     server_rule: str | None) -> None:
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


def check_same_config(saved: Mapping[str, Any], current: Mapping[str, Any],
                      ignore: tuple[str, ...] = RESUMABLE_CHANGES) -> None:
    """Refuse to continue a run under a configuration that changes its result.

    Compares the configuration stored in a checkpoint with the current one, key by key, except
    the ``ignore`` keys (or key prefixes ending in a dot).

    Raises:
        ConfigError: listing every differing key with its checkpointed and current value.
    """
    old, new = flatten_config(saved), flatten_config(current)
    missing = object()
    keys = sorted(k for k in old.keys() | new.keys()
                  if old.get(k, missing) != new.get(k, missing)
                  and not any(k == i or (i.endswith(".") and k.startswith(i)) for i in ignore))
    if keys:
        changes = "; ".join(f"{k}: {old.get(k, '<unset>')!r} -> {new.get(k, '<unset>')!r}"
                            for k in keys)
        raise ConfigError(
            f"the checkpoint's run was trained with a different configuration ({changes}); "
            "resume it with its own configuration (only trainer.rounds may change, where the "
            "method allows it) or start a new run without ckpt_path")


def check_resumable(checkpoint: Mapping[str, Any], method: str, rule: str,
                    config: Mapping[str, Any], rounds: int, reads_planned_rounds: bool) -> None:
    """Refuse to resume a checkpoint of another method, rule or configuration, one already at
    ``rounds`` or past it, and a changed ``trainer.rounds`` for a method that reads it."""
    check_compatible(checkpoint, method, rule)
    check_same_config(checkpoint["config"], config)
    done = checkpoint["rounds_done"]
    if done >= rounds:
        raise ConfigError(
            f"nothing to train: the run is at round {done} and trainer.rounds is {rounds}; pass "
            f"trainer.rounds above {done} to extend it (fedlight test evaluates it as it is)")
    planned = checkpoint["config"]["trainer"]["rounds"]
    if reads_planned_rounds and planned != rounds:
        raise ConfigError(
            f"{method} trains with trainer.rounds as the planned number of rounds, so resuming "
            f"its {planned}-round run with trainer.rounds {rounds} would differ from a run "
            f"planned for {rounds} rounds; resume with trainer.rounds {planned}, or start a new "
            "run (without ckpt_path)")


def check_evaluable(checkpoint: Mapping[str, Any], method: str,
                    config: Mapping[str, Any]) -> None:
    """Refuse to evaluate a checkpoint of another method, model or data (the trainer's and the
    server rule's options do not matter to an evaluation)."""
    check_compatible(checkpoint, method, None)
    check_same_config(checkpoint["config"], config, (*RESUMABLE_CHANGES, "trainer.", "server"))


def checkpoint_names(rounds_done: int, rounds: int, every: int, stopping: bool,
                     best: bool) -> list[str]:
    """The checkpoints to write after ``rounds_done`` rounds: best.ckpt for a new best round
    on validation, last.ckpt every ``every`` rounds, at the end and when the run stops."""
    names = [BEST] if best else []
    if stopping or rounds_done % every == 0 or rounds_done == rounds:
        names.append(LAST)
    return names


def saved_client_states(run_dir: Path) -> dict[int, Any]:
    """The clients' private states in a run folder's last checkpoint ({} without one)."""
    checkpoint = run_dir / "checkpoints" / LAST
    return load_checkpoint(checkpoint)["client_states"] if checkpoint.is_file() else {}


def save_checkpoint(obj: dict[str, Any], path: Path) -> None:
    """Write obj to path durably and atomically (:func:`fedlight.core.files.atomic_write`)."""
    atomic_write(path, lambda stream: torch.save({**obj, "version": CHECKPOINT_VERSION}, stream))


__all__ = [
    "BEST", "CHECKPOINT_VERSION", "LAST", "NAMED", "RESUMABLE_CHANGES", "check_compatible",
    "check_evaluable", "check_resumable", "check_same_config", "checkpoint_names",
    "find_checkpoint", "flatten_config", "load_checkpoint", "run_checkpoint", "save_checkpoint",
    "saved_client_states",
]
