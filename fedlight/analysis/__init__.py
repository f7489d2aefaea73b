"""The papers' analyses of finished runs: ``fedlight analyze <analysis> RUN_DIR [options]``.

Every module of this package that defines ``analyze(run, out, **options)`` is an analysis,
named after its module (``fisher_knn`` -> ``fisher-knn``): a new analysis is one new file, no
registry to edit. Each writes a figure (PNG; PDF too with ``formats=("png", "pdf")``, ``--pdf``
on the command line; drawn with :mod:`fedlight.plotting`) and its numbers (CSV) into the run
folder (or ``out``); its module docstring names the paper figure it reproduces.

Python::

    from fedlight.analysis import analyze
    paths = analyze("tsne", "runs/gpfl-mnist5k-pathological-s0", perplexity=20)

Also here: :class:`fedlight.analysis.sparsity.FeatureSparsity`, a probe that logs the feature
sparsity of every round (what ``sparsity`` draws over rounds), and
:mod:`fedlight.analysis.dlg_table`, GPFL's Table 5 from a DLG sweep's ``runs.csv``.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from fedlight.core.errors import ConfigError
from fedlight.parsing.messages import did_you_mean
from fedlight.plotting import figure_formats


@functools.cache
def analyses() -> dict[str, ModuleType]:
    """Every analysis by name (modules that define an ``analyze`` function), sorted."""
    found = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        function = getattr(module, "analyze", None)
        if callable(function) and function.__module__ == module.__name__:
            found[info.name.replace("_", "-")] = module
    return found


def analysis(name: str) -> ModuleType:
    """The module of analysis ``name`` (ConfigError naming the valid ones)."""
    known = analyses()
    if name not in known:
        raise ConfigError(f"unknown analysis {name!r}; valid: {', '.join(known)}"
                          + did_you_mean(name, known))
    return known[name]


def analyze(name: str, run_dir: str | Path, out: str | Path | None = None,
            checkpoint: str = "last", formats: Sequence[str] | None = None,
            **options: Any) -> list[Path]:
    """Run analysis ``name`` on a finished run folder; write its CSV and its figure (in each
    of ``formats``: ``png``, ``pdf``; default PNG) into ``out`` (default: the run folder).
    Returns the paths written."""
    from fedlight.analysis.runs import load_finished_run

    module = analysis(name)
    figure_formats(formats)  # an unknown format is refused before the run is loaded
    run = load_finished_run(run_dir, checkpoint)
    written: list[Path] = module.analyze(run, Path(out) if out else run.folder,
                                         formats=formats, **options)
    return written


__all__ = ["analyses", "analysis", "analyze"]
