"""The pFL baselines side by side on MNIST-5k, in one of three settings.

Settings (``--setting``):

* ``pathological`` (default): 20 clients, 2 classes each, 75/25 split per client, GPFL's
  workload: 4-layer CNN (``cnn_bn`` for FedBN), SGD lr 0.005, batch 10, 1 local epoch, join
  ratio 1, sample-weighted aggregation;
* ``dirichlet``: the same with Dirichlet(0.1) label skew (the configs' ``mnist5k_dirichlet``);
* ``incomplete``: MAP's incomplete-classes scene (100 clients, 2..10 classes each, LogNormal(0,
  0.3) sizes, 80/20 split) with MAP's workload: SGD lr 0.03, momentum 0.9, weight decay 1e-5,
  batch 64, 6 local epochs, join ratio 0.2, uniform mean (the configs' ``mnist5k_incomplete``).

Methods (``--methods``, default all of METHODS present in ``fedlight.clients``): the references
FedAvg, Local and FedProx, the personalization baselines, and the methods the seed papers compare
against (SCAFFOLD, FedDyn, FedNova, MOON, FedBABU, APFL, Per-FedAvg, pFedMe, FedMMD, FLDA,
FedAwS, DittoRS, ScaRS, FedDF) and FedOpt's four server rules (FedAvgM, FedAdam, FedYogi,
FedAdagrad: FedAvg clients under the rule of ``configs/server/<name>.yaml``), and variant rows
(``SCAFFOLD-m0``, ``ScaRS-m0``: without momentum, see ``MODEL_VARIANTS``). Every method
uses its class defaults otherwise; FedDF's server distils on an unlabeled public set of 500
test inputs (``data.public_samples``, MAP's protocol), the only per-method data option. The
partition is fixed (data seed 0); the seed changes model initialization, batch order and the
methods' randomness.

Printed per method, mean ± std over seeds, in %: best and last personalized accuracy (pooled
over clients), best and last global accuracy ("-" without a global model), the fairness std
(``personalized_accuracy_std``) at the round of best personalized accuracy and at the last
round, and wall seconds per round. A run whose loss becomes non-finite (the trainer stops it
with a FloatingPointError) is recorded as diverged, and its method's row is over its other
seeds. ``--jobs N`` runs N runs at a time in separate processes
(each with ``--threads`` torch threads); the footer gives wall time and the CPU time of all
processes. ``--cache FILE`` appends each finished run to a JSON-lines file and skips
runs already there, so an interrupted table resumes where it stopped.

    python benchmarks/compare_baselines.py --setting dirichlet --rounds 40 --seeds 3 \
        --eval-every 5 --jobs 2 --threads 1 \
        --cache benchmarks/results/baselines_dirichlet.jsonl \
        --out benchmarks/results/baselines_dirichlet.md
    python benchmarks/compare_baselines.py --setting incomplete --rounds 40 --seeds 3 \
        --eval-every 5 --jobs 2 --threads 1 \
        --cache benchmarks/results/baselines_incomplete.jsonl \
        --out benchmarks/results/baselines_incomplete.md
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("WANDB_MODE", "offline")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import yaml  # noqa: E402

from fedlight.clients import CLIENTS  # noqa: E402
from fedlight.data import FederatedDataModule  # noqa: E402
from fedlight.federation import FederatedTrainer  # noqa: E402
from fedlight.federation import server as server_rules  # noqa: E402
from fedlight.federation.server import ServerRule  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "configs"

METHODS = ("FedAvg", "Local", "FedProx", "FedPer", "FedRep", "FedBN", "LGFedAvg", "Ditto",
           "FedRoD", "FedProto", "GPFL", "SCAFFOLD", "FedDyn", "FedNova", "MOON", "FedBABU",
           "APFL", "PerFedAvg", "PFedMe", "FedMMD", "FLDA", "FedAwS", "DittoRS", "ScaRS",
           "FedDF", "FedAvgM", "FedAdam", "FedYogi", "FedAdagrad")
#: FedOpt rows (Reddi et al. 2021): FedAvg clients under a server rule, built from the shipped
#: fragment configs/server/<name>.yaml so the table uses the settings a user gets
SERVER_ROWS = {"FedAvgM": "fedavgm", "FedAdam": "fedadam", "FedYogi": "fedyogi",
               "FedAdagrad": "fedadagrad"}
#: variant rows: a client class with model arguments changed from the setting's (whether
#: SCAFFOLD / ScaRS still diverge at MAP's lr 0.03 without its momentum 0.9: they do)
MODEL_VARIANTS = {"SCAFFOLD-m0": ("SCAFFOLD", {"momentum": 0.0}),
                  "ScaRS-m0": ("ScaRS", {"momentum": 0.0})}
BACKBONE = {"FedBN": "cnn_bn"}
#: data-module options a method needs beyond its setting's (FedDF's server-side public set)
METHOD_DATA = {"FedDF": {"public_samples": 500}}
GPFL_WORKLOAD = {"model": {"lr": 0.005},
                 "trainer": {"join_ratio": 1.0, "local_epochs": 1, "batch_size": 10,
                             "weighting": "samples"}}
#: setting -> data-module, model and trainer arguments
SETTINGS: dict[str, dict[str, dict[str, Any]]] = {
    "pathological": {"data": {"num_clients": 20, "partition": "pathological",
                              "classes_per_client": 2, "train_fraction": 0.75},
                     **GPFL_WORKLOAD},
    "dirichlet": {"data": {"num_clients": 20, "partition": "dirichlet", "beta": 0.1,
                           "train_fraction": 0.75},
                  **GPFL_WORKLOAD},
    "incomplete": {"data": {"num_clients": 100, "partition": "incomplete", "size_sigma": 0.3,
                            "min_client_size": 5, "train_fraction": 0.8},
                   "model": {"lr": 0.03, "momentum": 0.9, "weight_decay": 1e-5},
                   "trainer": {"join_ratio": 0.2, "local_epochs": 6, "batch_size": 64,
                               "weighting": "uniform"}},
}
COLUMNS = ("best pers.", "last pers.", "best global", "last global", "std @ best",
           "std last", "s / round")


def server_rule(method: str) -> ServerRule | None:
    """The FedOpt row's server rule from its shipped config fragment; None for client rows."""
    if method not in SERVER_ROWS:
        return None
    spec = yaml.safe_load((CONFIGS / "server" / f"{SERVER_ROWS[method]}.yaml").read_text())
    rule = spec["server"]
    return getattr(server_rules, rule["class_path"])(**rule.get("init_args", {}))


