"""fedlight against PFLlib on the identical split: best accuracy and whole-process wall time.

Give the path of a PFLlib checkout you fetched yourself (``git clone
https://github.com/TsingZ0/PFLlib``; nothing of PFLlib is shipped with fedlight). The script

1. exports the split a fedlight config generates (``fedlight export-partition``) into
   ``<PFLlib>/dataset/<name>/`` in PFLlib's layout (``<name>`` holds ``Cifar10`` for 3 x 32 x
   32 inputs and ``MNIST`` for 1 x 28 x 28, so PFLlib's ``-m CNN`` builds the same 4-layer CNN as
   fedlight's ``cnn``);
2. runs every method in both, each a fresh process timed from start to exit: fedlight trains on
   that very folder (``data.source: {class_path: PFLlib}``), PFLlib with ``system/main.py``
   flags carrying the same hyper-parameters (rounds, batch size, lr, local epochs, join ratio,
   evaluation gap and each method's own weights, read from the fedlight configuration so both
   use the same values where the two defaults differ, e.g. FedProx's mu or FedRep's head epochs);
3. tabulates the best personalized accuracy over the evaluated rounds (fedlight's
   ``best_personalized_accuracy``; PFLlib's printed "Best accuracy", the same pooled
   accuracy over all clients' test samples), the wall and CPU seconds side by side, and the
   speed-up: with ``--repeats N`` the two run in turn N times and the ratio is taken pair by
   pair (its median, smallest and largest), which holds when the machine's speed drifts;
   then each library's median round (fedlight's metrics.csv ``seconds``, PFLlib's printed
   "time cost") and their ratio, which leaves the processes' start-up out.

Equal training: PFLlib's ``-gr N`` trains N + 1 rounds (``range(global_rounds + 1)`` in its
servers), evaluating before each round's training, so for R rounds PFLlib gets ``-gr R-1``:
both train R rounds and evaluate R times (PFLlib the states after 0..R-1 rounds, fedlight
after 1..R; PFLlib's last trained round is never scored). PFLlib has no seed option: its
initialization differs from fedlight's, so single runs differ by seed noise.

Each ``--variant LABEL=OPTIONS`` is one way of running fedlight (e.g. its defaults, and one
process); every repeat runs each variant and PFLlib once, in turn, and each variant is paired
with that repeat's PFLlib run. ``--raw FILE.csv`` records every process (method, repeat,
library, variant, command, start time, load average at start, wall, CPU, best accuracy),
rewritten after each one, so that a published figure can be recomputed from it; beside it,
``FILE.rounds.csv`` holds every evaluation of every process (``trained_rounds``, accuracy:
fedlight's metrics.csv, PFLlib's printed "Averaged Test Accuracy" per round).

    python benchmarks/vs_pfllib.py ../PFLlib --config configs/fedavg/mnist5k_dirichlet.yaml \\
        --rounds 40 --out benchmarks/results/vs_pfllib.md
    python benchmarks/vs_pfllib.py ../PFLlib --methods FedAvg --repeats 3 \\
        --variant defaults= --variant "one process=--trainer.devices=1" --raw pairs.csv
    python benchmarks/vs_pfllib.py ../PFLlib --methods GPFL FedPer --dry-run   # commands only
"""

from __future__ import annotations

import argparse
import csv
import datetime
import hashlib
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fedlight.sweep import cpu_seconds, resolve_arguments

ROOT = Path(__file__).resolve().parents[1]

Flags = Callable[[dict[str, Any]], list[str]]


@dataclass(frozen=True)
class Method:
    """A method both libraries have: fedlight's class and arguments, PFLlib's name and flags
    (built from the resolved fedlight model arguments)."""

    fedlight: str
    pfllib: str
    init_args: tuple[tuple[str, Any], ...] = ()
    flags: Flags = lambda args: []


