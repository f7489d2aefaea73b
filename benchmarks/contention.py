"""Round time of the quick-start run with and without one competing busy process.

Workload: configs/gpfl/mnist5k_dirichlet.yaml's shape with FedAvg or --method (mnist5k, 20 clients,
Dirichlet(0.1), 75/25 split, batch 10, 1 local epoch, the 4-layer CNN, evaluation every round).
Each configuration runs in a fresh process (torch's thread settings are per process): the
trainer's default threads (auto: 1 per CPU process) and threads=2 (torch's default on a
2-core machine, fedlight's default before auto), with each --devices value (a process count,
or auto: one process per core), each once on the machine as it is ("quiet":
no competitor started here) and once with one competing busy process (a pure-Python loop, or a
1-thread torch matmul loop with --competitor torch) running alongside.

Printed per configuration: median wall seconds per round (evaluation included; the first round
is warm-up and dropped), the ratio to the same configuration's quiet run and to the quiet
default, the rounds it finished, and the process's wall and CPU time. A run past --timeout is
stopped; its finished rounds still count (with fewer than two, its whole wall time is shown as
"> seconds"). CPU seconds per round show the threads waiting for each other: they grow with
2 threads under load while the work is the same. Figures are noisy on a shared machine.

    nice -n 5 python benchmarks/contention.py              # ~2-3 minutes on 2 cores
    nice -n 5 python benchmarks/contention.py --rounds 3 --competitor torch
    nice -n 5 python benchmarks/contention.py --threads auto --devices 1 auto --rounds 8
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from fedlight.data.partitions.dirichlet import Dirichlet
from fedlight.data.sources.mnist5k import MNIST5k

ROOT = Path(__file__).resolve().parents[1]

#: Busy loops that stop when the benchmark that started them is gone.
COMPETITORS = {
    "python": "import os\nparent = os.getppid()\nwhile os.getppid() == parent: pass",
    "torch": ("import os, torch\ntorch.set_num_threads(1)\nx = torch.randn(512, 512)\n"
              "parent = os.getppid()\nwhile os.getppid() == parent: x @ x"),
}


def _round_clock() -> Any:
    from fedlight.federation.probes import Probe

    class RoundClock(Probe):
        """Prints the wall and CPU seconds of each evaluated round (training, aggregation,
        evaluation) as it ends, so that a run stopped by the timeout still reports its rounds."""

        def setup(self, trainer: Any) -> None:
            self.last = (time.perf_counter(), time.process_time())

        def on_round_end(self, trainer: Any, round_idx: int) -> dict[str, float]:
            now = (time.perf_counter(), time.process_time())
            if trainer.fabric.global_rank == 0:  # rank 0's clock: the ranks meet every round
                print(json.dumps([now[0] - self.last[0], now[1] - self.last[1]]), flush=True)
            self.last = now
            return {}

    return RoundClock()


def parse_threads(text: str) -> int | str | None:
    """The trainer.threads value written as ``text`` (auto, None or a count)."""
    return None if text == "None" else text if text == "auto" else int(text)


def worker(threads: str, rounds: int, method: str, devices: str = "1") -> None:
    """One run of the workload in this process, printing each round's wall and CPU seconds."""
    import warnings

    from fedlight.clients import CLIENTS
    from fedlight.data import FederatedDataModule
    from fedlight.federation.trainer import FederatedTrainer

    warnings.filterwarnings("ignore")
    data = FederatedDataModule(source=MNIST5k(), partition=Dirichlet(beta=0.1), num_clients=20,
                               train_fraction=0.75,
                               merge_test=True)
    data.setup()
    torch.manual_seed(0)
    client = CLIENTS[method](backbone="cnn", num_classes=data.num_classes,
                             input_shape=data.input_shape, lr=0.005)
    with tempfile.TemporaryDirectory() as root:
        trainer = FederatedTrainer(rounds=rounds, batch_size=10, eval_every=1, accelerator="cpu",
                                   default_root_dir=root, progress_bar=False, verbose=False,
                                   checkpoint_every=10**6, probes=[_round_clock()],
                                   threads=parse_threads(threads),
                                   devices=devices if devices == "auto" else int(devices))
        trainer.fit(client, data)


