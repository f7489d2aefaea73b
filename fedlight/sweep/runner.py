"""The one place a sweep reaches ``fedlight fit``: resolving a cell's configuration and running
a configuration file, both as ``fedlight fit`` does."""

from __future__ import annotations

import contextlib
import functools
import resource
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import yaml

from fedlight.sweep.sweep_file_error import SweepError


def resolve_arguments(arguments: Sequence[str], label: str) -> dict[str, Any]:
    """The configuration ``fedlight fit ARGUMENTS`` would run (what its ``--print_config``
    prints), resolved by its parser; a refused command line is a SweepError ``<label>: <the
    parser's one-line message>``."""
    from fedlight.config import dump_config
    from fedlight.parsing.messages import USER_ERRORS, user_message

    parser = _fit_parser()
    try:
        with _quiet_cli():
            config = parser.parse_args(list(arguments))
            text = dump_config(parser, config)
    except USER_ERRORS as error:
        raise SweepError(f"{label}: {user_message(error)}") from None
    return yaml.safe_load(text)


@functools.cache
def _fit_parser() -> Any:
    """fedlight fit's argument parser, built once per process (building it costs about as
    much as a parse, and a sweep parses every cell)."""
    from fedlight.config import run_parser

    return run_parser()


def run_cell(config_file: str, resume: bool, resume_command: str | None = None
             ) -> dict[str, Any]:
    """Run one cell's ``fedlight fit`` in this process; its wall and CPU seconds, and the
    one-line error where it failed (a diverged run is a result, not a crash).
    ``resume_command`` is what a stopped run says resumes it (the sweep's own command)."""
    from fedlight.config import read_config
    from fedlight.parsing.messages import USER_ERRORS, user_message

    started, cpu_started = time.perf_counter(), cpu_seconds()
    error = None
    try:
        with _quiet_cli():
            run = read_config(config_file, ["--ckpt_path", "last"] if resume else [])
            run.trainer.command = f"fedlight fit -c {config_file}"
            run.trainer.resume_command = resume_command
            run.trainer.fit(run.model, run.datamodule, ckpt_path=run.ckpt_path,
                            server=run.server)
    except USER_ERRORS as failure:
        error = user_message(failure)
    return {"wall": time.perf_counter() - started, "cpu": cpu_seconds() - cpu_started,
            "resumed": resume, "error": error}


@contextlib.contextmanager
def _quiet_cli() -> Iterator[None]:
    """LightningCLI warns when given args while sys.argv holds the sweep's own options, and
    jsonargparse that dump's skip_none has a new name (as fedlight's fit)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        warnings.filterwarnings("ignore", message="(?s).*skip_none")
        yield


def cpu_seconds() -> float:
    """CPU seconds (user + system) this process and the children it waited for have used."""
    own, children = (resource.getrusage(resource.RUSAGE_SELF),
                     resource.getrusage(resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
