"""The GPU measurement of batched clients, in one call: the loop, batched clients and batched
clients with CUDA graphs per method, against the floor and against PFLlib (under 8 minutes on
an H100).

Sections, in this order (each writes its tables as soon as it ends; a section that fails
writes its error in its place and the others run). Nothing runs past ``--budget`` seconds:
each section gets a deadline, its share of the time left (``SHARES``; what a section leaves
unused goes to the ones after it); a run that would not end before it (as long as the
section's last run took) is skipped, an alarm at the deadline cuts the run in progress, and
the PFLlib section's subprocess (with every process it started) is killed there. A cut
section writes the rows it has and says what was cut; the last table lists each section's
deadline, time and whether it ended, was cut or failed.

1. ``floor``: training FLOPs per sample and the best throughput at batch 512 of each backbone
   used below (``benchmarks/floor.py``: fp32, channels_last, TF32, bf16), so each workload's
   round has a floor = its training samples / that throughput.
2. ``cnn``: FedAvg, FedPer, GPFL, MAP, FedPick and Privatize "AaBb" on the 4-layer CNN at
   batch 10, 20 clients x 250 real CIFAR-10 training images (IID), one local epoch: the
   median training round (training + aggregation, rounds after the first) for the loop
   (``batched_clients: 1``), batched (``auto``, ``cuda_graphs: false``), batched with CUDA
   graphs (``auto``, ``cuda_graphs: true``) and ``measured`` (``batched_clients: measure``,
   what ``auto`` does on a GPU: the way it chose and the seconds per client step it
   measured of each way), its ratio to the floor, the group size, whether the steps were
   captured (all, partly, none), the last personalized accuracy and the largest difference of
   the global model from the loop's (cuDNN's kernels are not deterministic: accuracies are
   the comparison on a GPU; the CPU tests check equality), and the seconds to score every
   client once (``eval s``: client by client in the loop, together when batched).
3. ``pfllib``: ``benchmarks/vs_pfllib.py`` on the same GPU, as a subprocess: FedAvg and GPFL
   on one exported split (the same images, 20 clients, Dirichlet 0.1), ``--pfllib-rounds``
   training rounds in both (PFLlib's ``-gr R-1``), evaluation every 5: best accuracy,
   whole-process wall time and the median round of each library, tabulated from its raw
   file (``pfllib.csv``, rewritten after each pair of processes; their output in
   ``pfllib.log``). PFLlib imports cvxpy (for FedPAC) and calmsize at
   start; where they are not installed, stand-ins that FedAvg and GPFL never call are put on
   PFLlib's path.
4. ``large``: the papers' larger backbones at their batch sizes: ResNet-18 at batch 10 (GPFL)
   for FedAvg and GPFL, VGG11 at batch 64 (MAP, where to privatize) for FedAvg, MAP and
   Privatize "AaBb"; the same columns as section 2.
5. ``memory``: peak GPU memory (allocated) of one round of FedAvg on the 4-layer CNN,
   batched with graphs, against the clients per round (5 to 40, 300 images each), and the
   loop's at 20.

Real data: the packed CIFAR-10 subset of ``benchmarks/pack_data.py`` (1000 training and 200
test images per class, 35 MiB), ``data.source: packed``.

Written to ``--out``: ``gpu.md`` (every table, the machine, the command, the sections'
deadlines), ``rounds.csv`` (sections 2 and 4), ``floor.csv``, ``memory.csv`` and
``pfllib.csv`` (vs_pfllib's ``--raw``), each rewritten as its rows come.

Here, once (the packed data, PFLlib's code and the wheels of fedlight's dependencies that the
GPU machine lacks, all in ignored folders)::

    python benchmarks/pack_data.py cifar10 --first-per-class 1000 200
    mkdir -p gpu_data/PFLlib/dataset && cp -r ../PFLlib/system gpu_data/PFLlib/
    python -m pip download --no-deps --only-binary=:all: --python-version 3.12 \\
        --implementation cp --platform manylinux2014_x86_64 -d .whl \\
        jsonargparse==4.53.0 docstring_parser==0.18.0 typeshed_client==2.15.0

On the GPU machine, one call carrying ``gpu_data/cifar10_1000_200.pt``, ``gpu_data/PFLlib``
and ``.whl`` (about 40 MiB with the working tree), given 570 s, ``OUT`` the folder that
comes back::

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \\
        .whl/*.whl && PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 python3 benchmarks/gpu.py \\
        --out $OUT --pfllib gpu_data/PFLlib 2>&1 | tee $OUT/log.txt

Anywhere, in a minute on a CPU (2 rounds, 3 clients of 40 images, the CNN and a BatchNorm
CNN, batched without graphs; PFLlib only where ``--pfllib`` is given)::

    python benchmarks/gpu.py --smoke --out /tmp/gpu_smoke
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib.util
import math
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import yaml
from floor import flops_per_sample, quiet, throughputs

from fedlight.clients import CLIENTS
from fedlight.data import FederatedDataModule, SampleCaps
from fedlight.data.partitions.iid import IID
from fedlight.data.sources.packed import Packed
from fedlight.federation.engines.batched import BatchedEngine
from fedlight.federation.engines.choice import BATCHED, GRAPHS, LOOP
from fedlight.federation.trainer import FederatedTrainer

BENCHMARKS = Path(__file__).resolve().parent
ROOT = BENCHMARKS.parent
DATA = ROOT / "gpu_data" / "cifar10_1000_200.pt"
SECTIONS = ("floor", "cnn", "pfllib", "large", "memory")
#: each section's share of the time left when it starts (against the shares of the sections
#: from it on that run)
SHARES = {"floor": 1.0, "cnn": 4.0, "pfllib": 3.0, "large": 3.0, "memory": 1.0}
#: seconds of the budget kept after the last deadline, to write the tables
RESERVE = 5.0
SKIPPED = "skipped (time budget)"
CUT = "cut (deadline)"
#: method label -> (fedlight class, constructor arguments)
METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "FedAvg": ("FedAvg", {}), "FedPer": ("FedPer", {}), "GPFL": ("GPFL", {}),
    "MAP": ("MAP", {}), "FedPick": ("FedPick", {}),
    "Privatize AaBb": ("Privatize", {"way": "AaBb"}),
}
#: mode -> trainer options (``auto`` becomes the group size on a CPU, where auto is the loop)
MODES: dict[str, dict[str, Any]] = {
    "loop": {"batched_clients": 1},
    "batched": {"batched_clients": "auto", "cuda_graphs": False},
    "batched + graphs": {"batched_clients": "auto", "cuda_graphs": True},
    "measured": {"batched_clients": "measure"},
}
#: the columns of a measured run: the seconds per client step it measured of each way
PROBE_COLUMNS = {LOOP: "probe loop s/step", BATCHED: "probe batched s/step",
                 GRAPHS: "probe graphs s/step"}


@dataclass(frozen=True)
class Workload:
    """Clients of ``samples`` images each (75 % for training) training ``methods`` on
    ``backbone`` at ``batch``."""

    name: str
    backbone: str
    batch: int
    methods: tuple[str, ...]
    clients: int = 20
    samples: int = 333
    lr: float = 0.005


@dataclass
class Settings:
    """What one invocation measures (full size on a GPU, or ``--smoke``)."""

    device: str
    rounds: int
    cnn: Workload
    large: tuple[Workload, ...]
    memory_clients: tuple[int, ...]
    memory_samples: int
    floor_batch: int
    floor_steps: int
    modes: tuple[str, ...]
    pfllib_clients: int
    pfllib_samples: int


def settings(smoke: bool) -> Settings:
    """The full measurement on a GPU, or a small one that runs on a CPU too."""
    methods = tuple(METHODS)
    if not smoke:
        return Settings(
            "cuda", 3, Workload("cnn, batch 10", "cnn", 10, methods),
            (Workload("resnet18, batch 10", "resnet18", 10, ("FedAvg", "GPFL"), lr=0.01),
             Workload("vgg11, batch 64", "vgg11", 64, ("FedAvg", "MAP", "Privatize AaBb"),
                      lr=0.01)),
            (5, 10, 20, 40), 300, 512, 10, tuple(MODES), 20, 333)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    modes = tuple(MODES) if device == "cuda" else ("loop", "batched", "measured")
    return Settings(device, 2, Workload("cnn, batch 10", "cnn", 10, methods, 3, 40),
                    (Workload("cnn_bn, batch 16", "cnn_bn", 16, ("FedAvg",), 3, 40),),
                    (2, 3), 40, 32, 2, modes, 3, 40)


def only(settings_: Settings, methods: Sequence[str]) -> Settings:
    """``settings_`` with its workloads' methods cut to ``methods``."""
    def cut(workload: Workload) -> Workload:
        return replace(workload, methods=tuple(m for m in workload.methods if m in methods))
    return replace(settings_, cnn=cut(settings_.cnn),
                   large=tuple(cut(w) for w in settings_.large))


