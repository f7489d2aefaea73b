"""jsonargparse's help text as a user can act on it: fedlight's help formatter."""

from __future__ import annotations

import inspect
import pydoc
import re
import textwrap
from argparse import Action

from jsonargparse import DefaultHelpFormatter

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


__all__ = ["FedlightHelpFormatter", "readable_type", "selectable_classes", "top_level_items"]
