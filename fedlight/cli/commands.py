"""The ``fedlight`` commands: a ``LightningCLI`` whose trainer is the ``FederatedTrainer``, and
the tools' subcommands.

    fedlight fit -c configs/gpfl/mnist5k_pathological.yaml
    fedlight fit -c configs/fedavg/mnist5k_dirichlet.yaml --trainer.rounds 5
    fedlight fit --model FedAvg --data.partition IID --print_config
    fedlight test -c configs/fedavg/mnist5k_dirichlet.yaml      # evaluates the last run
    fedlight export-partition runs/<run> pfllib_folder/          # a split in PFLlib's layout
    fedlight report runs/* --out report/                         # tables and plots of runs
    fedlight sweep benchmarks/sweeps/gpfl_table1.yaml --jobs 2   # a grid of runs, tabulated
    fedlight interpolate runs/<AaBb run>                         # alpha/beta interpolation grid
    fedlight flower configs/fedper/mnist5k_dirichlet.yaml        # the same run on Flower

``--model`` takes any client class (short name such as ``FedAvg`` or a class path); the input
shape and the class count are linked from the data module and never repeated in a YAML.
"""

from __future__ import annotations

import shlex
import sys
import warnings
from pathlib import Path
from typing import Any

from jsonargparse import ActionConfigFile, Namespace
from lightning.pytorch.cli import LightningArgumentParser

import fedlight.clients  # noqa: F401  (registers every client class for short names)
import fedlight.privacy  # noqa: F401  (DLGProbe for short names)
import fedlight.server  # noqa: F401  (every server rule for short names)
from fedlight.clients.base import FederatedClient
from fedlight.compat.lightning_cli import LightningCLISteps
from fedlight.config import add_run_arguments, instantiate_run
from fedlight.data.datamodule import FederatedDataModule
from fedlight.data.moved import check_data_section
from fedlight.data.partitions import as_partition
from fedlight.data.partitions.from_file import FromFile
from fedlight.data.sources.pfllib import export_pfllib
from fedlight.federation.trainer import FederatedTrainer
from fedlight.parsing.messages import (
    USER_ERRORS,
    UsageError,
    debugging,
    exit_with_error,
    exit_with_fault,
    read_yaml_file,
)
from fedlight.parsing.parser import CommandParser, FedlightParser
from fedlight.plotting import figure_formats

#: jsonargparse's deprecation notes on calls LightningCLI makes (the messages' first words
#: after jsonargparse's line break): the call that is deprecated, and the note on how to see
#: more such notes that jsonargparse issues before the first one.
LIGHTNING_CLI_JSONARGPARSE_NOTES = (r"\s*``instantiate_classes`` was deprecated",
                                    r"\s*By default only one JsonargparseDeprecationWarning")