# ----------------------------------------------------------------------------- time
class Overrun(BaseException):
    """A section's deadline came (raised by :func:`alarm`; a BaseException, so that no
    ``except Exception`` in the code it cuts, fedlight's first-round fallback included,
    takes it for an error of that code)."""


@contextlib.contextmanager
def alarm(seconds: float) -> Iterator[None]:
    """Raise :class:`Overrun` inside the block once ``seconds`` have passed (SIGALRM; where
    there is none, or off the main thread, the block runs to its end and only the runs that
    would not fit are skipped)."""
    if seconds <= 0 or not hasattr(signal, "setitimer") or (
            threading.current_thread() is not threading.main_thread()):
        yield
        return

    def ring(signum: int, frame: Any) -> None:
        raise Overrun

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_until(command: Sequence[str], seconds: float, log: Path, cwd: Path,
              env: dict[str, str]) -> int | None:
    """Run ``command`` (its output to ``log``) for at most ``seconds``; returns its exit
    code, or None when it was killed at the deadline, with every process it started (the
    process group it leads), so nothing it left keeps the device busy."""
    with log.open("w") as output:
        process = subprocess.Popen(list(command), cwd=cwd, env=env, stdout=output,
                                   stderr=subprocess.STDOUT, process_group=0)
        try:
            return process.wait(timeout=max(seconds, 0.0))
        except subprocess.TimeoutExpired:
            return None
        finally:  # the deadline, or an alarm or Ctrl-C while waiting
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()


