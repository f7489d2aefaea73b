"""One-line user errors of the ``fedlight`` command line and of every config fedlight
reads.

A user error (a bad option, value, file or name) is printed as ``error: <message>`` with a
"did you mean" where a close name exists, and exits with code 2; no usage dump, no traceback.
Set the environment variable FEDLIGHT_DEBUG=1 to get the traceback instead.
"""

from __future__ import annotations

import difflib
import inspect
import os
import pydoc
import re
import sys
import traceback
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import torch
import yaml

from fedlight.compat.jsonargparse_errors import ParserError, read_parser_error
from fedlight.core.errors import FedlightError
from fedlight.core.paths import resolution_note

DEBUG_VARIABLE = "FEDLIGHT_DEBUG"


class UsageError(FedlightError):
    """A command line the parser refused (unknown option, bad value, missing file).

    ``config_files``: the config files (``-c``) of the refused command line, so that an option
    a file names can be traced to the file."""

    def __init__(self, message: str, config_files: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.config_files = tuple(config_files)


def file_naming(key: str, files: Iterable[str]) -> str | None:
    """The last of ``files`` (a later file overrides an earlier one) whose YAML holds the
    dotted option ``key`` (``data.bta``), or None."""
    found = None
    for file in files:
        try:
            node: Any = yaml.safe_load(Path(file).read_text())
        except (OSError, yaml.YAMLError):
            continue
        for part in key.split("."):
            if part == "init_args" and isinstance(node, dict) and part not in node:
                continue  # the YAML may leave out init_args
            if not isinstance(node, dict) or part not in node:
                break
            node = node[part]
        else:
            found = file
    return found


#: Exceptions that are the user's to fix: printed in one line, no traceback. Every other
#: exception (a ValueError raised inside torch, a bug of fedlight) keeps its traceback.
USER_ERRORS = (FedlightError,)


def debugging() -> bool:
    return os.environ.get(DEBUG_VARIABLE, "") not in ("", "0")


def exit_with_error(error: BaseException) -> NoReturn:
    """Print the one line ``error: <message>`` on stderr and exit with code 2. In a
    multi-process run every rank raises the error; only rank 0 prints it."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()
            and torch.distributed.get_rank() != 0):
        print(f"error: {user_message(error)}", file=sys.stderr)
    sys.exit(2)


def wrapped_user_error(error: BaseException) -> FedlightError | None:
    """The user error behind ``error`` when jsonargparse wrapped it: instantiating a config's
    classes, jsonargparse re-raises a constructor's error (``lr must be positive``) as a
    ValueError of its own. None for any other exception."""
    seen: BaseException | None = error
    while seen is not None and not isinstance(seen, FedlightError):
        frames = traceback.extract_tb(seen.__traceback__)
        if not frames or "jsonargparse" not in frames[-1].filename:
            return None
        seen = seen.__cause__ or seen.__context__
    return seen


def exit_with_fault(error: BaseException) -> NoReturn:
    """Print ``error``'s traceback on stderr, then a one-line hint where one applies, and exit
    with code 1: not a problem of the input, so the traceback is what says where it is."""
    traceback.print_exception(error)
    hint = fault_hint(error)
    if hint:
        print(hint, file=sys.stderr)
    sys.exit(1)


def fault_hint(error: BaseException) -> str | None:
    """A one-line hint for the faults a user can still work around."""
    if isinstance(error, torch.OutOfMemoryError):
        return ("fedlight: the device ran out of memory; lower trainer.batch_size, "
                "trainer.eval_batch_size or trainer.batched_clients")
    if isinstance(error, MemoryError):
        return ("fedlight: the machine ran out of memory; trainer.client_state_storage: disk "
                "keeps the clients' private states out of memory")
    return None


def user_message(error: BaseException) -> str:
    """The one-line message of a user error: jsonargparse's wrapping read into the option
    path and the reason (:func:`fedlight.compat.jsonargparse_errors.read_parser_error`), with
    the valid values and a "did you mean" where they are known, and, where it names a path a
    config resolved (:class:`fedlight.core.paths.ConfigPath`), that path as it was
    configured."""
    message = parsed_message(error)
    return message + resolution_note(message)


def parsed_message(error: BaseException) -> str:
    """:func:`user_message` without the note on resolved paths."""
    parsed = read_parser_error(str(error))
    key = ".".join(k for k in parsed.keys if k != "init_args")
    files = getattr(error, "config_files", ())
    syntax = yaml_syntax_error(files) if parsed.yaml_syntax else None
    if syntax is not None:
        return syntax
    moved = moved_data_option(parsed, key, files)
    if moved is not None:
        return moved
    if parsed.unknown_class and (key == "model" or parsed.reason.startswith("--model")):
        return unknown_model(parsed.unknown_class)
    if parsed.missing_file:
        return f"config file {parsed.missing_file} does not exist"
    prefix = f"{key}: " if key else ""
    if parsed.unknown_class and parsed.subtypes:
        return prefix + unknown_class(parsed.unknown_class, parsed.subtypes)
    file = file_naming(parsed.unknown_option or "", files)
    if file is not None:  # an option of a YAML file: say which file
        prefix = f"{file}: {prefix}"
    if parsed.choices is not None:
        return (f"{prefix}got {parsed.value!r}; valid: {', '.join(parsed.choices)}"
                + did_you_mean(parsed.value or "", parsed.choices))
    if parsed.expected is not None:
        return f"{prefix}expected a {parsed.expected}, got {parsed.value!r}"
    return prefix + parsed.reason + _suggestion(parsed)


def moved_data_option(parsed: ParserError, key: str, files: Iterable[str]) -> str | None:
    """The one line naming the new form of an option of the data section's flat form
    (``data.beta``, ``data.source: cifar10``; fedlight.data.moved), with its value where a
    config file gives it; None for any other error."""
    from fedlight.data.moved import moved_message

    option = parsed.unknown_option or (key if parsed.unknown_class else "")
    if not option.startswith("data."):
        return None
    if parsed.unknown_class:
        return moved_message(option, parsed.unknown_class)
    file = file_naming(option, files)
    if file is None:
        return moved_message(option)
    node: Any = yaml.safe_load(Path(file).read_text())
    for part in option.split("."):
        node = node.get(part, node) if part == "init_args" else node[part]
    return moved_message(option, node)


def unknown_model(name: str) -> str:
    """An unknown ``--model`` (a short name or a class path), the models and the closest."""
    from fedlight.clients import CLIENTS

    return (f"unknown model {name!r}; valid: {', '.join(sorted(CLIENTS))}"
            + did_you_mean_class(name, CLIENTS))


def unknown_class(name: str, bases: Iterable[str]) -> str:
    """An unknown class (a short name or a class path) given where subclasses of ``bases``
    (class paths) are expected: the classes a user can pass and the closest."""
    if "." in name:  # the classes of the module the path names count too
        pydoc.locate(name.rsplit(".", 1)[0])
    classes = subclasses(bases)
    return (f"unknown class {name!r}; valid: {', '.join(classes)}"
            + did_you_mean_class(name, classes))


def subclasses(bases: Iterable[str]) -> dict[str, type]:
    """The classes a user can pass for ``bases`` (class paths) by their short name, sorted:
    every concrete subclass imported so far, the bases themselves left out."""
    found: dict[str, type] = {}
    pending = [cls for cls in map(pydoc.locate, bases) if isinstance(cls, type)]
    while pending:
        for sub in pending.pop().__subclasses__():
            pending.append(sub)
            if not inspect.isabstract(sub) and not sub.__name__.startswith("_"):
                found.setdefault(sub.__name__, sub)
    return dict(sorted(found.items()))


def did_you_mean_class(name: str, classes: Mapping[str, type]) -> str:
    """``"; did you mean ..."`` for the class of ``classes`` (by short name) closest to
    ``name``, written as it was given: a short name, or a class path (``fedlight.clients.GPFLL``
    -> ``fedlight.clients.GPFL``, the canonical path where that one does not import)."""
    module, _, short = name.rpartition(".")
    close = difflib.get_close_matches(short, list(classes), n=1, cutoff=0.6)
    if not close or close[0] == name:
        return ""
    cls = classes[close[0]]
    if not module:
        return f"; did you mean {close[0]!r}?"
    path = f"{module}.{close[0]}"
    if pydoc.locate(path) is not cls:
        path = f"{cls.__module__}.{cls.__qualname__}"
    return f"; did you mean {path!r}?"


#: What the parser expected where PyYAML's problem does not say it.
YAML_EXPECTED = {
    "mapping values are not allowed here": "expected the key indented as the keys beside it, "
                                           "or the value quoted (it holds ': ')",
    "cannot start any token": "expected spaces (YAML indents with spaces, not tabs)",
    "found unexpected end of stream": "expected the closing quote or bracket",
}


def yaml_syntax_error(files: Iterable[str]) -> str | None:
    """The one-line message of the first of ``files`` that is not valid YAML (None when all
    are): :func:`describe_yaml_error`."""
    import yaml

    for file in files:
        try:
            read_yaml_file(file)
        except UsageError as error:
            return str(error)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
    return None


def read_yaml_file(path: str | Path) -> Any:
    """The content of a YAML file; a syntax error is a UsageError whose one line says where
    and what (:func:`describe_yaml_error`)."""
    import yaml

    text = Path(path).read_text()
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        raise UsageError(describe_yaml_error(path, text, error)) from None


def describe_yaml_error(file: str | Path, text: str, error: Any) -> str:
    """A PyYAML syntax error (``yaml.MarkedYAMLError``) of ``file`` (holding ``text``) as one
    line: the file, line and column, the problem, what the parser expected and the line."""
    mark = error.problem_mark
    problem = str(error.problem or error.context or "not valid YAML")
    expected = next((hint for known, hint in YAML_EXPECTED.items() if known in problem), "")
    context = error.context if error.context and error.context_mark else ""
    if context:
        context = f" ({context} from line {error.context_mark.line + 1})"
    lines = text.splitlines()
    shown = lines[mark.line].rstrip() if mark and mark.line < len(lines) else ""
    where = f"{file}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(file)
    return (f"{where}: not valid YAML: {problem}{context}" + (f"; {expected}" if expected else "")
            + (f"; the line reads {shown!r}" if shown.strip() else ""))


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """``"; did you mean 'X'?"`` for the closest candidate, or an empty string."""
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _suggestion(parsed: ParserError) -> str:
    """``"; did you mean ..."`` for an unknown option or a name fedlight listed as invalid."""
    listed = re.search(r"unknown [\w ]+ '([^']+)'; valid: ([^;]+)", parsed.reason)
    if listed and "did you mean" not in parsed.reason:  # fedlight's own message format
        return did_you_mean(listed.group(1), re.split(r"[,\s]+", listed.group(2).strip()))
    if not parsed.unknown_option or "did you mean" in parsed.reason:  # a message read again
        return ""
    name = parsed.unknown_option
    names = option_names()
    pool = names if "." in name else {n.rsplit(".", 1)[-1] for n in names}
    abbreviated = any(option.startswith(name) for option in pool)
    return ("; options are never abbreviated" if abbreviated else "") + did_you_mean(name, pool)


def option_names() -> set[str]:
    """Every option of ``fedlight fit``: trainer.*, data.*, model.* of every client class."""
    from fedlight.clients import CLIENTS
    from fedlight.data.datamodule import FederatedDataModule
    from fedlight.federation.options import TrainerOptions

    names = {"ckpt_path", "server", "config"}
    sections = [("trainer", TrainerOptions), ("data", FederatedDataModule)]
    sections += [("model", cls) for cls in CLIENTS.values()]
    for section, cls in sections:
        for parameter in list(inspect.signature(cls.__init__).parameters)[1:]:
            if parameter not in ("args", "kwargs"):
                names.update({f"{section}.{parameter}", f"{section}.init_args.{parameter}"})
    return names


__all__ = ["DEBUG_VARIABLE", "USER_ERRORS", "UsageError", "debugging", "describe_yaml_error",
           "did_you_mean", "did_you_mean_class", "exit_with_error", "exit_with_fault",
           "fault_hint", "file_naming", "moved_data_option", "option_names", "parsed_message",
           "read_yaml_file", "subclasses", "unknown_class", "unknown_model", "user_message",
           "wrapped_user_error", "yaml_syntax_error"]
