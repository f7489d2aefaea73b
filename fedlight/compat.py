"""The places where fedlight relies on another package beyond its public interface.

Everything here reads or overrides something the package does not promise to keep (a private
method, the wording of a message). Each section names what it depends on and why no public
interface serves; ``tests/test_compat.py`` checks every assumption against the installed
versions and fails with the name of the one that broke, and ``pyproject.toml`` pins the upper
bounds those tests passed with. Nothing outside this module may use an underscore name of
lightning, jsonargparse, flwr, wandb or torch.amp.
"""

from __future__ import annotations

import inspect
import pydoc
import re
import textwrap
from argparse import Action
from dataclasses import dataclass
from typing import Any

from jsonargparse import DefaultHelpFormatter
from lightning.pytorch.cli import LightningCLI

# ============================================================================ lightning
#: The private LightningCLI steps that ``LightningCLI.__init__`` calls and fedlight disables
#: (checked by tests/test_compat.py).
DISABLED_CLI_STEPS = ("_parse_ckpt_path", "_set_seed")


class LightningCLISteps(LightningCLI):
    """LightningCLI without two steps of its ``__init__`` that have no public switch:

    - ``_parse_ckpt_path`` reads model hyper-parameters from a Lightning checkpoint given as
      ``--ckpt_path``; a fedlight checkpoint holds a federated run's state instead (and
      ``--ckpt_path last`` names a run, not a file).
    - ``_set_seed`` seeds from ``--seed_everything``, which fedlight does not have (the run's
      one seed is ``trainer.seed``, applied in the public ``before_instantiate_classes``).
    """

    def _parse_ckpt_path(self) -> None:
        """Disabled (see the class docstring)."""

    def _set_seed(self) -> None:
        """Disabled (see the class docstring)."""


# ============================================================================ jsonargparse
# jsonargparse reports a bad value as one multi-line message text (an ``ArgumentError``)
# with no structured fields; fedlight turns it into one line by reading that text. The
# formats read here are those of jsonargparse 4.27-4.53: ``Parser key "<key>":`` followed
# by an indented reason, Union errors listing each subtype's error as an indented ``- ``
# bullet under ``Errors:``, ``Expected a <class 'T'>. Got value: V``,
# ``Expected a typing.Literal[...]. Got value: V`` (in a Union's bullet without the value,
# which the Union error gives as ``Given value: V``), ``File does not exist: <path>``,
# ``Expected a dot import path string: <name>`` and the unknown-option messages. A class
# path that names no class reads ``Problem with given class_path '<path>':`` or ``Expected a
# path but <path> either not accessible or invalid``; a Union error lists the option's types
# as ``Subtypes: [<class 'a.B'>, list[a.C], ...]``; a config file that is not valid YAML
# reads ``Problems parsing config: <PyYAML's problem>`` followed by PyYAML's mark.

_KEY = re.compile(r'\s*Parser key "([^"]+)":[ \t]*(.*)', re.S)
_TYPE = re.compile(r"Expected a <class '([\w.]+)'>\. Got value: (.*)$", re.S)
_LITERAL = re.compile(r"Expected a typing\.Literal\[(.*?)\](?:\. Got value: (.*))?$", re.S)
_GIVEN = re.compile(r"^\s*Given value: (.*)$", re.M)
_MISSING_FILE = re.compile(r"File does not exist: (.+)$")
_CLASS_NAME = re.compile(r"Expected a dot import path string: (\S+)")
_CLASS_PATH = (re.compile(r"Problem with given class_path '([^']+)'"),
               re.compile(r"Expected a path but (\S+) either not accessible or invalid"))
_SUBTYPES = re.compile(r"^\s*Subtypes: \[(.*)\]$", re.M)
_SUBTYPE_CLASS = re.compile(r"([A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)+)")
_YAML_SYNTAX = re.compile(r"Problems parsing config\s*:")
_UNKNOWN_OPTION = (re.compile(r"does not accept option '([^']+)'"),
                   re.compile(r"Option '([^']+)' is not accepted"),
                   re.compile(r"unrecognized arguments: (?:\w+ )?--?([^\s=]+)"))