class FedlightCLI(LightningCLISteps):
    """LightningCLI with ``FederatedTrainer`` in the ``trainer`` slot.

    LightningCLI only accepts a ``lightning.Trainer`` there, so the trainer's arguments are
    added from ``FederatedTrainer``'s signature here, and it is instantiated here.
    """

    def __init__(self, args: Any = None, run: bool = True) -> None:
        self.argv = [str(a) for a in (sys.argv[1:] if args is None else args)]
        self.parsers: dict[str, LightningArgumentParser] = {}  # by subcommand ("" the top)
        with warnings.catch_warnings():
            # What a user sees is fedlight's output, not notes on LightningCLI's own calls:
            # fedlight passes args on purpose where LightningCLI warns against it, and
            # LightningCLI calls jsonargparse's deprecated instantiate_classes.
            warnings.filterwarnings("ignore", message="LightningCLI's args parameter",
                                    category=UserWarning, module="lightning.pytorch.cli")
            for note in LIGHTNING_CLI_JSONARGPARSE_NOTES:
                warnings.filterwarnings("ignore", message=note, category=DeprecationWarning,
                                        module="lightning.pytorch.cli")
            super().__init__(
                model_class=FederatedClient,
                datamodule_class=FederatedDataModule,
                trainer_class=FederatedTrainer,  # type: ignore[arg-type]
                parser_class=FedlightParser,
                parser_kwargs={command: {"command": command} for command in self.subcommands()},
                subclass_mode_model=True,
                save_config_callback=None,
                auto_configure_optimizers=False,
                load_from_checkpoint_support=False,
                seed_everything_default=False,
                args=args,
                run=run,
            )

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        return {"fit": {"model", "datamodule"}, "validate": {"model", "datamodule"},
                "test": {"model", "datamodule"}}

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        """The parser of ``fedlight <command>`` (kwargs["command"]; the top level without),
        with -c / --config and a one-line usage; no ``# lightning.pytorch==`` header in what
        it dumps (the run folder's config.yaml says which fedlight wrote it)."""
        command = kwargs.pop("command", "")
        if command:
            kwargs.setdefault("usage", f"fedlight {command} [-h] [-c CONFIG] "
                                       "[--print_config[=flags]] [options]")
        parser = FedlightParser.of_command(command)(**kwargs)
        parser.add_argument("-c", "--config", action=ActionConfigFile,
                            help="Path to a configuration file in json or yaml format.")
        self.parsers[command] = parser
        return parser

    def add_default_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """No ``--seed_everything``: ``trainer.seed`` is the one seed of a run."""

    def add_core_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        add_run_arguments(parser)

    def section(self, config: Any) -> Any:
        """``config[<subcommand>]``, or ``config`` without a subcommand."""
        return config[self.subcommand] if self.subcommand else config

    def instantiate_classes(self) -> None:
        """The run of the subcommand's config, built as every command builds one
        (fedlight.config.instantiate_run)."""
        parser = self.parsers[self.subcommand] if self.subcommand else self.parser
        run = instantiate_run(parser, self.section(self.config))
        self.model, self.datamodule, self.trainer = run.model, run.datamodule, run.trainer
        run.trainer.command = command_without_ckpt_path(self.argv)
        # what LightningCLI passes to the subcommand's method
        self.config_init = Namespace({self.subcommand: Namespace(ckpt_path=run.ckpt_path,
                                                                 server=run.server)})


def command_without_ckpt_path(argv: list[str]) -> str:
    """``fedlight <argv>`` without its ``--ckpt_path`` option, quoted for a shell."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--ckpt_path":
            skip = True
        elif not arg.startswith("--ckpt_path="):
            kept.append(arg)
    return shlex.join(["fedlight", *kept])


def export_partition(argv: list[str]) -> None:
    """``fedlight export-partition CONFIG_OR_RUN_DIR OUT_DIR``: write a split in PFLlib's layout.

    Given a run folder, its ``partition.json`` is exported exactly; given a YAML config, the
    split its ``data`` section generates.
    """
    parser = CommandParser(prog="fedlight export-partition",
                                     description=export_partition.__doc__.split("\n")[0])
    parser.add_argument("source", help="a run folder or a fedlight YAML config")
    parser.add_argument("out_dir", help="folder to write train/<i>.npz, test/<i>.npz, config.json")
    options = parser.parse_args(argv)
    source = Path(options.source)
    config_path = source / "config.yaml" if source.is_dir() else source
    if not config_path.is_file():
        parser.error(f"{str(config_path)!r} does not exist (give a run folder or a YAML config)")
    config = read_yaml_file(config_path) or {}
    data_config = dict(config.get("data") or {})
    train_batch = (config.get("trainer") or {}).get("batch_size")
    if train_batch:  # PFLlib's config.json records the batch size the run trains with
        data_config["batch_size"] = train_batch
    check_data_section(data_config)
    scheme = data_config.get("partition")  # config.json names the scheme, not FromFile
    if source.is_dir():  # the recorded split exactly (its train lists exclude validation)
        data_config.update(partition=FromFile(source / "partition.json"), val_fraction=0.0)
    datamodule = FederatedDataModule(**data_config)
    folder = export_pfllib(datamodule, options.out_dir,
                           None if scheme is None else as_partition(scheme))
    print(f"wrote a PFLlib dataset folder to {folder}")


def report(argv: list[str]) -> None:
    """``fedlight report RUN_DIR... --out DIR``: tables and plots from run folders."""
    from fedlight.analysis.report import main as report_main

    report_main(argv)


def interpolate(argv: list[str]) -> None:
    """``fedlight interpolate RUN_DIR``: the privatization paper's interpolation grid."""
    from fedlight.analysis.interpolation import main as interpolation_main

    interpolation_main(argv)


