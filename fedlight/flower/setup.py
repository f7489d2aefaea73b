"""One fedlight run as both Flower apps see it: the config parsed exactly as fedlight fit
parses it (same YAML, same overrides), giving the client module, the data module, the trainer
options and the server rule."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from torch import Tensor

from fedlight.clients.base import FederatedClient
from fedlight.data.datamodule import FederatedDataModule
from fedlight.federation.server import ServerRule, resolve_rule
from fedlight.federation.setup import prepare_run
from fedlight.federation.trainer import FederatedTrainer


@dataclass
class FlowerRun:
    """The parsed config: model (re-initialized from trainer.seed and set up on the
    trainer's Fabric, as fit does), datamodule (set up), trainer (its options and
    Fabric; its fit is never called), server (the config's server: section, or
    None for the method's own rule), and the model's initial shared and private states."""

    model: FederatedClient
    datamodule: FederatedDataModule
    trainer: FederatedTrainer
    server: ServerRule | None
    initial_shared: dict[str, Tensor] = field(default_factory=dict)
    initial_private: dict[str, Tensor] = field(default_factory=dict)

    @property
    def method(self) -> str:
        return type(self.model).__name__

    def server_rule(self) -> ServerRule:
        """A fresh server rule: the method's own, or the config's where the method allows."""
        return resolve_rule(self.model.configure_server(), self.server, self.method)


def find_config(path: str) -> Path:
    """path as given (absolute, or relative to the working folder), else relative to a
    folder on sys.path: Flower puts the installed app's folder there, so a config shipped
    inside a Flower app is found wherever Flower unpacked it."""
    candidates = [Path(path)] + [Path(entry) / path for entry in sys.path if entry]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    raise ValueError(f"fedlight config {path!r} not found in the working folder or the app's")


def app_config(run_config: Mapping[str, Any], **fixed: Any) -> dict[str, Any]:
    """The settings of an app: Flower's run config with the values fixed when the app was
    built (the Python entry point passes the config there) taking precedence."""
    return {**run_config, **{k.replace("_", "-"): v for k, v in fixed.items() if v is not None}}


def load_from(settings: Mapping[str, Any]) -> FlowerRun:
    """load_run for an app's settings: config (required) and overrides (optional)."""
    if "config" not in settings:
        raise ValueError("no fedlight config: set config in the run config ([tool.flwr.app."
                         "config] or --run-config \"config='path.yaml'\")")
    return load_run(str(settings["config"]), parse_overrides(settings.get("overrides")))


def parse_overrides(overrides: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """Command-line style overrides ("--trainer.rounds 2") as a tuple of arguments."""
    if not overrides:
        return ()
    return tuple(shlex.split(overrides) if isinstance(overrides, str) else overrides)


@lru_cache(maxsize=4)
def load_run(config: str, overrides: tuple[str, ...] = ()) -> FlowerRun:
    """Parse config (a fedlight YAML) plus overrides with the fedlight fit parser.

    Cached per process: a Flower process serving several messages (or several clients of a
    simulation) parses the config once.

    Raises:
        ValueError: the config asks for a trainer option the Flower apps cannot honour.
    """
    from fedlight.cli import FedlightCLI

    class _Parse(FedlightCLI):
        def _run_subcommand(self, subcommand: str) -> None:
            """Parse and instantiate only."""

    cli = _Parse(args=["fit", "-c", str(find_config(config)), *overrides])
    run = FlowerRun(cli.model, cli.datamodule, cli.trainer, cli.config_init["fit"].get("server"))
    _check_supported(run.trainer)
    _prepare(run)
    return run


def _check_supported(trainer: FederatedTrainer) -> None:
    if trainer.drop_rate:
        raise ValueError(f"trainer.drop_rate={trainer.drop_rate} is not supported under Flower "
                         "(a client drops by not answering); valid: 0.0")
    if trainer.probes:
        raise ValueError("trainer.probes are not supported under Flower (a probe needs the "
                         "whole population in one process); valid: none")
    if trainer.fabric.world_size != 1:
        raise ValueError(f"trainer.devices x num_nodes = {trainer.fabric.world_size} processes "
                         "is not supported under Flower; valid: 1 (start more SuperNodes)")


def _prepare(run: FlowerRun) -> None:
    """What FederatedTrainer.fit does to the model and data before round 1."""
    model, trainer = run.model, run.trainer
    prepare_run(model, run.datamodule, trainer.seed, trainer.reinitialize, trainer.threads,
                trainer.fabric.device)
    trainer.fabric.setup_module(model)
    model.capture_logs(True)
    state = model.state_dict()
    run.initial_shared = {k: state[k].detach().clone() for k in model.partition.shared}
    run.initial_private = model.client_state()


__all__ = ["FlowerRun", "app_config", "find_config", "load_from", "load_run", "parse_overrides"]