def run_once(method: str, seed: int, rounds: int, setting: str, threads: int | None,
             eval_every: int = 1) -> dict[str, float | None]:
    """One federated run; returns the figures of one table row (fractions, seconds)."""
    options = SETTINGS[setting]
    data = FederatedDataModule(source="mnist5k", seed=0, **options["data"],
                               **METHOD_DATA.get(method, {}))
    torch.manual_seed(seed)
    client, changes = MODEL_VARIANTS.get(method, ("FedAvg" if method in SERVER_ROWS else method,
                                                  {}))
    model = CLIENTS[client](backbone=BACKBONE.get(method, "cnn"), num_classes=10,
                            input_shape=(1, 28, 28), **{**options["model"], **changes})
    with tempfile.TemporaryDirectory() as root:
        trainer = FederatedTrainer(rounds=rounds, seed=seed, accelerator="cpu",
                                   default_root_dir=root, logger="csv", progress_bar=False,
                                   checkpoint_every=rounds, threads=threads, verbose=False,
                                   eval_every=eval_every,
                                   **options["trainer"])
        try:
            summary = trainer.fit(model, data, server=server_rule(method))
        except FloatingPointError as error:  # a diverged run is a result, not a crash
            return {"error": str(error)}
    history = trainer.history
    best_round = summary["best_personalized_accuracy_round"]
    at_best = next(r for r in history if r["round"] == best_round)
    return {
        "best pers.": summary["best_personalized_accuracy"],
        "last pers.": summary["last_personalized_accuracy"],
        "best global": summary["best_global_accuracy"],
        "last global": summary["last_global_accuracy"],
        "std @ best": at_best["personalized_accuracy_std"],
        "std last": history[-1]["personalized_accuracy_std"],
        "s / round": summary["seconds"] / max(summary["rounds"], 1),  # train + aggregate
    }


def read_cache(path: Path | None, setting: str, horizon: tuple[int, int]
               ) -> dict[tuple[str, int], dict[str, float | None]]:
    """Finished runs of this setting and horizon ((rounds, eval_every)) in a ``--cache`` file:
    (method, seed) -> row."""
    if path is None or not path.exists():
        return {}
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {(r["method"], r["seed"]): r["row"] for r in runs
            if r["setting"] == setting and (r["rounds"], r["eval_every"]) == horizon}


def append_cache(path: Path | None, setting: str, horizon: tuple[int, int], method: str,
                 seed: int, row: dict[str, float | None]) -> None:
    """Append one finished run to the ``--cache`` file (one JSON object per line)."""
    if path is None:
        return
    record = {"setting": setting, "rounds": horizon[0], "eval_every": horizon[1],
              "method": method, "seed": seed, "row": row}
    with path.open("a") as handle:
        handle.write(json.dumps(record) + "\n")


