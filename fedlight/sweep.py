"""``fedlight sweep SWEEP.yaml``: a grid of ``fedlight fit`` runs, cached, resumable, tabulated.

A sweep file (YAML; paths in it are relative to the file)::

    name: gpfl_table1                # results go to sweeps/<name>/ unless --out
    base: ../../configs/gpfl/mnist5k_pathological.yaml   # the fit config every run starts from
    overrides: {trainer.rounds: 40}  # config entries (dotted or nested) for every run
    methods:                         # label: class name, or class_path / init_args / config /
      FedAvg: FedAvg                 #   overrides (extra config files and entries of that row)
      GPFL: {class_path: GPFL, init_args: {lamda: 0.01, mu: 0.1}}
    settings:                        # label: config entries (data / partition variants)
      pathological: {data.partition: pathological, data.classes_per_client: 2}
      dirichlet: {data.partition: dirichlet, data.beta: 0.1}
    seeds: 3                         # 0, 1, 2 (or a list); each sets every key of seed_keys
    seed_keys: [trainer.seed]        # e.g. [trainer.seed, data.seed]: a partition per seed
    grid: {model.init_args.lr: [0.005, 0.01]}   # every combination of these values
    select: validation               # optional: per method and setting, the grid point with
                                     #   the best validation accuracy (data.val_fraction > 0)
    columns: [hpm_accuracy_mean]     # optional: more metrics.csv columns (last value) to tabulate

Every run is a method x setting x grid point x seed. Its configuration is resolved by the
``fit`` parser (a method keeps the base's model arguments its class accepts, as
``--model NAME`` does) and keyed by a hash of the result: ``<out>/runs/<cell>-<key>/`` is its
run folder and ``<out>/runs/<cell>-<key>.json`` its record (wall and CPU seconds, or the
error). A cell with a record is never run again, so a sweep stopped or killed part-way resumes
where it stopped (a run with a checkpoint resumes from it); changing anything that changes the
result (the rounds too) makes a new cell. Written to ``<out>``: ``report.md`` (``fedlight
report``'s table of the runs, with wall and CPU seconds per run, and its plots), ``results.csv``
(the same groups: mean and std over seeds per column), ``runs.csv`` (one row per run), and
with ``select``, ``selection.md``. Runs of different lengths are never pooled. Each run is a W&B
run grouped under the sweep's name when ``trainer.logger`` includes wandb.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import functools
import hashlib
import itertools
import json
import multiprocessing
import os
import resource
import shutil
import statistics
import sys
import threading
import time
import warnings
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SWEEP_KEYS = ("name", "base", "overrides", "methods", "settings", "seeds", "seed_keys", "grid",
              "select", "columns")
METHOD_KEYS = ("class_path", "init_args", "config", "overrides")
SELECT_MODES = ("validation",)
#: Entries that say where and how a run reports, not what it computes: left out of the key.
OUTPUT_KEYS = ("trainer.default_root_dir", "trainer.run_name", "trainer.logger",
               "trainer.progress_bar", "trainer.verbose", "trainer.wandb_project",
               "trainer.wandb_group", "trainer.checkpoint_every", "data.root", "data.download",
               "ckpt_path")
#: Options added after sweeps were cached, at the value that computes what runs computed
#: before the option existed: left out of the key at that value, so finished cells stay valid.
NEUTRAL_DEFAULTS = {"trainer.batched_clients": 1}
#: Sections whose nested mappings are flattened into dotted entries (other mappings, such as
#: a server: class_path / init_args block or backbone_kwargs, are one value).
NESTED = ("model", "model.init_args", "data", "trainer")


class SweepError(ValueError):
    """A bad sweep file or command line (one line, naming the bad value and what is valid)."""


@dataclass(frozen=True)
class Cell:
    """One run of the grid, before its configuration is resolved."""

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
        return f"{self.method} / {self.row or 'base'} / seed {self.seed}"


@dataclass
class Sweep:
    """A sweep file read and checked."""

    name: str
    cells: list[Cell]
    select: str | None = None
    columns: tuple[str, ...] = ()


# ===================================================================== reading a sweep
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


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SweepError(f"{what} must be a mapping, got {value!r}")
    return dict(value)


def method_arguments(label: str, spec: Any, folder: Path) -> list[str]:
    """The fit options of one ``methods`` entry (a class name, or a mapping of METHOD_KEYS)."""
    if isinstance(spec, str):
        spec = {"class_path": spec}
    spec = _mapping(spec, f"methods: {label}")
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
    init_args = _mapping(spec.get("init_args"), f"methods: {label}: init_args")
    entries = [(f"model.init_args.{k}", v) for k, v in init_args.items()]
    entries += list(flatten(_mapping(spec.get("overrides"), f"methods: {label}: overrides")))
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
    base_arguments += as_arguments(list(flatten(_mapping(spec.get("overrides"), "overrides"))))

    methods = spec.get("methods")
    if methods is None:
        methods = {"": {}}  # the base config's own method
    elif isinstance(methods, list):
        if not all(isinstance(m, str) for m in methods):
            raise SweepError(f"methods as a list must hold class names, got {methods!r}")
        methods = {m: m for m in methods}
    methods = _mapping(methods, "methods")
    if not methods:
        raise SweepError("methods is empty: give at least one method (or leave it out to run "
                         "the base config's)")
    method_args = {label: method_arguments(label, entry, folder)
                   for label, entry in methods.items()}
    settings = _mapping(spec.get("settings"), "settings") if "settings" in spec else {"": {}}
    if not settings:
        raise SweepError("settings is empty: give at least one setting (or leave it out)")
    setting_args = {label: as_arguments(list(flatten(_mapping(entries, f"settings: {label}"))))
                    for label, entries in settings.items()}
    grid = _mapping(spec.get("grid"), "grid")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise SweepError(f"grid: {key} must be a non-empty list of values, got {values!r}")
    seeds = _seeds(spec.get("seeds", [0]))
    seed_keys = spec.get("seed_keys", ["trainer.seed"])
    if not isinstance(seed_keys, list) or not seed_keys:
        raise SweepError(f"seed_keys must be a non-empty list of config keys, got {seed_keys!r}")
    select = spec.get("select")
    if select is not None and select not in SELECT_MODES:
        raise SweepError(f"select: unknown mode {select!r}; valid: {', '.join(SELECT_MODES)}")
    if select and not grid:
        raise SweepError("select: validation chooses among grid points: give a grid")

    cells = []
    points = [tuple(zip(grid, values, strict=True))
              for values in itertools.product(*grid.values())]
    for method, setting, point, seed in itertools.product(methods, settings, points, seeds):
        arguments = [*base_arguments, *setting_args[setting], *method_args[method],
                     *as_arguments(point), *as_arguments([(k, seed) for k in seed_keys])]
        cells.append(Cell(method, setting, point, seed, tuple(arguments)))
    columns = spec.get("columns") or []
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
        raise SweepError(f"columns must be a list of metrics.csv column names, got {columns!r}")
    return Sweep(name, cells, select, columns=tuple(columns))


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
        given = _mapping(spec.get("settings"), "settings")
        missing = [s for s in options.settings if s not in given]
        if missing:
            raise SweepError(f"--settings: unknown setting {missing[0]!r}; valid: "
                             f"{', '.join(given) or 'none (the file has no settings)'}")
        spec["settings"] = {s: given[s] for s in options.settings}
    if options.seeds:
        spec["seeds"] = options.seeds
    for entry in options.set or []:
        key, value = _key_value(entry, "--set")
        spec["overrides"] = {**_mapping(spec.get("overrides"), "overrides"), key: value}
    for entry in options.grid or []:
        key, _ = _key_value(entry, "--grid")
        values = [yaml.safe_load(v) for v in entry.partition("=")[2].split(",")]
        spec["grid"] = {**_mapping(spec.get("grid"), "grid"), key: values}
    if options.name:
        spec["name"] = options.name
    if options.select:
        spec["select"] = options.select
    if not spec.get("base") and path is None:
        raise SweepError("give a sweep file or a base config (--config)")
    return read_sweep(spec, folder, name)


def _key_value(entry: str, option: str) -> tuple[str, Any]:
    key, sep, value = entry.partition("=")
    if not sep or not key:
        raise SweepError(f"{option} {entry!r}: expected KEY=VALUE, e.g. trainer.rounds=5")
    return key, yaml.safe_load(value)


# ===================================================================== resolving cells
def resolve(cell: Cell) -> dict[str, Any]:
    """The configuration ``fedlight fit`` would run for this cell (every default filled in),
    or SweepError with the parser's one-line message."""
    return resolve_arguments(cell.args, cell.label)