def sweep(argv: list[str]) -> None:
    """``fedlight sweep SWEEP.yaml``: a cached, resumable grid of fit runs, tabulated."""
    from fedlight.sweep import main as sweep_main

    sweep_main(argv)


def flower(argv: list[str]) -> None:
    """fedlight flower CONFIG [overrides]: the config under Flower's simulation engine."""
    from fedlight.flower.simulate import main as flower_main

    flower_main(argv)


def analyze(argv: list[str]) -> None:
    """``fedlight analyze ANALYSIS RUN_DIR``: a paper's figure from a finished run."""
    from fedlight.analysis.command import main as analyze_main

    analyze_main(argv)


TOOLS = {"export-partition": export_partition, "report": report, "interpolate": interpolate,
         "flower": flower, "sweep": sweep, "analyze": analyze}

#: One line per subcommand, in the order of ``fedlight --help``.
COMMANDS = {
    "fit": "train a federated run (resume one with --ckpt_path last)",
    "validate": "evaluate a run's checkpoint on the local and global test data",
    "test": "validate, and write test_metrics.json into the run folder",
    "report": "tables and plots of finished runs (RUN_DIR... --out DIR)",
    "sweep": "a cached, resumable grid of runs with its table (fedlight sweep SWEEP.yaml)",
    "export-partition": "write a run's or a config's split in PFLlib's folder layout",
    "interpolate": "the privatization paper's alpha/beta interpolation grid of a run",
    "flower": "run a config on Flower's simulation engine (fedlight flower CONFIG [overrides])",
    "analyze": "the papers' figures from a finished run (fedlight analyze ANALYSIS RUN_DIR)",
}


def overview() -> str:
    """The text of ``fedlight --help``: every subcommand in one line."""
    lines = ["fedlight: personalized federated learning on PyTorch Lightning", "",
             "usage: fedlight <command> [options]", "", "commands:"]
    lines += [f"  {name:<18}{text}" for name, text in COMMANDS.items()]
    lines += ["", "fedlight <command> --help          the options of a command",
              "fedlight fit --model GPFL --help    the options of a method (any client class)",
              "fedlight fit -c CONFIG.yaml         run a config (see configs/)",
              "errors print one line; FEDLIGHT_DEBUG=1 shows the traceback"]
    return "\n".join(lines)


def model_help(argv: list[str]) -> list[str]:
    """``fit --model GPFL --help`` -> ``fit --model.help GPFL`` (the method's own options);
    any other command line unchanged."""
    if len(argv) < 2 or argv[0] not in ("fit", "validate", "test") or not (
            {"-h", "--help"} & set(argv)):
        return argv
    for i, arg in enumerate(argv):
        if arg.startswith("--model="):
            return [argv[0], "--model.help", arg.split("=", 1)[1]]
        if arg == "--model" and i + 1 < len(argv):
            return [argv[0], "--model.help", argv[i + 1]]
    return argv


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``fedlight`` console script."""
    argv = list(sys.argv[1:] if args is None else args)
    try:
        if not argv or argv[0] in ("-h", "--help"):
            print(overview())
            return
        if not argv[0].startswith("-") and argv[0] not in COMMANDS:
            raise UsageError(f"unknown command {argv[0]!r}; valid: {', '.join(COMMANDS)}")
        figure_formats()  # a bad FEDLIGHT_FIGURE_FORMATS is refused before anything runs
        if argv[0] in TOOLS:
            TOOLS[argv[0]](argv[1:])
            return
        if args is None:  # LightningCLI reads the console's sys.argv itself (args too warns)
            sys.argv[1:] = model_help(argv)
            FedlightCLI()
        else:
            FedlightCLI(args=model_help(argv))
    except KeyboardInterrupt:  # the trainer already said what was kept and how to resume
        if debugging():
            raise
        sys.exit(130)
    except USER_ERRORS as error:
        if debugging():
            raise
        exit_with_error(error)
    except Exception as error:  # a fault, not the input's: its traceback and a hint
        if debugging():
            raise
        exit_with_fault(error)


if __name__ == "__main__":
    main()