# ----------------------------------------------------------------------------- output
@dataclass
class Report:
    """The results folder: each section's rows, tables and errors, rewritten as they come;
    and the time: the whole ``budget`` and the deadline of the section running."""

    out: Path
    command: str
    started: float = field(default_factory=time.perf_counter)
    budget: float = math.inf
    machine: str = ""
    sections: dict[str, list[str]] = field(default_factory=dict)
    deadline: float = math.inf  # of the section running, in seconds after started
    ends: list[dict[str, Any]] = field(default_factory=list)  # how each section ended

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def left(self) -> float:
        """Seconds to the running section's deadline."""
        return self.deadline - self.elapsed()

    def fits(self, seconds: float) -> bool:
        """Whether a run of ``seconds`` ends before the section's deadline."""
        return seconds < self.left()

    def begin(self, share: float, shares_left: float) -> None:
        """Set the deadline of a section of ``share`` of the time left, when ``shares_left``
        (its own included) are still to run."""
        left = max(0.0, self.budget - RESERVE - self.elapsed())
        self.deadline = self.elapsed() + left * share / max(shares_left, share)

    def write_csv(self, name: str, rows: Sequence[dict[str, Any]]) -> None:
        """Rewrite ``name`` with ``rows`` (whole or not at all: a cut leaves the last one)."""
        if not rows:
            return
        columns = list(dict.fromkeys(key for row in rows for key in row))
        temporary = self.out / f".{name}.tmp"
        with temporary.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
        os.replace(temporary, self.out / name)

    def section(self, name: str, lines: list[str]) -> None:
        self.sections[name] = lines
        self.write()

    def write(self) -> None:
        text = ["# Batched clients on a GPU (`benchmarks/gpu.py`)", "", self.machine, "",
                f"Command: `{self.command}`; {self.elapsed():.0f} s so far.", ""]
        for lines in self.sections.values():
            text += [*lines, ""]
        if self.ends:
            text += [f"## Sections (budget {self.budget:g} s, deadlines in seconds from the "
                     "start)", "", *markdown(self.ends, ("section", "deadline s", "took s",
                                                         "ended")), ""]
        temporary = self.out / ".gpu.md.tmp"
        temporary.write_text("\n".join(text))
        os.replace(temporary, self.out / "gpu.md")


def markdown(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> list[str]:
    """A Markdown table of ``columns`` of ``rows`` (floats to 4 significant digits)."""
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return "" if math.isnan(value) else f"{value:.4g}"
        return str(value)
    return ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns),
            *("| " + " | ".join(cell(row.get(c, "")) for c in columns) + " |" for row in rows)]


