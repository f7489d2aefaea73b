"""Planning cells: each resolved to the configuration ``fedlight fit`` would run, keyed by a hash
of what it computes, with its run folder, record and config file under ``<out>/runs/``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedlight.sweep import runner
from fedlight.sweep.spec import Cell, Sweep
from fedlight.sweep.sweep_file_error import SweepError

#: Trainer options every cell runs with, whatever its sweep file says: how a run reports
#: (a sweep prints one line per run, and its tables read the files each run writes, such as
#: the per-client scores of every evaluated round). The one place where a sweep turns an
#: output of ``fedlight fit`` on for every cell; being about output, these are left out of
#: the cache key (OUTPUT_KEYS).
CELL_TRAINER_OPTIONS: dict[str, Any] = {"progress_bar": False, "verbose": False,
                                        "per_client_scores": True}
#: Entries that say where and how a run reports, not what it computes: left out of the key.
OUTPUT_KEYS = ("trainer.default_root_dir", "trainer.run_name", "trainer.logger",
               "trainer.wandb_project", "trainer.wandb_group", "trainer.wandb_labels",
               "trainer.checkpoint_every",
               "data.source.init_args.root", "data.source.init_args.download", "ckpt_path",
               *(f"trainer.{key}" for key in CELL_TRAINER_OPTIONS))
#: Options added after sweeps were cached, at the value that computes what runs computed
#: before the option existed: left out of the key at that value, so finished cells stay valid.
NEUTRAL_DEFAULTS = {"trainer.batched_clients": "auto", "trainer.cuda_graphs": True,
                    "data.partition.init_args.balanced": True, "data.augment": None,
                    "data.source.init_args.first_per_class": None,
                    "trainer.max_local_steps": None, "trainer.random_join_ratio": False,
                    "trainer.report_last": 10, "trainer.drop_last": False,
                    "trainer.callbacks": None}


def get(config: Mapping[str, Any], dotted: str) -> Any:
    """The value at a dotted key of a resolved configuration (None where it is absent)."""
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


def plan_cell(cell: Cell, out: Path, group: str) -> Planned:
    """Resolve one cell: its configuration (SweepError where ``fedlight fit`` would refuse
    it), run folder name (labels, seed and cache key) and the trainer's output options."""
    runs = (out / "runs").resolve()
    config = runner.resolve_arguments(cell.args, cell.label)
    stem = "-".join(_safe(part) for part in (cell.method, cell.row) if part)
    name = f"{stem}-s{cell.seed}-{cache_key(config)}" if stem else (
        f"s{cell.seed}-{cache_key(config)}")
    # W&B groups a sweep's runs under its name and labels each (config keys and tags)
    labels = {"sweep": group, "method": cell.method, "setting": cell.row or "base",
              "seed": cell.seed}
    config["trainer"].update(default_root_dir=str(runs), run_name=name, wandb_group=group,
                             wandb_labels=labels, **CELL_TRAINER_OPTIONS)
    return Planned(cell, config, name, runs)


def check_validation_split(planned: Planned, what: str) -> None:
    """SweepError unless the run holds out a validation split (``what`` needs it)."""
    if not (get(planned.config, "data.val_fraction") or 0) > 0:
        raise SweepError(f"{planned.cell.label}: {what} needs data.val_fraction > 0 "
                         "(e.g. overrides: {data.val_fraction: 0.1})")


def plan_sweep(sweep: Sweep, out: Path) -> list[Planned]:
    """Resolve every cell (all before any run: a bad cell stops the sweep before it starts)
    and check what ``select`` needs."""
    planned = []
    for cell in sweep.cells:
        item = plan_cell(cell, out, sweep.name)
        if sweep.select == "validation":
            check_validation_split(item, "select: validation")
        planned.append(item)
    names = [p.name for p in planned]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SweepError(f"two cells resolve to the same run ({twice[0]}): the sweep repeats a "
                         "method, setting or grid point")
    return planned