def resolve_arguments(arguments: Sequence[str], label: str) -> dict[str, Any]:
    """The configuration ``fedlight fit ARGUMENTS`` would run (what its ``--print_config``
    prints), resolved by its parser; a refused command line is a SweepError ``<label>: <the
    parser's one-line message>``."""
    from fedlight.config import dump_config
    from fedlight.errors import USER_ERRORS, user_message

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


def _get(config: Mapping[str, Any], dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _without(config: Mapping[str, Any], dotted: Sequence[str],
             neutral: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A deep copy of ``config`` without the dotted keys, nor the ``neutral`` keys where they
    hold their given value."""
    copy = json.loads(json.dumps(config, default=str))
    marker = object()
    drops = [(key, marker) for key in dotted] + list((neutral or {}).items())
    for key, value in drops:
        *parents, last = key.split(".")
        node = copy
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and (value is marker or node.get(last, marker) == value):
            node.pop(last, None)
    return copy


def cache_key(config: Mapping[str, Any]) -> str:
    """Hash of what a run computes: its resolved configuration less OUTPUT_KEYS (and less
    NEUTRAL_DEFAULTS at their neutral value)."""
    text = json.dumps(_without(config, OUTPUT_KEYS, NEUTRAL_DEFAULTS), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text).strip("_") or "run"


@dataclass
class Planned:
    """A resolved cell: its run folder, record and config file."""

    cell: Cell
    config: dict[str, Any]
    name: str
    runs: Path

    @property
    def folder(self) -> Path:
        return self.runs / self.name

    @property
    def record(self) -> Path:
        return self.runs / f"{self.name}.json"

    @property
    def config_file(self) -> Path:
        return self.runs / f"{self.name}.yaml"


def plan(sweep: Sweep, out: Path) -> list[Planned]:
    """Resolve every cell (all before any run: a bad cell stops the sweep before it starts)
    and check what ``select`` needs."""
    runs = (out / "runs").resolve()
    planned = []
    for cell in sweep.cells:
        config = resolve(cell)
        if sweep.select == "validation" and not (_get(config, "data.val_fraction") or 0) > 0:
            raise SweepError(f"{cell.label}: select: validation needs data.val_fraction > 0 "
                             "(e.g. overrides: {data.val_fraction: 0.1})")
        stem = "-".join(_safe(part) for part in (cell.method, cell.row) if part)
        name = f"{stem}-s{cell.seed}-{cache_key(config)}" if stem else (
            f"s{cell.seed}-{cache_key(config)}")
        config["trainer"].update(default_root_dir=str(runs), run_name=name, progress_bar=False,
                                 verbose=False, wandb_group=sweep.name)
        planned.append(Planned(cell, config, name, runs))
    names = [p.name for p in planned]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SweepError(f"two cells resolve to the same run ({twice[0]}): the sweep repeats a "
                         "method, setting or grid point")
    return planned


# ===================================================================== running
def run_cell(config_file: str, resume: bool) -> dict[str, Any]:
    """Run one cell's ``fedlight fit`` in this process; its wall and CPU seconds, and the
    one-line error where it failed (a diverged run is a result, not a crash)."""
    from fedlight.config import read_config
    from fedlight.errors import USER_ERRORS, user_message

    started, cpu_started = time.perf_counter(), cpu_seconds()
    error = None
    try:
        with _quiet_cli():
            run = read_config(config_file, ["--ckpt_path", "last"] if resume else [])
            run.trainer.command = f"fedlight fit -c {config_file}"
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


def _exit_with_parent(parent: int) -> None:
    """In a worker: stop at once when the sweep's process is gone (killed), as a killed run
    stops, so that a resumed sweep never runs a cell beside an orphaned worker."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _prepare(item: Planned) -> bool | None:
    """None when the cell is finished (a record exists); else whether to resume it from its
    checkpoint. A folder left without a checkpoint (stopped in its first rounds) is removed."""
    if item.record.is_file():
        return None
    if (item.folder / "checkpoints" / "last.ckpt").is_file():
        return True
    shutil.rmtree(item.folder, ignore_errors=True)
    item.config_file.write_text(yaml.safe_dump(item.config, sort_keys=False))
    return False


def _finish(item: Planned, result: dict[str, Any]) -> None:
    """Write the cell's record (atomically: a record means the cell is done)."""
    temporary = item.record.with_suffix(".json.tmp")
    temporary.write_text(json.dumps({"cell": item.cell.label, **result}, indent=1))
    temporary.replace(item.record)
    status = f"failed: {result['error']}" if result["error"] else (
        f"{result['wall']:.0f} s wall, {result['cpu']:.0f} s CPU")
    print(f"  {item.cell.label}: {status}", flush=True)


def execute(planned: Sequence[Planned], jobs: int) -> int:
    """Run every unfinished cell, ``jobs`` at a time; returns how many ran."""
    todo = []
    for item in planned:
        item.runs.mkdir(parents=True, exist_ok=True)
        resume = _prepare(item)
        if resume is not None:
            todo.append((item, resume))
    print(f"sweep: {len(planned)} runs, {len(planned) - len(todo)} cached, {len(todo)} to run "
          f"({jobs} at a time)", flush=True)
    if jobs == 1:
        for item, resume in todo:
            _finish(item, run_cell(str(item.config_file), resume))
        return len(todo)
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_exit_with_parent,
                             initargs=(os.getpid(),)) as pool:
        # The pool gets a cell only when a worker is free: a cell already handed to the pool
        # cannot be cancelled, so on Ctrl-C the workers would start such cells after saving
        # the interrupted ones, and the sweep would go on running.
        waiting = iter(todo)
        futures: dict[Future, Planned] = {}

        def hand_over(count: int) -> None:
            for item, resume in itertools.islice(waiting, count):
                futures[pool.submit(run_cell, str(item.config_file), resume)] = item

        hand_over(jobs)
        while futures:
            done, _ = wait(futures, return_when=FIRST_COMPLETED)
            for future in done:
                _finish(futures.pop(future), future.result())
            hand_over(len(done))
    return len(todo)


# ===================================================================== results
def collect(planned: Sequence[Planned]) -> tuple[list[Any], list[tuple[Planned, str]]]:
    """The finished runs (report.Run, relabelled with the sweep's method and setting labels,
    with their wall and CPU seconds) and the failed cells with their errors."""
    from fedlight.report import read_run

    runs, failed = [], []
    for item in planned:
        record = json.loads(item.record.read_text())
        if record.get("error"):
            failed.append((item, record["error"]))
            continue
        run = read_run(item.folder)
        run.method = item.cell.method or run.method
        run.setting = item.cell.row or run.setting
        run.process_seconds = {"wall": record["wall"], "cpu": record["cpu"]}
        runs.append(run)
    return runs, failed


def write_runs_csv(runs: Sequence[Any], path: Path, extra: Sequence[str]) -> None:
    """One row per run: its labels, seed, rounds, every table column and its folder."""
    from fedlight.report import table_columns

    columns = table_columns(extra)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["method", "setting", "seed", "rounds", *[t for t, _, _ in columns],
                         "best val personalized", "run"])
        for run in runs:
            writer.writerow([run.method, run.setting, run.seed, run.rounds,
                             *[value(run) for _, value, _ in columns],
                             run.summary.get("best_val_personalized_accuracy"), run.path.name])