@dataclass
class ParserError:
    """A jsonargparse error message read into its parts.

    Attributes:
        keys: the option path, outermost first (``["model", "lr"]``).
        reason: the innermost error text, without the key wrapping.
        expected: the expected type name of a type error (``float``), else None.
        choices: the valid values of a ``Literal`` option, else None.
        value: the bad value of a type, choice or class-name error, else None.
        missing_file: the path of a config file that does not exist, else None.
        unknown_class: the name given to a class option that names no class (a short name
            or a class path), else None.
        unknown_option: an option name the parser does not accept, else None.
        subtypes: the class paths of the types a Union option accepts (its base classes,
            ``fedlight.core.rules.ServerRule``), where the message lists them.
        yaml_syntax: whether a config file could not be parsed as YAML.
    """

    keys: list[str]
    reason: str
    expected: str | None = None
    choices: list[str] | None = None
    value: str | None = None
    missing_file: str | None = None
    unknown_class: str | None = None
    unknown_option: str | None = None
    subtypes: list[str] | None = None
    yaml_syntax: bool = False


def read_parser_error(text: str) -> ParserError:
    """Read jsonargparse's message ``text`` into a :class:`ParserError`."""
    keys: list[str] = []
    given = subtypes = None
    yaml_syntax = bool(_YAML_SYNTAX.search(text))
    text = text.strip()
    while True:
        listed = _SUBTYPES.search(text)
        if listed and subtypes is None:
            subtypes = [path for path in _SUBTYPE_CLASS.findall(listed.group(1))
                        if path != "NoneType"]
        key = _KEY.match(text)
        if key:
            keys.append(key.group(1))
            text = textwrap.dedent(key.group(2).lstrip("\n")).rstrip()
            continue
        inner = _first_real_bullet(text)
        if inner is None or inner == text:
            break
        given = _GIVEN.search(text) or given
        text = inner
    error = ParserError(keys, text.splitlines()[-1].strip() if text else text,
                        subtypes=subtypes, yaml_syntax=yaml_syntax)
    typed, literal = _TYPE.search(text), _LITERAL.search(text)
    if literal:
        error.choices = [v.strip(" '\"") for v in literal.group(1).split(",")]
        value = literal.group(2) or (given.group(1) if given else None)
        error.value = value.strip() if value is not None else None
    elif typed:
        error.expected, error.value = typed.group(1), typed.group(2).strip()
    missing = _MISSING_FILE.search(text)
    if missing:
        error.missing_file = missing.group(1).strip()
    for pattern in (_CLASS_NAME, *_CLASS_PATH):
        name = pattern.search(text)
        if name:
            error.unknown_class = error.value = name.group(1)
            break
    for pattern in _UNKNOWN_OPTION:
        unknown = pattern.search(text)
        if unknown:
            error.unknown_option = unknown.group(1)
            break
    return error


def _first_real_bullet(text: str) -> str | None:
    """The first ``- `` bullet (with its further lines, indented at least as far) of a Union
    error that is not the ``NoneType`` alternative's; None when ``text`` has no bullets."""
    bullets: list[list[str]] = []
    indent = None
    for line in text.splitlines():
        stripped = line.lstrip()
        depth = len(line) - len(stripped)
        if not stripped:
            continue
        if stripped.startswith("- ") and indent in (None, depth):
            indent = depth
            bullets.append([" " * (depth + 2) + stripped[2:]])
        elif indent is not None and depth >= indent:  # a bullet's own further lines
            bullets[-1].append(line)
        elif indent is not None:
            break  # the list ended: the rest belongs to the outer message
    texts = [textwrap.dedent("\n".join(b)) for b in bullets]
    useful = [t for t in texts if not t.startswith("Expected a <class 'NoneType'>")]
    if not useful:
        return None
    # the alternative that got furthest: a nested key or a class-name error, else the first
    useful.sort(key=lambda t: not (t.startswith("Parser key") or _CLASS_NAME.search(t)
                                   or any(p.search(t) for p in _CLASS_PATH)))
    return useful[0]


# jsonargparse's help formatter: argparse documents no method of a help formatter (only the
# class names are public). jsonargparse appends the classes a class-typed option accepts to
# its help as ``, known subclasses: <class path>, ...)``, the declared base class included,
# and writes types as ``Literal['a', 'b']`` and ``Union[X, Y]`` (jsonargparse 4.27-4.53).