@dataclass
class Section:
    """A section: ``run`` measures (filling in ``rows``, one per planned run), ``render``
    makes its tables from what was measured, even when ``run`` was cut or failed."""

    name: str
    run: Callable[[], None]
    render: Callable[[], list[str]]
    rows: Callable[[], Sequence[dict[str, Any]]] = lambda: ()
    save: Callable[[], None] = lambda: None  # its raw file, rewritten once it ended


def run_section(report: Report, section: Section, shares_left: float) -> None:
    """Run a section until its deadline (:meth:`Report.begin`); its tables are written
    whatever happened, with a line saying it was cut or failed, and its end goes to the
    table of sections."""
    report.begin(SHARES[section.name], shares_left)
    began = report.elapsed()
    print(f"\n## {section.name} ({began:.0f} s, deadline {report.deadline:.0f} s)", flush=True)
    ended = "complete"
    try:
        with alarm(report.left()):
            section.run()
    except Overrun:
        ended = f"cut at its deadline ({report.deadline:.0f} s): the run in progress was stopped"
    except (Exception, SystemExit) as error:  # reported in its place; the others run
        traceback.print_exc()
        ended = f"failed: {type(error).__name__}: {error}"
    try:
        section.save()
        lines = section.render()
    except Exception as error:
        traceback.print_exc()
        lines = [f"## {section.name}", "", f"no table: {type(error).__name__}: {error}"]
    skipped = sum(row.get("note") == SKIPPED for row in section.rows())
    if skipped:
        ended += f"; {skipped} of {len(section.rows())} runs skipped (time budget)"
    if ended != "complete":
        lines += ["", f"Section {ended}."]
    report.ends.append({"section": section.name, "deadline s": report.deadline,
                        "took s": report.elapsed() - began, "ended": ended})
    report.section(section.name, lines)


# ----------------------------------------------------------------------------- runs
def packed_data(data: Path, clients: int, samples: int) -> FederatedDataModule:
    """``clients`` IID clients of at most ``samples`` images of the packed file (75 %
    train)."""
    return FederatedDataModule(source=Packed(root=str(data)), partition=IID(),
                               num_clients=clients, merge_test=True, seed=0,
                               caps=SampleCaps(client_samples=samples))


def fit(method: str, backbone: str, batch: int, lr: float, mode: str, data: FederatedDataModule,
        settings_: Settings, rounds: int) -> tuple[FederatedTrainer, float]:
    """One run; returns the trainer and its wall seconds."""
    name, arguments = METHODS[method]
    data.setup()
    torch.manual_seed(0)
    client = CLIENTS[name](backbone=backbone, num_classes=data.num_classes,
                           input_shape=data.input_shape, lr=lr, **arguments)
    options = dict(MODES[mode])
    if options["batched_clients"] == "auto" and settings_.device != "cuda":
        options["batched_clients"] = data.num_clients  # auto is the loop on a CPU
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as root, quiet():
        trainer = FederatedTrainer(
            rounds=rounds, batch_size=batch, accelerator=settings_.device, devices=1,
            eval_every=rounds, checkpoint_every=rounds, default_root_dir=root,
            progress_bar=False, verbose=False, **options)
        trainer.fit(client, data)
    return trainer, time.perf_counter() - started


def engine_facts(trainer: FederatedTrainer) -> dict[str, Any]:
    """Which engine trained, with what group size, whether its full steps replayed, and
    where the engine chose by measuring, what it chose and the seconds per client step it
    measured of each way."""
    engine = trainer.engine
    choice = trainer.run.engine_choice
    measured = choice is not None and (choice["seconds_per_step"] or choice.get("fallback"))
    chosen: dict[str, Any] = {} if not measured or choice is None else {
        "choice": choice["way"] + (f" (fell back: {choice['fallback']})"
                                   if choice.get("fallback") else ""),
        **{PROBE_COLUMNS[way]: seconds for way, seconds in choice["seconds_per_step"].items()}}
    if not isinstance(engine, BatchedEngine):
        return {"engine": "loop", "group": 1, "captured": "", **chosen}
    failures = sorted({w.full.failure for w in engine.workspaces.values() if w.full.failure})
    return {"engine": "batched", "group": engine.group_size, "captured": engine.captured,
            "capture_failure": "; ".join(failures), **chosen}