def run_config(threads: str, rounds: int, timeout: float, method: str,
               devices: str = "1") -> dict[str, Any]:
    """Run :func:`worker` in a fresh process: the wall and CPU seconds of the rounds it
    finished within ``timeout``, its whole wall and CPU time, and whether it was stopped."""
    before = os.times()
    started = time.perf_counter()
    command = [sys.executable, __file__, "--worker", "--threads", threads, "--rounds", str(rounds),
               "--method", method, "--devices", devices]
    try:
        output = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                cwd=ROOT, check=True).stdout
        stopped = False
    except subprocess.TimeoutExpired as error:
        output = error.stdout.decode() if isinstance(error.stdout, bytes) else error.stdout or ""
        stopped = True
    after = os.times()
    finished = [json.loads(line) for line in output.splitlines() if line.startswith("[")]
    return {"rounds": finished, "stopped": stopped, "wall": time.perf_counter() - started,
            "cpu": (after.children_user - before.children_user
                    + after.children_system - before.children_system)}


def per_round(result: dict[str, Any]) -> tuple[float, float, str]:
    """(wall, CPU) seconds per round: the median over the finished rounds after the first;
    a run stopped before two rounds counts its whole wall time as one round (shown as "> ")."""
    timed = result["rounds"][1:] or result["rounds"]
    if not result["stopped"] or len(result["rounds"]) >= 2:
        wall = statistics.median(r[0] for r in timed)
        cpu = statistics.median(r[1] for r in timed)
        return wall, cpu, f"{wall:8.2f}"
    return result["wall"], math.nan, f"> {result['wall']:6.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", nargs="+", default=["auto", "2"],
                        help="trainer.threads values to compare (auto, None or a count)")
    parser.add_argument("--competitor", choices=sorted(COMPETITORS), default="python")
    parser.add_argument("--timeout", type=float, default=90.0,
                        help="seconds after which one run is stopped")
    parser.add_argument("--method", default="FedAvg", help="client class (GPFL: its own losses)")
    parser.add_argument("--devices", nargs="+", default=["1"],
                        help="trainer.devices values to compare (a count or auto: one process "
                             "per core)")
    parser.add_argument("--loads", nargs="+", choices=["quiet", "busy"], default=["quiet", "busy"])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.threads[0], args.rounds, args.method, args.devices[0])
        return
    print(f"{args.method}, mnist5k 20 clients Dirichlet(0.1), batch 10, eval every round; "
          f"{args.rounds} rounds (first dropped); competitor: {args.competitor} busy loop; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start")
    print(f"{'threads/devices':>15} {'load':>6} {'s/round':>9} {'CPU s/round':>12} "
          f"{'vs quiet':>9} {'vs quiet default':>17} {'rounds':>7} {'wall s':>7} {'CPU s':>7}")
    configs = [(threads, devices) for threads in args.threads for devices in args.devices]
    quiet: dict[tuple[str, str], float] = {}
    for load in args.loads:
        competitor = (subprocess.Popen([sys.executable, "-c", COMPETITORS[args.competitor]])
                      if load == "busy" else None)
        try:
            for threads, devices in configs:
                result = run_config(threads, args.rounds, args.timeout, args.method, devices)
                wall, cpu, shown = per_round(result)
                quiet.setdefault((threads, devices), wall)
                print(f"{threads + '/' + devices:>15} {load:>6} {shown:>9} {cpu:12.2f} "
                      f"{wall / quiet[threads, devices]:9.2f} {wall / quiet[configs[0]]:17.2f} "
                      f"{len(result['rounds']):7d} {result['wall']:7.1f} {result['cpu']:7.1f}",
                      flush=True)
        finally:
            if competitor is not None:
                competitor.kill()
                competitor.wait()

if __name__ == "__main__":
    main()
