"""Paths a config names, resolved where the config is: :class:`ConfigPath`.

An argument annotated ``ConfigPath`` (a data source's ``root``, ``data.partition_file``) is
read by ``fedlight fit -c CONFIG`` as a path relative to the folder of the config file that
names it (as a sweep file's ``base`` is), relative to the working folder when it is given on
the command line, with ``~`` expanded and absolute paths as they are. The parsed value is the
absolute path, so a run's ``config.yaml`` reads the same from any folder. A class of a later
kind (a data source given as ``class_path``) gets the same by annotating its path arguments
``ConfigPath``; Python callers pass plain strings, used as they are.
"""

from __future__ import annotations

import os
import re

#: Every path resolved in this process: absolute path -> (the value as configured, the folder
#: it was resolved against), so that an error naming the path can say where it came from.
RESOLVED: dict[str, tuple[str, str]] = {}


class ConfigPath(str):
    """A path option (a str) resolved against the folder of the config file that names it.

    jsonargparse calls :meth:`resolve` on each value it parses, with the working folder set to
    the config file's folder while it reads a config file (fedlight.config registers it)."""

    @classmethod
    def resolve(cls, value: str | os.PathLike[str]) -> ConfigPath:
        """``value`` as an absolute path: ``~`` expanded, a relative path joined to the
        working folder (the config file's folder while a config file is read)."""
        configured = os.fspath(value)
        folder = os.getcwd()
        resolved = os.path.normpath(os.path.join(folder, os.path.expanduser(configured)))
        if resolved != configured:
            RESOLVED[resolved] = (configured, folder)
        return cls(resolved)


def resolution_note(message: str) -> str:
    """``"; ... resolved against ..."`` for the resolved path a message names (the longest
    one, where several are inside each other), or an empty string."""
    named = [path for path in RESOLVED
             if re.search(re.escape(path) + r"(?![\w.-])", message)]  # not a longer name
    if not named:
        return ""
    path = max(named, key=len)
    configured, folder = RESOLVED[path]
    return f" ({configured!r} as configured, resolved against {folder} to {path})"


__all__ = ["RESOLVED", "ConfigPath", "resolution_note"]