METHODS = {
    # PFLlib runs the authors' code, whose p_k is not divided by the number of classes
    "GPFL": Method("GPFL", "GPFL", (("lamda", 0.01), ("mu", 0.1), ("p_divide_by_classes", False)),
                   lambda a: ["-lam", str(a["lamda"]), "-mu", str(a["mu"])]),
    "FedPer": Method("FedPer", "FedPer"),
    # the same local work as the others: one head epoch, then the body (PFLlib: -pls)
    "FedRep": Method("FedRep", "FedRep", (("head_epochs", 1),),
                     lambda a: ["-pls", str(a["head_epochs"])]),
    "FedRoD": Method("FedRoD", "FedROD"),
    # PFLlib's Ditto calls its regularizer weight mu and its personal epochs plocal_epochs
    "Ditto": Method("Ditto", "Ditto", (),
                    lambda a: ["-mu", str(a["lamda"]), "-pls", str(a["personal_epochs"])]),
    # PFLlib scores FedProto by the nearest global prototype (fedlight's default: the head)
    "FedProto": Method("FedProto", "FedProto", (("predict_by", "prototype"),),
                       lambda a: ["-lam", str(a["lamda"])]),
    "FedAvg": Method("FedAvg", "FedAvg"),
    "FedProx": Method("FedProx", "FedProx", (), lambda a: ["-mu", str(a["mu"])]),
}
#: PFLlib picks the CNN's flattened size from the dataset name (system/main.py, -m CNN)
DATASET_NAMES = {(3, 32, 32): "Cifar10", (1, 28, 28): "MNIST"}


def check_checkout(pfllib: Path) -> Path:
    """``<pfllib>/system/main.py``, or a one-line error saying what is expected."""
    main_py = pfllib / "system" / "main.py"
    if not main_py.is_file():
        raise SystemExit(f"error: {str(pfllib)!r} is not a PFLlib checkout (no system/main.py); "
                         "git clone https://github.com/TsingZ0/PFLlib and pass its folder")
    return main_py


def dataset_name(input_shape: Sequence[int], config: Path, changes: Sequence[str] = ()) -> str:
    """The exported folder's name: PFLlib's CNN size keyword plus the config's name (and a
    digest of the changes made to it, so that differently changed splits never share one)."""
    keyword = DATASET_NAMES.get(tuple(input_shape))
    if keyword is None:
        valid = ", ".join("x".join(map(str, s)) for s in DATASET_NAMES)
        raise SystemExit(f"error: PFLlib's CNN takes inputs {valid}; this config's are "
                         f"{'x'.join(map(str, input_shape))}")
    digest = hashlib.sha1("\n".join(changes).encode()).hexdigest()[:8] if changes else ""
    return f"{keyword}_fedlight_{config.stem}" + (f"_{digest}" if digest else "")


def fedlight_arguments(method: Method, config: Path, folder: Path, rounds: int,
                       threads: int | None, extra: Sequence[str] = ()) -> list[str]:
    """``fedlight fit`` options of one method on the exported folder (``threads`` None:
    fedlight's default), then ``extra``."""
    return ["-c", str(config), f"--model={method.fedlight}",
            *(f"--model.init_args.{k}={v}" for k, v in method.init_args),
            "--data.source="
            + json.dumps({"class_path": "PFLlib", "init_args": {"root": str(folder)}}),
            f"--trainer.rounds={rounds}",
            *([] if threads is None else [f"--trainer.threads={threads}"]),
            "--trainer.progress_bar=false", "--trainer.verbose=false", *extra]


def changed_config(config: Path, changes: Sequence[str], out: Path) -> Path:
    """``config`` itself, or, with KEY=VALUE changes, a copy of it with them applied written
    to ``out`` (the split's export reads the YAML file, not a command line)."""
    if not changes:
        return config
    content = yaml.safe_load(config.read_text()) or {}
    for entry in changes:
        key, sep, value = entry.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: --set {entry!r}: expected KEY=VALUE, "
                             "e.g. data.caps.client_samples=300")
        *sections, leaf = key.split(".")
        node = content
        for section in sections:
            node = node.setdefault(section, {})
        node[leaf] = yaml.safe_load(value)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(content, sort_keys=False))
    return out


