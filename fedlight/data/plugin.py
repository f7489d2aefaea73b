"""What data sources and partitions share as class_path objects of a config: their options
read back as plain values (a run's config.json), and a class_path mapping turned into one."""

from __future__ import annotations

import inspect
import os
import pydoc
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from fedlight.core.errors import ConfigError

__all__ = ["Plugin", "from_record", "plain", "recorded_name"]


class Plugin:
    """A class_path object whose constructor arguments are kept as attributes of the same
    name, so that it can be written back as the ``class_path`` / ``init_args`` it came from;
    ``str()`` gives its ``name`` (a run folder's ``<source>-<partition>``)."""

    #: The object's short name in run names and messages (``cifar10``, ``dirichlet``).
    name: ClassVar[str] = ""

    def options(self) -> dict[str, Any]:
        """The constructor arguments, as plain values (paths as strings, tuples as lists)."""
        names = [p for p in inspect.signature(type(self)).parameters
                 if p not in ("args", "kwargs")]
        return {n: plain(getattr(self, n)) for n in names}

    def record(self) -> dict[str, Any]:
        """The object as a config's ``class_path`` / ``init_args`` mapping."""
        cls = type(self)
        return {"class_path": f"{cls.__module__}.{cls.__qualname__}", "init_args": self.options()}

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        options = ", ".join(f"{k}={v!r}" for k, v in self.options().items())
        return f"{type(self).__name__}({options})"


def plain(value: Any) -> Any:
    """An option value as JSON has it: paths as strings, tuples as lists."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    return value


PluginT = TypeVar("PluginT", bound=Plugin)


def recorded_name(entry: Any, data: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """The name (``cifar10``, ``dirichlet``) and options of a recorded ``data.source`` or
    ``data.partition`` entry: a class_path mapping (its class's ``name``, its init_args), or a
    name as run folders written before sources and partitions were classes hold it, with the
    flat data section (``data``) holding its options."""
    if not isinstance(entry, Mapping):
        return str(entry), data
    path = str(entry.get("class_path", "?"))
    cls = pydoc.locate(path)
    name = getattr(cls, "name", "") or path.rsplit(".", 1)[-1].lower()
    return name, entry.get("init_args") or {}


def from_record(value: PluginT | Mapping[str, Any], base: type[PluginT],
                classes: Mapping[str, type[PluginT]], what: str) -> PluginT:
    """``value`` itself, or the object a ``{"class_path": ..., "init_args": {...}}`` mapping
    describes (a run's config.json, a Python caller): class_path a class name among
    ``classes``' values or a full path to a subclass of ``base``."""
    if isinstance(value, base):
        return value
    if not isinstance(value, Mapping) or "class_path" not in value:
        raise ConfigError(f"data.{what} must be a {base.__name__} or a mapping with class_path "
                          f"and init_args, got {value!r}")
    path = str(value["class_path"])
    by_class = {cls.__name__: cls for cls in classes.values()}
    cls = by_class.get(path) or pydoc.locate(path)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigError(f"unknown data.{what} class {path!r}; valid: "
                          f"{', '.join(sorted(by_class))}")
    return cls(**dict(value.get("init_args") or {}))