def global_difference(trainer: FederatedTrainer, reference: FederatedTrainer | None) -> float:
    """The largest absolute difference of the global model from the reference run's."""
    if reference is None or not trainer.global_state:
        return math.nan
    return max(float((v.float().cpu() - reference.global_state[k].float().cpu()).abs().max())
               for k, v in trainer.global_state.items())


def evaluation_seconds(trainer: FederatedTrainer) -> float:
    """Seconds to score every client once more after the run (its engine's ``evaluate`` on
    the rule's downloads: client by client in the loop, together when batched), the second
    of two calls (the first traces the vmapped scoring)."""
    run = trainer.run
    downloads = {client: run.rule.download(client)[0]
                 for client in range(run.datamodule.num_clients)}
    seconds = math.nan
    for _ in range(2):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        started = time.perf_counter()
        trainer.engine.evaluate(trainer.rounds, downloads)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
    return seconds


def reset_peak() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def peak_mib() -> float:
    return torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else math.nan


def planned_rows(workloads: Sequence[Workload], settings_: Settings) -> list[dict[str, Any]]:
    """One row per workload x method x mode, noted skipped until it runs."""
    return [{"workload": workload.name, "method": method, "mode": mode, "note": SKIPPED}
            for workload in workloads for method in workload.methods
            for mode in settings_.modes]


def workload_rows(report: Report, workload: Workload, data: Path, settings_: Settings,
                  floors: dict[str, float], rows: list[dict[str, Any]]) -> None:
    """Every method x mode of ``workload`` (its rows of ``rows``, planned), each row filled in
    (and rounds.csv rewritten) as its run ends; a run that would not end before the
    section's deadline (as long as the workload's last run took) stays skipped."""
    module = packed_data(data, workload.clients, workload.samples)
    module.setup()
    samples = sum(module.client_train_size(i) for i in range(module.num_clients))
    floor = samples / floors[workload.backbone] if workload.backbone in floors else math.nan
    last_run = 0.0
    references: dict[str, FederatedTrainer] = {}
    for row in (r for r in rows if r["workload"] == workload.name):
        method, mode = row["method"], row["mode"]
        row.update({"train samples / round": samples, "floor s": floor})
        report.write_csv("rounds.csv", rows)
        if not report.fits(last_run):
            continue
        row["note"] = CUT  # until the run ends
        try:
            reset_peak()
            trainer, wall = fit(method, workload.backbone, workload.batch, workload.lr,
                                mode, module, settings_, settings_.rounds)
        except Exception as error:  # a failed run is a row, not the end
            traceback.print_exc()
            row["note"] = f"failed: {type(error).__name__}: {error}"
        else:
            timed = trainer.round_seconds[1:] or trainer.round_seconds
            seconds = statistics.median(timed)
            row.update({"s / round": seconds, "x floor": seconds / floor,
                        "first round s": trainer.round_seconds[0],
                        "last pers. acc": trainer.history[-1]["personalized_accuracy"],
                        "max |global - loop|": global_difference(trainer,
                                                                 references.get(method)),
                        "peak MiB": peak_mib(), "run s": wall,
                        "eval s": evaluation_seconds(trainer), "note": "",
                        **engine_facts(trainer)})
            last_run = wall
            if mode == "loop":
                references[method] = trainer
        finally:
            print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in row.items()), flush=True)
            report.write_csv("rounds.csv", rows)


ROUND_COLUMNS = ("method", "mode", "engine", "group", "captured", "choice", "s / round",
                 "x floor", "first round s", "eval s", "last pers. acc", "max |global - loop|",
                 "peak MiB", "note")