def pfllib_command(method: Method, resolved: dict[str, Any], name: str, num_clients: int,
                   num_classes: int, device: str) -> list[str]:
    """PFLlib's ``main.py`` flags for the resolved fedlight configuration of one method."""
    model, trainer = resolved["model"]["init_args"], resolved["trainer"]
    return ["main.py", "-data", name, "-m", "CNN", "-algo", method.pfllib,
            "-gr", str(pfllib_rounds(trainer["rounds"])), "-lbs", str(trainer["batch_size"]),
            "-lr", str(model["lr"]), "-ls", str(trainer["local_epochs"]),
            "-jr", str(trainer["join_ratio"]), "-nc", str(num_clients),
            "-ncl", str(num_classes), "-eg", str(trainer["eval_every"]), "-dev", device,
            "-t", "1", *method.flags(model)]


def pfllib_rounds(rounds: int) -> int:
    """PFLlib's ``-gr`` for ``rounds`` training rounds: it trains ``-gr`` + 1."""
    if rounds < 1:
        raise SystemExit(f"error: --rounds must be at least 1, got {rounds}")
    return rounds - 1


def pfllib_round_seconds(stdout: str) -> float:
    """The median of the per-round times PFLlib prints ("---- time cost ---- 1.23": a
    round's selection, evaluation where due, training and aggregation); NaN when none."""
    seconds = [float(line.split()[-1]) for line in stdout.splitlines()
               if "time cost" in line and line.split()[-1].replace(".", "", 1).isdigit()]
    return statistics.median(seconds) if seconds else math.nan


def fedlight_round_seconds(run: Path) -> float:
    """The median of a fedlight run's per-round seconds (metrics.csv's ``seconds``: a
    round's training, aggregation and evaluation where due); NaN without the file."""
    metrics = run / "metrics.csv"
    if not metrics.is_file():
        return math.nan
    with metrics.open() as handle:
        seconds = [float(row["seconds"]) for row in csv.DictReader(handle) if row.get("seconds")]
    return statistics.median(seconds) if seconds else math.nan


def fedlight_curve(run: Path) -> list[tuple[int, float]]:
    """(trained rounds, personalized accuracy) of every evaluated round of a fedlight run
    (metrics.csv); empty without the file."""
    metrics = run / "metrics.csv"
    if not metrics.is_file():
        return []
    with metrics.open() as handle:
        return [(int(row["round"]), float(row["personalized_accuracy"]))
                for row in csv.DictReader(handle) if row.get("personalized_accuracy")]


def pfllib_curve(stdout: str) -> list[tuple[int, float]]:
    """(trained rounds, accuracy) of every evaluation PFLlib printed: its "Round number: i"
    evaluates the state after i trained rounds, before round i's training."""
    curve: list[tuple[int, float]] = []
    trained = None
    for line in stdout.splitlines():
        if "Round number:" in line:
            trained = int(line.split("Round number:")[1].strip(" -"))
        elif line.startswith("Averaged Test Accuracy:") and trained is not None:
            curve.append((trained, float(line.split(":")[1])))
            trained = None
    return curve


def curve_rows(method: str, repeat: int, library: str, variant: str,
               curve: Sequence[tuple[int, float]]) -> list[dict[str, Any]]:
    """One process's per-round accuracies as ``--raw``'s rounds file records them."""
    return [{"method": method, "repeat": repeat, "library": library, "variant": variant,
             "trained_rounds": trained, "accuracy": f"{accuracy:.6f}"}
            for trained, accuracy in curve]


def rounds_path(raw: Path) -> Path:
    """Where ``--raw FILE.csv`` puts the per-round accuracies: ``FILE.rounds.csv``."""
    return raw.with_suffix(".rounds.csv")


def best_accuracy(stdout: str) -> float:
    """The value PFLlib prints on the line after "Best accuracy." (NaN when absent)."""
    lines = [line.strip() for line in stdout.splitlines()]
    for i, line in enumerate(lines[:-1]):
        if line == "Best accuracy.":
            try:
                return float(lines[i + 1])
            except ValueError:
                break
    return math.nan


