"""Reading a sweep file (and the command line's lists on top) into its cells."""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fedlight.sweep.sweep_file_error import SweepError, mapping

SWEEP_KEYS = ("name", "base", "overrides", "methods", "settings", "seeds", "seed_keys", "grid",
              "select", "columns", "search")
METHOD_KEYS = ("class_path", "init_args", "config", "overrides")
SELECT_MODES = ("validation",)
#: Sections whose nested mappings are flattened into dotted entries (other mappings, such as
#: a server: class_path / init_args block or backbone_kwargs, are one value).
NESTED = ("model", "model.init_args", "data", "trainer")


@dataclass(frozen=True)
class Cell:
    """One run of the grid (or one trial of a search), before its configuration is resolved."""

    method: str
    setting: str
    point: tuple[tuple[str, Any], ...]
    seed: int
    args: tuple[str, ...]  # fedlight fit arguments

    @property
    def row(self) -> str:
        """The setting as the tables show it: its label and the grid point."""
        values = " ".join(f"{key.rsplit('.', 1)[-1]}={value}" for key, value in self.point)
        return " ".join(part for part in (self.setting, values) if part)

    @property
    def label(self) -> str:
        """``<method> / <row> / seed <seed>`` (the method left out where the base config's
        own runs)."""
        return " / ".join(part for part in (self.method, self.row or "base", f"seed {self.seed}")
                          if part)


@dataclass
class Sweep:
    """A sweep file read and checked: its cells, and what builds a cell of any point (a
    search builds one per trial)."""

    name: str
    cells: list[Cell]
    select: str | None = None
    columns: tuple[str, ...] = ()
    #: the search: section (fedlight.sweep.search_spec.SearchSpec), None for a grid
    search: Any = None
    base_arguments: list[str] = field(default_factory=list)
    method_arguments: dict[str, list[str]] = field(default_factory=dict)
    setting_arguments: dict[str, list[str]] = field(default_factory=dict)
    seed_keys: tuple[str, ...] = ("trainer.seed",)

    def cell(self, method: str, setting: str, point: tuple[tuple[str, Any], ...],
             seed: int) -> Cell:
        """The cell of a method, setting, point (config entries) and seed."""
        arguments = [*self.base_arguments, *self.setting_arguments[setting],
                     *self.method_arguments[method], *as_arguments(point),
                     *as_arguments([(key, seed) for key in self.seed_keys])]
        return Cell(method, setting, point, seed, tuple(arguments))


