"""jsonargparse's error messages read into their parts (the wording of jsonargparse 4.27-4.53)."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

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


__all__ = ["ParserError", "read_parser_error"]
