"""Reading a fedlight config: the arguments of a run (trainer, model, data and their links) and
the one way a run is built from a parsed config (instantiate_run), used by the CLI (fit,
validate, test) and, through read_config (a YAML plus command-line style overrides), by
sweeps, the Flower apps and the analyses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from jsonargparse import ActionConfigFile, Namespace
from jsonargparse.typing import register_type
from lightning.fabric.utilities.seed import seed_everything
from lightning.pytorch.cli import LightningArgumentParser

import fedlight.clients  # noqa: F401  (registers every client class for short names)
import fedlight.privacy  # noqa: F401  (DLGProbe for short names)
import fedlight.server  # noqa: F401  (every server rule for short names)
from fedlight.clients.base import FederatedClient
from fedlight.core.paths import ConfigPath
from fedlight.core.rules import ServerRule
from fedlight.data.datamodule import FederatedDataModule
from fedlight.federation.trainer import FederatedTrainer
from fedlight.parsing.messages import wrapped_user_error
from fedlight.parsing.parser import FedlightParser

# A ConfigPath option in a config file is relative to that file's folder: jsonargparse reads a
# config file with the working folder set to the file's folder, and a ConfigPath is resolved
# as it is read (kept as the absolute path, so config.yaml reads the same from anywhere).
register_type(ConfigPath, serializer=str, deserializer=ConfigPath.resolve)


def add_run_arguments(parser: LightningArgumentParser) -> None:
    """The trainer, model and data sections of a config, with the input shape, the class
    count and the vocabulary size linked from the data module to the model (never repeated
    in a YAML)."""
    parser.add_class_arguments(FederatedTrainer, "trainer", fail_untyped=False)
    parser.add_lightning_class_args(FederatedClient, "model", subclass_mode=True)
    # titled by jsonargparse with the base class's docstring, which describes no option here
    parser.groups["model"].title = ("The method: --model NAME (fedlight fit --model NAME "
                                    "--help lists its own options)")
    parser.add_lightning_class_args(FederatedDataModule, "data")
    parser.link_arguments("data.num_classes", "model.init_args.num_classes",
                          apply_on="instantiate")
    parser.link_arguments("data.input_shape", "model.init_args.input_shape",
                          apply_on="instantiate")
    parser.link_arguments("data.vocab_size", "model.init_args.vocab_size",
                          apply_on="instantiate")


def run_parser() -> FedlightParser:
    """The parser of fedlight fit's arguments without the command line: -c, the trainer,
    model and data sections, server and ckpt_path."""
    parser = FedlightParser()
    parser.add_argument("-c", "--config", action=ActionConfigFile)
    add_run_arguments(parser)
    parser.add_method_arguments(FederatedTrainer, "fit", skip={"model", "datamodule"})
    return parser


def dump_config(parser: LightningArgumentParser, config: Namespace) -> str:
    """The resolved config as YAML (what a run folder's config.yaml holds)."""
    return parser.dump(config, skip_unset=False)


@dataclass
class InstantiatedConfig:
    """The objects a config instantiates (instantiate_run, read_config): the client module,
    the data module, the trainer (with its run_config set to the resolved YAML), the server:
    section (None: the method's own rule) and the ckpt_path option (None: a fresh run)."""

    model: FederatedClient
    datamodule: FederatedDataModule
    trainer: FederatedTrainer
    server: ServerRule | None
    ckpt_path: str | None

    @property
    def method(self) -> str:
        return type(self.model).__name__


def instantiate_run(parser: LightningArgumentParser, config: Namespace) -> InstantiatedConfig:
    """Build the run a parsed config describes, the one way every command does (fit, validate
    and test through the CLI, sweeps, the Flower apps, analyses): the global RNG seeded by
    trainer.seed (the model's initialization), every class instantiated, the trainer told its
    resolved YAML (the run's config.yaml).

    Raises:
        fedlight.core.errors.FedlightError: the user error a constructor raised for a value it
            refuses (e.g. a ConfigError), as raised, not wrapped in jsonargparse's ValueError.
    """
    seed_everything(int(config.trainer.seed), verbose=False)
    try:
        built = parser.instantiate(config)
    except Exception as error:  # a constructor's check, which jsonargparse wraps in its own
        refused = wrapped_user_error(error)
        if refused is None:
            raise
        raise refused from None
    trainer = built.trainer
    if not isinstance(trainer, FederatedTrainer):
        trainer = FederatedTrainer(**trainer)
    trainer.run_config = dump_config(parser, config)
    return InstantiatedConfig(built.model, built.data, trainer, built.get("server"),
                     built.get("ckpt_path"))


def read_config(path: str | Path, overrides: Sequence[str] = (),
                one_process: bool = False) -> InstantiatedConfig:
    """Build the run of fedlight fit -c path [overrides]; ``one_process`` reads
    ``trainer.devices: auto`` as 1 (a Flower app is one process; an explicit count is kept,
    for the Flower engine to refuse).

    Raises:
        fedlight.parsing.messages.UsageError: the config or an override is not valid (one line).
    """
    parser = run_parser()
    config = parser.parse_args(["-c", str(path), *overrides])
    if one_process and config.trainer.devices == "auto":
        config.trainer.devices = 1
    return instantiate_run(parser, config)


__all__ = ["InstantiatedConfig", "add_run_arguments", "dump_config", "instantiate_run",
           "read_config", "run_parser"]