def flatten(fragment: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``{"data": {"beta": 0.1}}`` -> ``("data.beta", 0.1)``; a model mapping with a
    class_path gives ``("model", class_path)`` first."""
    for key, value in fragment.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and name in NESTED:
            inner = dict(value)
            if name == "model" and "class_path" in inner:
                yield "model", inner.pop("class_path")
            yield from flatten(inner, f"{name}.")
        else:
            yield name, value


def as_arguments(entries: Sequence[tuple[str, Any]]) -> list[str]:
    """Config entries as ``fedlight fit`` options (non-strings as JSON, which the parser
    reads as YAML)."""
    return [f"--{key}={value if isinstance(value, str) else json.dumps(value)}"
            for key, value in entries]


def method_arguments(label: str, spec: Any, folder: Path) -> list[str]:
    """The fit options of one ``methods`` entry (a class name, or a mapping of METHOD_KEYS)."""
    if isinstance(spec, str):
        spec = {"class_path": spec}
    spec = mapping(spec, f"methods: {label}")
    unknown = [k for k in spec if k not in METHOD_KEYS]
    if unknown:
        raise SweepError(f"methods: {label}: unknown key {unknown[0]!r}; valid: "
                         f"{', '.join(METHOD_KEYS)}")
    configs = spec.get("config") or []
    arguments: list[str] = []
    for config in [configs] if isinstance(configs, str) else configs:
        path = (folder / config).resolve()
        if not path.is_file():
            raise SweepError(f"methods: {label}: config {str(path)!r} does not exist")
        arguments += ["-c", str(path)]
    if "class_path" in spec:
        arguments.append(f"--model={spec['class_path']}")
    init_args = mapping(spec.get("init_args"), f"methods: {label}: init_args")
    entries = [(f"model.init_args.{k}", v) for k, v in init_args.items()]
    entries += list(flatten(mapping(spec.get("overrides"), f"methods: {label}: overrides")))
    return arguments + as_arguments(entries)


def _seeds(value: Any) -> list[int]:
    if isinstance(value, bool) or value is None:
        raise SweepError(f"seeds must be a count or a list of integers, got {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise SweepError(f"seeds must be at least 1, got {value}")
        return list(range(value))
    if not isinstance(value, list) or not value or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in value):
        raise SweepError(f"seeds must be a count or a non-empty list of integers, got {value!r}")
    return value


def _methods(spec: Mapping[str, Any], folder: Path) -> dict[str, list[str]]:
    methods = spec.get("methods")
    if methods is None:
        methods = {"": {}}  # the base config's own method
    elif isinstance(methods, list):
        if not all(isinstance(m, str) for m in methods):
            raise SweepError(f"methods as a list must hold class names, got {methods!r}")
        methods = {m: m for m in methods}
    methods = mapping(methods, "methods")
    if not methods:
        raise SweepError("methods is empty: give at least one method (or leave it out to run "
                         "the base config's)")
    return {label: method_arguments(label, entry, folder) for label, entry in methods.items()}


def _settings(spec: Mapping[str, Any]) -> dict[str, list[str]]:
    settings = mapping(spec.get("settings"), "settings") if "settings" in spec else {"": {}}
    if not settings:
        raise SweepError("settings is empty: give at least one setting (or leave it out)")
    return {label: as_arguments(list(flatten(mapping(entries, f"settings: {label}"))))
            for label, entries in settings.items()}


def _grid(spec: Mapping[str, Any]) -> dict[str, list[Any]]:
    grid = mapping(spec.get("grid"), "grid")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise SweepError(f"grid: {key} must be a non-empty list of values, got {values!r}")
    return grid


def _check_search(spec: Mapping[str, Any], grid: Mapping[str, Any], seeds: list[int]) -> None:
    """What a search (one run per trial, its points drawn by Optuna) cannot combine with."""
    if grid:
        raise SweepError(f"search: give the searched keys in search: space, not in grid "
                         f"(got grid: {', '.join(grid)})")
    if spec.get("select"):
        raise SweepError("search: the study chooses the point: leave select out")
    if len(seeds) > 1:
        raise SweepError(f"search: a trial is one run of one seed; got seeds {seeds}")


def read_sweep(spec: Mapping[str, Any], folder: Path, name: str) -> Sweep:
    """Expand a sweep (a sweep file's mapping) into its cells; paths are relative to
    ``folder``. Raises SweepError naming the bad entry."""
    unknown = [k for k in spec if k not in SWEEP_KEYS]
    if unknown:
        raise SweepError(f"unknown sweep key {unknown[0]!r}; valid: {', '.join(SWEEP_KEYS)}")
    name = str(spec.get("name") or name)
    base_arguments: list[str] = []
    if spec.get("base"):
        base = (folder / str(spec["base"])).resolve()
        if not base.is_file():
            raise SweepError(f"base config {str(base)!r} does not exist")
        base_arguments = ["-c", str(base)]
    # one process with one torch thread per run (--jobs runs side by side); overrides may
    # change either
    base_arguments += ["--trainer.threads=1", "--trainer.devices=1"]
    base_arguments += as_arguments(list(flatten(mapping(spec.get("overrides"), "overrides"))))
    grid = _grid(spec)
    seeds = _seeds(spec.get("seeds", [0]))
    seed_keys = spec.get("seed_keys", ["trainer.seed"])
    if not isinstance(seed_keys, list) or not seed_keys:
        raise SweepError(f"seed_keys must be a non-empty list of config keys, got {seed_keys!r}")
    search = None
    if "search" in spec:
        from fedlight.sweep.search_spec import read_search

        _check_search(spec, grid, seeds)
        search = read_search(spec["search"])
    select = spec.get("select")
    if select is not None and select not in SELECT_MODES:
        raise SweepError(f"select: unknown mode {select!r}; valid: {', '.join(SELECT_MODES)}")
    if select and not grid:
        raise SweepError("select: validation chooses among grid points: give a grid")
    columns = spec.get("columns") or []
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
        raise SweepError(f"columns must be a list of metrics.csv column names, got {columns!r}")
    sweep = Sweep(name, [], select, tuple(columns), search, base_arguments, _methods(spec, folder),
                  _settings(spec), tuple(seed_keys))
    points = [tuple(zip(grid, values, strict=True))
              for values in itertools.product(*grid.values())]
    sweep.cells = [sweep.cell(method, setting, point, seed) for method, setting, point, seed
                   in itertools.product(sweep.method_arguments, sweep.setting_arguments, points,
                                        seeds)]
    return sweep


def load_sweep(path: str | Path | None, options: argparse.Namespace) -> Sweep:
    """A sweep file (or none) with the command line's lists applied on top."""
    spec: dict[str, Any] = {}
    folder, name = Path.cwd(), "sweep"
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise SweepError(f"sweep file {str(path)!r} does not exist")
        try:
            spec = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as error:
            raise SweepError(f"sweep file {str(path)!r} is not valid YAML: "
                             f"{str(error).splitlines()[0]}") from error
        if not isinstance(spec, dict):
            raise SweepError(f"sweep file {str(path)!r} must hold a mapping, got {spec!r}")
        folder, name = path.resolve().parent, path.stem
    if options.config:
        spec["base"] = str(Path(options.config).resolve())
    if options.methods:
        given = spec.get("methods")
        known = given if isinstance(given, dict) else {}
        spec["methods"] = {m: known.get(m, m) for m in options.methods}
    if options.settings:
        given = mapping(spec.get("settings"), "settings")
        missing = [s for s in options.settings if s not in given]
        if missing:
            raise SweepError(f"--settings: unknown setting {missing[0]!r}; valid: "
                             f"{', '.join(given) or 'none (the file has no settings)'}")
        spec["settings"] = {s: given[s] for s in options.settings}
    if options.seeds:
        spec["seeds"] = options.seeds
    for entry in options.set or []:
        key, value = _key_value(entry, "--set")
        spec["overrides"] = {**mapping(spec.get("overrides"), "overrides"), key: value}
    for entry in options.grid or []:
        key, _ = _key_value(entry, "--grid")
        values = [yaml.safe_load(v) for v in entry.partition("=")[2].split(",")]
        spec["grid"] = {**mapping(spec.get("grid"), "grid"), key: values}
    if options.name:
        spec["name"] = options.name
    if options.select:
        spec["select"] = options.select
    if options.trials is not None:
        if "search" not in spec:
            raise SweepError("--trials: the sweep has no search: section")
        spec["search"] = {**mapping(spec["search"], "search"), "n_trials": options.trials}
    if not spec.get("base") and path is None:
        raise SweepError("give a sweep file or a base config (--config)")
    return read_sweep(spec, folder, name)


def _key_value(entry: str, option: str) -> tuple[str, Any]:
    key, sep, value = entry.partition("=")
    if not sep or not key:
        raise SweepError(f"{option} {entry!r}: expected KEY=VALUE, e.g. trainer.rounds=5")
    return key, yaml.safe_load(value)
