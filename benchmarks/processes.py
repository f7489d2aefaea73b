"""Whole-process time of the quick-start run with one process against one process per core: where
several processes pay for their start-up (the crossover).

Each run is a fresh `fedlight fit` process (`python cli.py fit -c CONFIG --trainer.rounds R`),
timed from start to exit with its children (import, data, process start-up, training,
evaluation every round, the final report), for every R of --rounds, once with one process
(`trainer.devices 1`) and once with --devices processes (`strategy ddp_fork`, one thread each,
`trainer.threads auto`). Printed per R: wall and CPU seconds of both and the speed-up; then
the fitted start-up cost and seconds per round of each (least squares over the R values) and
the number of rounds from which the multi-process run is faster. Results do not depend on the
number of processes (tested in tests/test_scale.py), so only the time differs.

    python benchmarks/processes.py                           # quick-start run, R = 1 5 20 (~3 min)
    python benchmarks/processes.py --rounds 1 2 5 --devices 2
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fedlight.core.host import cpu_cores  # what devices: auto counts
from fedlight.sweep import cpu_seconds

ROOT = Path(__file__).resolve().parents[1]

MAIN_JOB = "configs/gpfl/mnist5k_pathological.yaml"


def run_fit(config: str, rounds: int, devices: int) -> tuple[float, float]:
    """Wall and CPU seconds (the run's processes: this one waits) of one `fit` run."""
    with tempfile.TemporaryDirectory() as root:
        command = [sys.executable, str(ROOT / "cli.py"), "fit", "-c", str(ROOT / config),
                   "--trainer.rounds", str(rounds), "--trainer.default_root_dir", root,
                   "--trainer.progress_bar", "false", "--trainer.verbose", "false",
                   "--trainer.devices", str(devices)]
        if devices > 1:
            command += ["--trainer.strategy", "ddp_fork"]
        started, cpu_started = time.perf_counter(), cpu_seconds()
        subprocess.run(command, check=True, cwd=root, stdout=subprocess.DEVNULL,
                       env={**os.environ, "WANDB_MODE": "offline"})
    return time.perf_counter() - started, cpu_seconds() - cpu_started


def fit_line(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """Least-squares intercept and slope (start-up seconds, seconds per round)."""
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = (sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
             / sum((x - mean_x) ** 2 for x in xs))
    return mean_y - slope * mean_x, slope


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=MAIN_JOB,
                        help="YAML of the job (default: the quick-start run)")
    parser.add_argument("--rounds", type=int, nargs="+", default=[1, 5, 20])
    parser.add_argument("--devices", type=int, default=cpu_cores(),
                        help="processes of the multi-process runs (default: this process's cores)")
    args = parser.parse_args()
    if len(set(args.rounds)) < 2 or min(args.rounds) < 1:
        parser.error(f"--rounds needs at least two different counts >= 1, got {args.rounds}")
    if args.devices < 2:
        parser.error(f"--devices must be at least 2, got {args.devices}")
    print(f"{args.config}, 1 process vs {args.devices} (ddp_fork), {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f} at start")
    print(f"{'rounds':>6}  {'1 proc wall':>11}  {'CPU':>6}  {f'{args.devices} proc wall':>11}  "
          f"{'CPU':>6}  speed-up")
    walls: dict[int, list[float]] = {1: [], args.devices: []}
    for rounds in args.rounds:
        (one, one_cpu), (many, many_cpu) = (run_fit(args.config, rounds, d) for d in walls)
        walls[1].append(one)
        walls[args.devices].append(many)
        print(f"{rounds:>6}  {one:>11.1f}  {one_cpu:>6.1f}  {many:>11.1f}  {many_cpu:>6.1f}  "
              f"{one / many:.2f}x", flush=True)
    (start_one, per_round_one), (start_many, per_round_many) = (
        fit_line(args.rounds, walls[d]) for d in walls)
    print(f"1 process: {start_one:.1f} s start-up + {per_round_one:.2f} s/round; "
          f"{args.devices} processes: {start_many:.1f} s + {per_round_many:.2f} s/round")
    if per_round_many >= per_round_one:
        print("no crossover: the processes' rounds are not faster")
    elif start_many <= start_one:
        print(f"no crossover: {args.devices} processes are faster from the first round (their "
              "fitted start-up is not longer)")
    else:
        crossover = (start_many - start_one) / (per_round_one - per_round_many)
        print(f"crossover: {args.devices} processes are faster from {crossover:.1f} rounds on")


if __name__ == "__main__":
    main()