def cell(values: list[float | None], percent: bool = True) -> str:
    """``mean ± std`` over seeds (std 0 for one seed); ``-`` when the method has no value."""
    if any(v is None for v in values):
        return "-"
    scale = 100.0 if percent else 1.0
    mean = scale * statistics.fmean(values)
    std = scale * statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.2f} ± {std:.2f}" if percent else f"{mean:.1f}"


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setting", choices=sorted(SETTINGS), default="pathological",
                        help="data split and workload (see the module docstring)")
    parser.add_argument("--rounds", type=int, default=30, help="rounds per run")
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1 per method")
    parser.add_argument("--methods", nargs="+", default=list(METHODS),
                        help="client class names (default: the baselines and GPFL)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (processes)")
    parser.add_argument("--eval-every", type=int, default=1,
                        help="evaluate every this many rounds (and the last); best-of columns "
                             "are then over the evaluated rounds only")
    parser.add_argument("--out", type=Path, default=None, help="also write the Markdown here")
    parser.add_argument("--cache", type=Path, default=None,
                        help="JSON-lines file of finished runs: appended to, and runs already "
                             "in it (same setting, rounds, eval-every, method, seed) are not run "
                             "again")
    args = parser.parse_args(argv)
    if min(args.rounds, args.seeds, args.jobs, args.eval_every) < 1:
        parser.error(f"--rounds, --seeds, --jobs and --eval-every must be >= 1, got "
                     f"{args.rounds}, {args.seeds}, {args.jobs} and {args.eval_every}")
    runnable = {*CLIENTS, *SERVER_ROWS, *MODEL_VARIANTS}
    unknown = [m for m in args.methods if m not in METHODS and m not in runnable]
    if unknown:
        parser.error(f"unknown method(s) {unknown}; valid: {sorted(runnable)}")

    started, cpu_started = time.perf_counter(), time.process_time()
    seeds = list(range(args.seeds))
    methods = [m for m in args.methods if m in runnable]
    missing = [m for m in args.methods if m not in methods]
    rows: dict[str, dict[str, list[float | None]]] = {}
    errors: dict[str, tuple[int, int, str]] = {}  # method -> (failed, runs, first message)
    horizon = (args.rounds, args.eval_every)
    cached = read_cache(args.cache, args.setting, horizon)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {method: [pool.submit(run_once, method, s, args.rounds, args.setting,
                                        args.threads, args.eval_every)
                            if (method, s) not in cached else None
                            for s in seeds] for method in methods}
        for method, runs in futures.items():
            results = []
            for seed, future in zip(seeds, runs, strict=True):
                if future is None:
                    results.append(cached[method, seed])
                    continue
                results.append(future.result())
                append_cache(args.cache, args.setting, horizon, method, seed, results[-1])
            failed = [r["error"] for r in results if "error" in r]
            if failed:
                errors[method] = (len(failed), len(results), failed[0])
            finished = [r for r in results if "error" not in r] or [dict.fromkeys(COLUMNS)]
            rows[method] = {c: [r[c] for r in finished] for c in COLUMNS}
            print(f"  {method:<10} best pers. {cell(rows[method]['best pers.'])}",
                  file=sys.stderr, flush=True)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = (time.perf_counter() - started) / 60
    cpu = (time.process_time() - cpu_started + children.ru_utime + children.ru_stime) / 60

    lines = [
        f"### Baselines on MNIST-5k, setting `{args.setting}`",
        "",
        f"Data {SETTINGS[args.setting]['data']}; model {SETTINGS[args.setting]['model']} "
        f"(4-layer CNN, `cnn_bn` for FedBN); trainer {SETTINGS[args.setting]['trainer']}; "
        f"**{args.rounds} rounds**, evaluated every {args.eval_every} round(s) and the last, "
        f"seeds {seeds} (mean ± std over seeds), accuracies in %. "
        "\"std\" is the std of the clients' personalized accuracies (fairness; lower is "
        "fairer); \"-\": no global model.",
        "",
        "| Method | " + " | ".join(COLUMNS) + " |",
        "| --- | " + " | ".join("---" for _ in COLUMNS) + " |",
    ]
    for method in methods:
        cells = [cell(rows[method][c], percent=c != "s / round") for c in COLUMNS]
        label = method + (f" (diverged in {errors[method][0]} of {errors[method][1]} seeds)"
                          if method in errors else "")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for method, (failed, runs, message) in errors.items():
        lines += ["", f"{method}: {failed} of {runs} runs stopped on a non-finite loss; the "
                  f"row is over the others (\"-\" if none). First message: {message}"]
    if missing:
        lines += ["", f"Not in fedlight.clients when this ran (skipped): {', '.join(missing)}."]
    lines += ["", f"{len(methods) * len(seeds)} runs in {args.jobs} process(es) x "
              f"{args.threads or torch.get_num_threads()} thread(s): wall time {wall:.1f} min, "
              f"CPU time of all processes {cpu:.1f} min."]
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return text


if __name__ == "__main__":
    main()
