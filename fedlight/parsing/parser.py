"""The parsers of fedlight's command lines and configs: their errors are raised as
``UsageError`` (printed in one line by the command), never printed with a usage dump."""

from __future__ import annotations

import argparse
import functools
import sys
from typing import Any, NoReturn

from lightning.pytorch.cli import LightningArgumentParser

from fedlight.compat.jsonargparse_help import FedlightHelpFormatter
from fedlight.parsing.messages import UsageError


class FedlightParser(LightningArgumentParser):
    """A parser named after its command (``fedlight fit``) whose errors are raised (as
    UsageError) instead of printed with the usage, with a one-line usage and fedlight's help
    formatter (see fedlight.compat.jsonargparse_help.FedlightHelpFormatter)."""

    #: The subcommand this parser reads (``fit``); "" for the top level. A class attribute,
    #: since jsonargparse builds the parser of a class's --*.help as ``type(parser)(...)``.
    command = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("prog", f"fedlight {self.command}".strip())
        if self.command:
            kwargs.setdefault("usage", f"fedlight {self.command} [options]")
        kwargs.setdefault("formatter_class", FedlightHelpFormatter)
        # an abbreviated option (--trainer.round for --trainer.rounds) is refused with a "did
        # you mean": accepted, a typo could select another option silently
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    @staticmethod
    @functools.cache
    def of_command(command: str) -> type[FedlightParser]:
        """The FedlightParser class of ``fedlight <command>``."""
        return type(f"{command.title()}Parser", (FedlightParser,), {"command": command})

    def add_method_arguments(self, class_type: Any, method_name: str, *args: Any,
                             **kwargs: Any) -> list[str]:
        """jsonargparse's add_method_arguments, with the group titled run options (rather
        than with the first line of the method's docstring)."""
        added: list[str] = super().add_method_arguments(class_type, method_name, *args,
                                                        **kwargs)
        if method_name in self.groups:
            self.groups[method_name].title = "run options"
        return added

    def parse_args(self, args: Any = None, *more: Any, **kwargs: Any) -> Any:
        """jsonargparse's parse_args, remembering the config files the arguments name."""
        self.config_files = config_files(sys.argv[1:] if args is None else args)
        return super().parse_args(args, *more, **kwargs)

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:  # type: ignore[override]
        raise UsageError(message, getattr(self, "config_files", ())) from ex


class CommandParser(argparse.ArgumentParser):
    """The argparse parser of a plain ``fedlight`` tool (report, interpolate,
    export-partition): its errors are raised as UsageError (one line, exit code 2, from
    ``fedlight``'s main), and no option is taken from an abbreviation of its name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def config_files(args: Any) -> list[str]:
    """The files of the ``-c`` / ``--config`` arguments of a command line."""
    if not isinstance(args, (list, tuple)):
        return []
    args = [str(a) for a in args]
    files = [value for flag, value in zip(args, args[1:], strict=False)
             if flag in ("-c", "--config")]
    return files + [a.split("=", 1)[1] for a in args if a.startswith("--config=")]


__all__ = ["CommandParser", "FedlightParser", "config_files"]