@dataclass(frozen=True)
class Timing:
    """One whole process: wall seconds from start to exit, CPU seconds (user + system) of it
    and every process it waited for, its stdout, when it started (UTC, ISO 8601) and the
    machine's 1-minute load average then."""

    wall: float
    cpu: float
    stdout: str
    started: str = ""
    load: float = math.nan


def timed(command: Sequence[str], cwd: Path, env: dict[str, str]) -> Timing:
    """Run ``command`` to its end and time it (a failure is a one-line error)."""
    started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    load = os.getloadavg()[0]
    cpu_before, started = cpu_seconds(), time.perf_counter()
    done = subprocess.run(list(command), cwd=cwd, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu_before
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise SystemExit(f"error: {shlex.join(command)} failed ({done.returncode}): {tail[0]}")
    return Timing(wall, cpu, done.stdout, started_at, load)


#: the columns of --raw, one row per timed process
RAW_COLUMNS = ["method", "repeat", "library", "variant", "rounds", "started_utc",
               "load_1min_at_start", "wall_s", "cpu_s", "best_accuracy", "command",
               "median_round_s"]
#: ``--raw``'s rounds file: every evaluation of every process (PFLlib's states after 0..R-1
#: trained rounds, fedlight's after 1..R)
ROUND_COLUMNS = ["method", "repeat", "library", "variant", "trained_rounds", "accuracy"]


def raw_row(method: str, repeat: int, library: str, variant: str, rounds: int,
            timing: Timing, accuracy: float, command: str,
            round_seconds: float = math.nan) -> dict[str, Any]:
    """One process of the comparison as --raw records it."""
    return {"method": method, "repeat": repeat, "library": library, "variant": variant,
            "rounds": rounds, "started_utc": timing.started,
            "load_1min_at_start": f"{timing.load:.2f}", "wall_s": f"{timing.wall:.2f}",
            "cpu_s": f"{timing.cpu:.2f}", "best_accuracy": f"{accuracy:.6f}",
            "command": command, "median_round_s": f"{round_seconds:.4f}"}


def write_raw(path: Path, rows: Sequence[dict[str, Any]],
              columns: Sequence[str] = RAW_COLUMNS) -> None:
    """Every process so far, as CSV (written whole each time: a stopped run keeps its rows)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def parse_variant(entry: str) -> tuple[str, list[str]]:
    """``LABEL=OPTIONS`` (options split as a shell would) -> (label, options)."""
    label, sep, options = entry.partition("=")
    if not sep or not label.strip() or label.startswith("-"):  # an option without a label
        raise SystemExit(f"error: --variant {entry!r}: expected LABEL=OPTIONS, e.g. "
                         "'one process=--trainer.devices=1' (OPTIONS may be empty)")
    return label.strip(), shlex.split(options)


def table(rows: Sequence[dict[str, Any]]) -> str:
    """Best accuracies and wall and CPU seconds, each the median over the repeats (PFLlib has
    no seed, so its accuracy varies run to run), and the speed-up: the
    median over the pairs (run one after the other) of PFLlib wall / fedlight wall, with the
    smallest and largest pair's ratio when there are several pairs."""
    lines = ["| method | fedlight best (%) | PFLlib best (%) | difference (points) | "
             "fedlight wall (s) | PFLlib wall (s) | fedlight CPU (s) | PFLlib CPU (s) | "
             "speed-up (wall) |", "|" + " --- |" * 9]
    for row in rows:
        ours, theirs = (100 * statistics.median(row[name]) for name in ("fedlight", "pfllib"))
        fast, slow = row["fedlight_time"], row["pfllib_time"]
        ratios = [b.wall / a.wall for a, b in zip(fast, slow, strict=True)]
        spread = f" ({min(ratios):.2f}-{max(ratios):.2f})" if len(ratios) > 1 else ""
        label = f"{row['method']}, {row['variant']}" if row.get("variant") else row["method"]
        lines.append(
            f"| {label} | {ours:.2f} | {theirs:.2f} | {ours - theirs:+.2f} | "
            f"{median(fast, 'wall'):.1f} | {median(slow, 'wall'):.1f} | "
            f"{median(fast, 'cpu'):.1f} | {median(slow, 'cpu'):.1f} | "
            f"{statistics.median(ratios):.2f}x{spread} |")
    return "\n".join(lines)


def round_table(rows: Sequence[dict[str, Any]]) -> str:
    """Each library's median round (over the rounds of a process, then over the repeats)
    and their ratio: the per-round speed-up, without the processes' start-up."""
    lines = ["| method | fedlight median round (s) | PFLlib median round (s) | "
             "speed-up (round) |", "|" + " --- |" * 4]
    for row in rows:
        ours = statistics.median(row.get("fedlight_round") or [math.nan])
        theirs = statistics.median(row.get("pfllib_round") or [math.nan])
        label = f"{row['method']}, {row['variant']}" if row.get("variant") else row["method"]
        lines.append(f"| {label} | {ours:.4f} | {theirs:.4f} | {theirs / ours:.2f}x |")
    return "\n".join(lines)


def median(timings: Sequence[Timing], field: str) -> float:
    return statistics.median(getattr(t, field) for t in timings)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pfllib", type=Path, help="a PFLlib checkout (holds system/main.py)")
    parser.add_argument("--config", type=Path,
                        default=ROOT / "configs" / "fedavg" / "mnist5k_dirichlet.yaml",
                        help="fedlight config whose data split and workload both run")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads of both (default: each library's own default)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="run each pair this many times, in turn (walls: the median)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="change the config for both libraries, e.g. "
                        "data.caps.client_samples=300 (the exported split follows it)")
    parser.add_argument("--fedlight-args", nargs="*", default=[],
                        help="more fedlight fit options for every variant, e.g. "
                        "--trainer.devices=auto")
    parser.add_argument("--variant", action="append", default=[], metavar="LABEL=OPTIONS",
                        help="a way of running fedlight, paired with the same PFLlib runs "
                        "(repeatable), e.g. defaults= and 'one process=--trainer.devices=1'; "
                        "default: one variant with --fedlight-args alone")
    parser.add_argument("--device", default="cpu", help="PFLlib's -dev (fedlight: the config's "
                        "trainer.accelerator)")
    parser.add_argument("--pfllib-python", default=sys.executable,
                        help="interpreter of PFLlib's environment")
    parser.add_argument("--out", type=Path, default=None, help="also write the Markdown here")
    parser.add_argument("--raw", type=Path, default=None,
                        help="write every timed process here as CSV (see RAW_COLUMNS)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)
    main_py = check_checkout(args.pfllib)
    config = args.config.resolve()
    changes = [f"--{entry}" for entry in args.set]
    # fedlight trains on the exported folder, which the data changes already shaped
    trainer_changes = [c for c in changes if not c.startswith("--data.")]
    first = resolve_arguments(["-c", str(config), *changes], str(config))
    from fedlight.data.datamodule import FederatedDataModule

    data = FederatedDataModule(**first["data"])
    data.setup()
    name = dataset_name(data.input_shape, config, args.set)
    folder = (args.pfllib / "dataset" / name).resolve()
    env = {**os.environ, "WANDB_MODE": "offline"}
    # fedlight from this checkout, ahead of what the environment already adds
    fedlight_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    if args.threads is not None:
        env["OMP_NUM_THREADS"] = str(args.threads)
    split_config = changed_config(config, args.set, folder.with_suffix(".yaml"))
    export = [sys.executable, "-m", "fedlight", "export-partition", str(split_config),
              str(folder)]
    if args.dry_run:
        print(shlex.join(export))
    else:
        timed(export, ROOT, {**env, "PYTHONPATH": fedlight_path})
    info = {"num_clients": data.num_clients, "num_classes": data.num_classes}
    if (folder / "config.json").is_file():
        info.update(json.loads((folder / "config.json").read_text()))
    variants = [parse_variant(v) for v in args.variant] or [("", [])]
    rows: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    curves: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as runs:
        for label in args.methods:
            method = METHODS[label]
            ours = fedlight_arguments(method, config, folder, args.rounds, args.threads,
                                      [*trainer_changes, *args.fedlight_args])
            ours += [f"--trainer.default_root_dir={runs}", f"--trainer.run_name={label}"]
            # the `fedlight` command as a user runs it; a variant's options come last and win
            fits = {variant: [sys.executable, "-m", "fedlight", "fit", *ours, *options]
                    for variant, options in variants}
            theirs = [args.pfllib_python, *pfllib_command(
                method, resolve_arguments(ours, label), name, info["num_clients"],
                info["num_classes"], args.device)]
            in_pfllib = f"(cd {main_py.parent} && {shlex.join(theirs)})"
            if args.dry_run:
                print(*(shlex.join(fit) for fit in fits.values()), in_pfllib, sep="\n")
                continue
            method_rows = {variant: {"method": label, "variant": variant, "fedlight": [],
                                     "pfllib": [], "fedlight_time": [],
                                     "pfllib_time": [], "fedlight_round": [],
                                     "pfllib_round": []} for variant in fits}
            for repeat in range(args.repeats):
                for variant, fit in fits.items():
                    shutil.rmtree(Path(runs) / label, ignore_errors=True)
                    timing = timed(fit, ROOT, {**env, "PYTHONPATH": fedlight_path})
                    summary = json.loads((Path(runs) / label / "summary.json").read_text())
                    accuracy = summary["best_personalized_accuracy"]
                    seconds = fedlight_round_seconds(Path(runs) / label)
                    curves += curve_rows(label, repeat, "fedlight", variant,
                                         fedlight_curve(Path(runs) / label))
                    method_rows[variant]["fedlight_time"].append(timing)
                    method_rows[variant]["fedlight_round"].append(seconds)
                    method_rows[variant]["fedlight"].append(accuracy)
                    records.append(raw_row(label, repeat, "fedlight", variant, args.rounds,
                                           timing, accuracy, shlex.join(fit), seconds))
                timing = timed(theirs, main_py.parent, env)
                accuracy = best_accuracy(timing.stdout)
                seconds = pfllib_round_seconds(timing.stdout)
                for row in method_rows.values():
                    row["pfllib_time"].append(timing)
                    row["pfllib_round"].append(seconds)
                    row["pfllib"].append(accuracy)
                records.append(raw_row(label, repeat, "PFLlib", "", args.rounds, timing,
                                       accuracy, in_pfllib, seconds))
                curves += curve_rows(label, repeat, "PFLlib", "", pfllib_curve(timing.stdout))
                if args.raw:
                    write_raw(args.raw, records)
                    write_raw(rounds_path(args.raw), curves, ROUND_COLUMNS)
            rows += method_rows.values()
            print(table(rows).splitlines()[-1], flush=True)
    if args.dry_run:
        return
    given = shlex.join(argv if argv is not None else sys.argv[1:])
    text = "\n".join([
        f"## fedlight vs PFLlib on one split ({name}, {args.rounds} rounds)", "",
        f"`python benchmarks/vs_pfllib.py {given}`",
        "", f"torch threads: {args.threads or 'each library default'}; fedlight options "
        f"{' '.join(args.fedlight_args) or '(none)'}; variants "
        f"{'; '.join(args.variant) or '(one)'}; PFLlib device {args.device}; PFLlib's -gr "
        f"{pfllib_rounds(args.rounds)} (it trains -gr + 1 rounds); wall and CPU "
        f"= the median over {args.repeats} run(s) of each whole process from start to exit "
        "(import, data, training, evaluation; CPU = user + system of it and its children), "
        "the two libraries in turn; speed-up = the median of the pairs' wall ratios.", "",
        table(rows), "", round_table(rows), ""])
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
