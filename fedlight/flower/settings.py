"""The settings of a fedlight Flower app: which fedlight config (and overrides) the run uses,
read from Flower's run config or fixed when the app is built, and the parsed config (read with
fedlight.config.read_config, exactly as fedlight fit reads it)."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedlight.config import InstantiatedConfig, read_config
from fedlight.core.errors import ConfigError, MissingFileError


def find_config(path: str) -> Path:
    """path as given (absolute, or relative to the working folder), else relative to a
    folder on sys.path: Flower puts the installed app's folder there, so a config shipped
    inside a Flower app is found wherever Flower unpacked it."""
    candidates = [Path(path)] + [Path(entry) / path for entry in sys.path if entry]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    raise MissingFileError(f"fedlight config {path!r} not found in the working folder or the "
                           "app's")


def app_settings(run_config: Mapping[str, Any], **fixed: Any) -> dict[str, Any]:
    """The settings of an app: Flower's run config with the values fixed when the app was
    built (the Python entry point passes the config there) taking precedence."""
    return {**run_config, **{k.replace("_", "-"): v for k, v in fixed.items() if v is not None}}


def load_from(settings: Mapping[str, Any]) -> InstantiatedConfig:
    """load_run for an app's settings: config (required) and overrides (optional)."""
    if "config" not in settings:
        raise ConfigError("no fedlight config: set config in the run config ([tool.flwr.app."
                         "config] or --run-config \"config='path.yaml'\")")
    return load_run(str(settings["config"]), parse_overrides(settings.get("overrides")))


def parse_overrides(overrides: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """Command-line style overrides ("--trainer.rounds 2") as a tuple of arguments."""
    if not overrides:
        return ()
    return tuple(shlex.split(overrides) if isinstance(overrides, str) else overrides)


def load_run(config: str, overrides: tuple[str, ...] = ()) -> InstantiatedConfig:
    """Parse config (a fedlight YAML) plus overrides as fedlight fit does (a new run each
    call: the ServerApp and the ClientApp never share a model or a trainer)."""
    return read_config(find_config(config), overrides, one_process=True)


__all__ = ["app_settings", "find_config", "load_from", "load_run", "parse_overrides"]