def write_results_csv(runs: Sequence[Any], path: Path, extra: Sequence[str]) -> None:
    """The report's table as CSV: per group, the mean and std over seeds of each column."""
    from fedlight.report import group_statistics

    rows = group_statistics(runs, extra)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["method"])
        writer.writeheader()
        writer.writerows(rows)


def selection_table(planned: Sequence[Planned], runs: Sequence[Any]) -> str:
    """Per method, setting and round count: the grid point whose runs have the best mean
    (over seeds) validation accuracy, with its test figures (each run's best round is chosen
    on validation too)."""
    by_folder = {run.path.name: run for run in runs}
    groups: dict[tuple[str, str, int], dict[tuple, list[Any]]] = defaultdict(
        lambda: defaultdict(list))
    for item in planned:
        run = by_folder.get(item.name)
        if run is not None:
            groups[(item.cell.method, item.cell.setting, run.rounds)][item.cell.point].append(run)
    lines = ["| method | setting | rounds | chosen | seeds | validation personalized | "
             "test personalized (best round on validation) | last personalized |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]

    def mean(members: list[Any], key: str) -> float:
        values = [m.summary.get(key) for m in members if m.summary.get(key) is not None]
        return statistics.mean(values) if values else float("-inf")

    for (method, setting, rounds), points in sorted(groups.items()):
        point, members = max(points.items(),
                             key=lambda p: mean(p[1], "best_val_personalized_accuracy"))
        chosen = ", ".join(f"{k}={v}" for k, v in point) or "-"
        cells = [f"{100 * mean(members, key):.2f}" for key in (
            "best_val_personalized_accuracy", "best_personalized_accuracy",
            "last_personalized_accuracy")]
        lines.append(f"| {method} | {setting or '-'} | {rounds} | {chosen} | {len(members)} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_results(sweep: Sweep, planned: Sequence[Planned], out: Path, command: str,
                  wall: float, cpu: float) -> Path:
    """report.md with its plots, results.csv, runs.csv (and selection.md with select)."""
    from fedlight.report import write_report_of_runs

    runs, failed = collect(planned)
    notes = [f"`{command}`", "",
             f"{len(planned)} runs ({len(runs)} finished, {len(failed)} failed); this "
             f"invocation: wall {wall / 60:.1f} min, CPU {cpu / 60:.1f} min. Wall and CPU "
             "seconds per run are each run's whole `fit` (its last attempt when resumed).", ""]
    notes += [f"Failed: {item.cell.label}: {error}" for item, error in failed]
    notes += [""] if failed else []
    if sweep.select:
        table = selection_table(planned, runs)
        (out / "selection.md").write_text(f"# {sweep.name}: chosen on validation\n\n{table}\n")
        notes += ["## Chosen on validation", "", table, "", "## Every grid point", ""]
    if not runs:
        (out / "report.md").write_text("\n".join([f"# sweep {sweep.name}", "", *notes]))
        return out / "report.md"
    write_runs_csv(runs, out / "runs.csv", sweep.columns)
    write_results_csv(runs, out / "results.csv", sweep.columns)
    return write_report_of_runs(runs, out, title=f"# sweep {sweep.name}", notes=notes,
                                extra=sweep.columns)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="fedlight sweep",
                                     description=(__doc__ or "").replace("``", ""),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", nargs="?", help="a sweep file (YAML)")
    parser.add_argument("--config", "-c", help="base fit config (replaces the file's base)")
    parser.add_argument("--methods", nargs="+", help="method labels of the file or class names")
    parser.add_argument("--settings", nargs="+", help="run only these settings of the file")
    parser.add_argument("--seeds", nargs="+", type=int, help="seeds (replace the file's)")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="a config entry for every run, e.g. trainer.rounds=5 (repeatable)")
    parser.add_argument("--grid", action="append", metavar="KEY=V1,V2",
                        help="values of one grid axis, e.g. model.init_args.lr=0.01,0.005")
    parser.add_argument("--select", choices=SELECT_MODES, help="choose grid points on validation")
    parser.add_argument("--name", help="the sweep's name (default: the file's name)")
    parser.add_argument("--out", help="output folder (default: sweeps/<name>)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (processes with "
                        "one torch thread each; default 1)")
    parser.add_argument("--dry-run", action="store_true",
                        help="resolve and list the runs (cached or not) without running")
    options = parser.parse_args(argv)
    if options.jobs < 1:
        raise SweepError(f"--jobs must be at least 1, got {options.jobs}")
    sweep = load_sweep(options.sweep, options)
    out = Path(options.out or Path("sweeps") / sweep.name)
    started, cpu_started = time.perf_counter(), cpu_seconds()
    planned = plan(sweep, out)
    if options.dry_run:
        for item in planned:
            state = "cached" if item.record.is_file() else "to run"
            print(f"{item.cell.label}: {item.name} ({state})")
        return
    out.mkdir(parents=True, exist_ok=True)
    execute(planned, options.jobs)
    command = "fedlight sweep " + " ".join(argv)
    path = write_results(sweep, planned, out, command, time.perf_counter() - started,
                         cpu_seconds() - cpu_started)
    print(f"wrote {path}, {out / 'results.csv'} and {out / 'runs.csv'}", file=sys.stderr)