_KNOWN_SUBCLASSES = re.compile(r", known subclasses: ([^)]*)\)$")
_LITERAL_TYPE = re.compile(r"Literal\[((?:'[^']*'(?:, )?)+)\]")
_UNION_TYPE = re.compile(r"Union\[(.*)\]")


class FedlightHelpFormatter(DefaultHelpFormatter):
    """jsonargparse's help with three changes: lines wrap between words only (a class path is
    never cut), a class-typed option lists only the classes a user can pass (see
    :func:`selectable_classes`), and types read as the metavars do (see
    :func:`readable_type`)."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_long_words=False,
                             break_on_hyphens=False)

    def _get_type_str(self, action: Action) -> str | None:
        text: str | None = super()._get_type_str(action)
        return None if text is None else readable_type(text)

    def _get_help_string(self, action: Action) -> str:
        text: str = super()._get_help_string(action)
        listed = _KNOWN_SUBCLASSES.search(text)
        if listed is None:
            return text
        kept = selectable_classes([path.strip() for path in listed.group(1).split(",")])
        return text[:listed.start()] + (f", known subclasses: {', '.join(kept)})" if kept else ")")


def readable_type(text: str) -> str:
    """jsonargparse's type text with the valid values of a choice in argparse's notation of
    choices and a union as alternatives: ``Union[Literal['csv', 'wandb'], list[Literal['csv',
    'wandb']], bool]`` -> ``{csv,wandb} | list[{csv,wandb}] | bool``."""
    text = _LITERAL_TYPE.sub(
        lambda choice: "{" + ",".join(re.findall(r"'([^']*)'", choice.group(1))) + "}", text)
    union = _UNION_TYPE.fullmatch(text)
    return " | ".join(top_level_items(union.group(1))) if union else text


def top_level_items(text: str) -> list[str]:
    """The comma-separated items of text that are not inside brackets or braces."""
    items: list[str] = []
    depth = start = 0
    for i, char in enumerate(text):
        depth += (char in "[{") - (char in "]}")
        if char == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    return [*items, text[start:].strip()]


def selectable_classes(class_paths: list[str]) -> list[str]:
    """The class paths of ``class_paths`` without abstract classes and without the base class
    every other listed class derives from (the option's declared type, e.g. FederatedClient
    for --model), which are there to be subclassed, not passed."""
    classes = {path: pydoc.locate(path) for path in class_paths}

    def is_base(cls: type) -> bool:
        return all(issubclass(other, cls) for other in classes.values()
                   if isinstance(other, type) and other is not cls)

    return [path for path, cls in classes.items()
            if isinstance(cls, type) and not inspect.isabstract(cls) and not is_base(cls)]


# ===================================================================== flwr


def stamp_message_id(message: Any, message_id: str) -> None:
    """Give a Message the id a SuperLink would give it when it is pushed. Flower's Message has
    no public setter (the id is assigned by the SuperLink); fedlight's in-process grid
    (fedlight.flower.inline), which stands in for the SuperLink, needs it so replies point
    at their message."""
    message.metadata.__dict__["_message_id"] = message_id


def empty_flower_run(run_id: int) -> Any:
    """The Run record a Grid reports, for a grid without a SuperLink (flwr.supercore.run.Run
    is not exported by flwr.app / flwr.serverapp)."""
    from flwr.supercore.run import Run

    return Run.create_empty(run_id=run_id)


def set_task_identity(run_id: int, task_id: int, node_id: int) -> None:
    """Who stamps the messages a ServerApp creates in this process: what Flower's own
    in-process entry points set before calling a ServerApp (no public setter)."""
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = run_id, task_id, node_id


# ===================================================================== torch.amp


def restart_growth(scaler: Any, scale: float) -> None:
    """Set a GradScaler's scale and restart its growth counter: through its state_dict, whose
    growth-counter key is spelled with an underscore (there is no public setter)."""
    state = scaler.state_dict()
    state.update(scale=float(scale), _growth_tracker=0)
    scaler.load_state_dict(state)


__all__ = ["DISABLED_CLI_STEPS", "FedlightHelpFormatter", "LightningCLISteps", "ParserError",
           "empty_flower_run", "read_parser_error", "readable_type", "restart_growth",
           "selectable_classes", "set_task_identity", "stamp_message_id"]