def speedups(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Per method: the loop's round over batched's and over batched + graphs', and what the
    measured run chose (with the seconds per client step it measured of each way)."""
    lines = []
    for (workload, method) in dict.fromkeys((r["workload"], r["method"]) for r in rows):
        mine = [r for r in rows if (r["workload"], r["method"]) == (workload, method)]
        seconds = {r["mode"]: r.get("s / round", math.nan) for r in mine}
        loop = seconds.get("loop", math.nan)
        parts = [f"{mode} {loop / value:.2f}x" for mode, value in seconds.items()
                 if mode not in ("loop", "measured") and value == value]
        if parts:
            lines.append(f"- {workload}, {method}: loop / {'; loop / '.join(parts)}")
        measured = next((r for r in mine if r["mode"] == "measured" and r.get("choice")), None)
        if measured is not None:
            probes = ", ".join(f"{way} {measured[column]:.3g}"
                               for way, column in PROBE_COLUMNS.items() if column in measured)
            timed = {mode: value for mode, value in seconds.items()
                     if mode != "measured" and value == value}
            best = (f"; the fastest round of the ways run: {min(timed, key=timed.__getitem__)}"
                    if timed else "")
            lines.append(f"- {workload}, {method}: measured chose {measured['choice']} "
                         f"(s per client step: {probes}){best}")
    return lines


# ----------------------------------------------------------------------------- sections
def floor_section(report: Report, settings_: Settings, floors: dict[str, float],
                  rows: list[dict[str, Any]]) -> None:
    device = torch.device(settings_.device)
    backbones = dict.fromkeys([settings_.cnn.backbone, *(w.backbone for w in settings_.large)])
    last = 0.0
    for backbone in backbones:
        if not report.fits(last):
            rows.append({"backbone": backbone, "note": SKIPPED})
            report.write_csv("floor.csv", rows)
            continue
        started = time.perf_counter()
        with quiet():
            flops = flops_per_sample(backbone, (3, 32, 32), 10, 32)
            measured = throughputs(backbone, (3, 32, 32), 10, settings_.floor_batch,
                                   settings_.floor_steps, device, flops)
        best = max(measured, key=lambda t: t.samples_per_second)
        floors[backbone] = best.samples_per_second
        rows.append({"backbone": backbone, "input": "3x32x32", "MFLOP / sample": flops / 1e6,
                     "best setting": best.setting, "samples / s": best.samples_per_second,
                     "GFLOP / s": best.flops_per_second / 1e9})
        last = time.perf_counter() - started
        print(rows[-1], flush=True)
        report.write_csv("floor.csv", rows)


def floor_tables(settings_: Settings, rows: Sequence[dict[str, Any]]) -> list[str]:
    return [f"## Floor (training step at batch {settings_.floor_batch}, best setting)", "",
            *markdown(rows, ("backbone", "input", "MFLOP / sample", "best setting",
                             "samples / s", "GFLOP / s", "note"))]


def rounds_tables(workloads: Sequence[Workload], settings_: Settings,
                  rows: Sequence[dict[str, Any]], title: str) -> list[str]:
    lines = [f"## {title}", "",
             f"{settings_.rounds} rounds per run, the median training round after the first; "
             "x floor = s / round over the workload's floor (training samples of a round at "
             "the floor section's samples / s).", ""]
    for workload in workloads:
        mine = [r for r in rows if r["workload"] == workload.name]
        samples = next((r["train samples / round"] for r in mine
                        if "train samples / round" in r), "?")
        lines += [f"### {workload.name} ({workload.clients} clients, {samples} training "
                  "images a round)", "", *markdown(mine, ROUND_COLUMNS), "", *speedups(mine),
                  ""]
    return lines


def memory_runs(settings_: Settings) -> list[dict[str, Any]]:
    runs = [{"mode": "batched + graphs", "clients / round": k, "note": SKIPPED}
            for k in settings_.memory_clients]
    loop = settings_.memory_clients[-2 if len(runs) > 1 else -1]
    return [*runs, {"mode": "loop", "clients / round": loop, "note": SKIPPED}]


def memory_section(report: Report, data: Path, settings_: Settings,
                   rows: list[dict[str, Any]]) -> None:
    last = 0.0
    report.write_csv("memory.csv", rows)
    for row in rows:
        if not report.fits(last):
            continue
        row["note"] = CUT
        module = packed_data(data, row["clients / round"], settings_.memory_samples)
        reset_peak()
        trainer, last = fit("FedAvg", "cnn", 10, 0.005, row["mode"], module, settings_, 1)
        row.update({"peak MiB": peak_mib(), "s / round": trainer.round_seconds[0], "note": "",
                    **engine_facts(trainer)})
        print(row, flush=True)
        report.write_csv("memory.csv", rows)


def memory_tables(settings_: Settings, rows: Sequence[dict[str, Any]]) -> list[str]:
    return ["## Peak GPU memory against clients per round (FedAvg, cnn, batch 10, one round "
            f"with its evaluation, {settings_.memory_samples} images per client)", "",
            *markdown(rows, ("mode", "clients / round", "group", "peak MiB", "s / round",
                             "note"))]


STUBS = {
    "cvxpy": '"""Stand-in for cvxpy: PFLlib imports it for FedPAC, which is not run here."""\n',
    "calmsize": ('"""Stand-in for calmsize: PFLlib prints a memory report with it."""\n\n\n'
                 "def size(num_bytes):\n    return f'{num_bytes:.0f}B'\n"),
}


def pfllib_section(report: Report, pfllib: Path, data: Path, settings_: Settings,
                   rounds: int, notes: list[str]) -> None:
    """``benchmarks/vs_pfllib.py`` as a subprocess until the section's deadline; its raw
    file is ``pfllib.csv``, its output ``pfllib.log``."""
    (pfllib / "dataset").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        stubs = Path(folder) / "stubs"
        stubs.mkdir()
        for name, text in STUBS.items():
            if importlib.util.find_spec(name) is None:
                (stubs / f"{name}.py").write_text(text)
        notes.append(", ".join(sorted(p.stem for p in stubs.glob("*.py"))) or "none")
        config = Path(folder) / "gpu_pfllib.yaml"
        config.write_text(yaml.safe_dump({
            "model": {"class_path": "FedAvg", "init_args": {"backbone": "cnn", "lr": 0.005}},
            "data": {"source": {"class_path": "Packed",
                                "init_args": {"root": str(data.resolve())}},
                     "num_clients": settings_.pfllib_clients,
                     "partition": {"class_path": "Dirichlet", "init_args": {"beta": 0.1}},
                     "caps": {"client_samples": settings_.pfllib_samples},
                     "merge_test": True, "train_fraction": 0.75, "seed": 0},
            "trainer": {"rounds": rounds, "join_ratio": 1.0, "local_epochs": 1,
                        "batch_size": 10, "eval_every": min(5, rounds), "seed": 0,
                        "weighting": "samples", "accelerator": settings_.device}}))
        command = [sys.executable, str(BENCHMARKS / "vs_pfllib.py"), str(pfllib),
                   "--config", str(config), "--rounds", str(rounds), "--methods", "FedAvg",
                   "GPFL", "--device", settings_.device, "--raw", str(report.out / "pfllib.csv")]
        path = os.pathsep.join(filter(None, [str(stubs), os.environ.get("PYTHONPATH")]))
        code = run_until(command, report.left(), report.out / "pfllib.log", ROOT,
                         {**os.environ, "PYTHONPATH": path})
    if code is None:
        raise Overrun
    if code != 0:
        log = (report.out / "pfllib.log").read_text().strip().splitlines()
        raise RuntimeError(f"vs_pfllib.py exited with {code}: {log[-1] if log else ''}")


def pfllib_tables(report: Report, settings_: Settings, rounds: int,
                  notes: Sequence[str]) -> list[str]:
    """Per method, each library's best accuracy, whole-process wall time and median round
    from ``pfllib.csv`` (the pairs of processes that ended)."""
    raw = report.out / "pfllib.csv"
    rows = []
    if raw.is_file():
        with raw.open() as handle:
            processes = list(csv.DictReader(handle))
        for method in dict.fromkeys(p["method"] for p in processes):
            row: dict[str, Any] = {"method": method}
            for process in (p for p in processes if p["method"] == method):
                library = "fedlight" if process["library"] == "fedlight" else "PFLlib"
                row[f"{library} best %"] = 100 * float(process["best_accuracy"])
                row[f"{library} wall s"] = float(process["wall_s"])
                row[f"{library} median round s"] = float(process["median_round_s"])
            row["speed-up (round)"] = (row.get("PFLlib median round s", math.nan)
                                       / row.get("fedlight median round s", math.nan))
            rows.append(row)
    columns = ("method", "fedlight best %", "PFLlib best %", "fedlight wall s", "PFLlib wall s",
               "fedlight median round s", "PFLlib median round s", "speed-up (round)")
    return ["## fedlight (batched_clients: auto) against PFLlib on the same GPU and split", "",
            f"{settings_.pfllib_clients} clients, Dirichlet 0.1, at most "
            f"{settings_.pfllib_samples} images each, {rounds} training rounds in both, "
            "evaluation every 5; stand-ins for PFLlib's unused imports: "
            f"{notes[0] if notes else 'none'}.", "",
            *(markdown(rows, columns) if rows else ["No pair of processes ended."])]


# ----------------------------------------------------------------------------- main
def machine(device: str) -> str:
    if device == "cuda":
        properties = torch.cuda.get_device_properties(0)
        gpu = f"{torch.cuda.get_device_name(0)} ({properties.total_memory / 2**30:.0f} GiB)"
    else:
        gpu = "no GPU (CPU)"
    return (f"Machine: {gpu}, {os.cpu_count()} CPU cores; torch {torch.__version__}, "
            f"Python {sys.version.split()[0]}.")


def sections(report: Report, settings_: Settings, args: argparse.Namespace) -> list[Section]:
    """The sections ``args`` asks for, in order."""
    floors: dict[str, float] = {}
    floor_rows: list[dict[str, Any]] = []
    # one list for rounds.csv: the rows of the round sections asked for
    round_rows = planned_rows([*([settings_.cnn] if "cnn" in args.sections else []),
                               *(settings_.large if "large" in args.sections else [])],
                              settings_)
    memory_rows = memory_runs(settings_)
    pfllib_rounds = args.pfllib_rounds if not args.smoke else 2
    stubs: list[str] = []
    cnn_title = "Seconds per round, 4-layer CNN at batch 10"
    large_title = "Seconds per round, the papers' larger backbones"

    def rounds_run(workloads: Sequence[Workload]) -> None:
        for workload in workloads:
            workload_rows(report, workload, args.data, settings_, floors, round_rows)

    every = [
        Section("floor", lambda: floor_section(report, settings_, floors, floor_rows),
                lambda: floor_tables(settings_, floor_rows), lambda: floor_rows,
                lambda: report.write_csv("floor.csv", floor_rows)),
        Section("cnn", lambda: rounds_run([settings_.cnn]),
                lambda: rounds_tables([settings_.cnn], settings_, round_rows, cnn_title),
                lambda: [r for r in round_rows if r["workload"] == settings_.cnn.name],
                lambda: report.write_csv("rounds.csv", round_rows)),
        Section("pfllib", lambda: pfllib_section(report, args.pfllib, args.data, settings_,
                                                 pfllib_rounds, stubs),
                lambda: pfllib_tables(report, settings_, pfllib_rounds, stubs)),
        Section("large", lambda: rounds_run(settings_.large),
                lambda: rounds_tables(settings_.large, settings_, round_rows, large_title),
                lambda: [r for r in round_rows if r["workload"] != settings_.cnn.name],
                lambda: report.write_csv("rounds.csv", round_rows)),
        Section("memory", lambda: memory_section(report, args.data, settings_, memory_rows),
                lambda: memory_tables(settings_, memory_rows), lambda: memory_rows,
                lambda: report.write_csv("memory.csv", memory_rows)),
    ]
    return [s for s in every if s.name in args.sections
            and (s.name != "pfllib" or args.pfllib is not None)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="results folder")
    parser.add_argument("--data", type=Path, default=DATA, help="the packed CIFAR-10 subset")
    parser.add_argument("--pfllib", type=Path, default=None,
                        help="a PFLlib checkout (its system/ folder); none: no PFLlib section")
    parser.add_argument("--pfllib-rounds", type=int, default=15)
    parser.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS),
                        help="the methods of the cnn and large sections (default: all)")
    parser.add_argument("--budget", type=float, default=420.0,
                        help="seconds the whole script may take: each section runs to its "
                        "share of it (see SHARES), then is cut")
    parser.add_argument("--smoke", action="store_true",
                        help="2 rounds of tiny workloads, on a CPU where there is no GPU")
    args = parser.parse_args(argv)
    settings_ = only(settings(args.smoke), args.methods)
    if settings_.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: benchmarks/gpu.py needs a CUDA GPU (or --smoke); torch sees "
                         "none")
    if not args.data.is_file():
        raise SystemExit(f"error: no packed data at {args.data}; run python "
                         "benchmarks/pack_data.py cifar10 --first-per-class 1000 200")
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/gpu.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    report = Report(args.out, command, budget=args.budget, machine=machine(settings_.device))
    chosen = sections(report, settings_, args)
    for name in (n for n in SECTIONS if n in args.sections):
        left = [s for s in chosen if SECTIONS.index(s.name) >= SECTIONS.index(name)]
        if left and left[0].name == name:
            run_section(report, left[0], sum(SHARES[s.name] for s in left))
        else:  # asked for, but nothing to run it with
            report.section(name, ["## PFLlib", "", "not run (no --pfllib)"])
    report.write()
    print(f"\nwrote {args.out}/gpu.md in {report.elapsed():.0f} s", flush=True)


if __name__ == "__main__":
    main()
