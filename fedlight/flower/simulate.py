"""Running a fedlight config under Flower's simulation engine, from Python or as
fedlight flower CONFIG [overrides].

One virtual SuperNode per fedlight client (partition-id = client id), Flower's Ray backend
running the ClientApps, the ServerApp in this process writing the run folder of fedlight fit.
This is Flower's Python entry point (flwr.simulation.run_simulation); flwr run on a Flower app
(examples/flower/) runs the same apps.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import tempfile
import warnings
from collections.abc import Iterator
from typing import Any

from fedlight.core.errors import ConfigError
from fedlight.flower.client import build_client_app
from fedlight.flower.inline import run_inline
from fedlight.flower.secure import SecureAggregation
from fedlight.flower.server import Outcome, build_server_app
from fedlight.flower.settings import find_config, load_run, parse_overrides

ENGINES = ("ray", "inline")


def simulate(config: str, overrides: str | list[str] | None = None,
             state_dir: str | None = None, num_cpus: int = 1,
             backend_config: dict[str, Any] | None = None, engine: str = "ray",
             secure: SecureAggregation | None = None) -> Outcome:
    """Run config (a fedlight YAML, plus command-line style overrides) under Flower's
    simulation engine; return the Outcome (summary, final global state, rows).

    Args:
        config: the fedlight YAML.
        overrides: e.g. "--trainer.rounds 2 --data.num_clients 4".
        state_dir: where the SuperNodes keep their private states; default a temporary
            folder removed at the end.
        num_cpus: CPUs Ray may use (one ClientApp process per CPU).
        backend_config: Flower's backend config (replaces the one num_cpus makes).
        engine: ray (Flower's simulation engine) or inline (every ClientApp called in this
            process, see fedlight.flower.inline; no Ray needed).
        secure: SecAgg+'s settings for secure aggregation (fedlight.flower.secure); None:
            without.
    """
    if num_cpus < 1:
        raise ConfigError(f"num_cpus must be at least 1, got {num_cpus}")
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r}; valid: {', '.join(ENGINES)}")

    path, arguments = str(find_config(config)), parse_overrides(overrides)
    num_clients = load_run(path, arguments).datamodule.num_clients
    outcomes: list[Outcome] = []
    backend = backend_config or {"init_args": {"num_cpus": num_cpus},
                                 "client_resources": {"num_cpus": 1, "num_gpus": 0.0}}
    with tempfile.TemporaryDirectory(prefix="fedlight-flower-") as scratch:
        server_app = build_server_app(path, list(arguments), on_finish=outcomes.append,
                                      secure=secure)
        client_app = build_client_app(path, list(arguments), state_dir or scratch)
        if engine == "inline":
            run_inline(server_app, client_app, num_clients)
        else:
            from flwr.simulation import run_simulation

            with without_engine_notes():
                run_simulation(server_app=server_app, client_app=client_app,
                               num_supernodes=num_clients, backend_name="ray",
                               backend_config=backend)
    if not outcomes:
        raise RuntimeError("the Flower simulation ended without a result (see its log)")
    return outcomes[0]


#: The start of Flower's note that run_simulation is deprecated in favour of flwr run: this
#: module is the Python entry point that flwr run does not offer (flwr run runs the same
#: apps, see examples/flower/).
RUN_SIMULATION_NOTE = "The `run_simulation` function is deprecated"
#: The start of Ray's FutureWarning on a default it will change (accelerator variables of
#: tasks without GPUs), which concerns Ray's callers, not a fedlight user.
RAY_ACCELERATOR_NOTE = "Tip: In future versions of Ray, Ray will no longer override"


@contextlib.contextmanager
def without_engine_notes() -> Iterator[None]:
    """While Flower's simulation engine runs: without the two notes above, every other log
    line and warning kept."""

    def keep(record: logging.LogRecord) -> bool:
        return RUN_SIMULATION_NOTE not in record.getMessage()

    flower_log = logging.getLogger("flwr")
    flower_log.addFilter(keep)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=RAY_ACCELERATOR_NOTE,
                                    category=FutureWarning, module=r"ray\.")
            yield
    finally:
        flower_log.removeFilter(keep)


def main(argv: list[str]) -> None:
    """fedlight flower CONFIG [--state-dir DIR] [--num-cpus N] [--engine ray|inline]
    [--secure-aggregation [--secagg-shares S] [--secagg-threshold T]] [--trainer.rounds 5 ...]"""
    parser = argparse.ArgumentParser(
        prog="fedlight flower",
        description="Run a fedlight config under Flower's simulation engine (one SuperNode "
                    "per client); other arguments override the config as in fedlight fit.")
    parser.add_argument("config", help="a fedlight YAML config")
    parser.add_argument("--state-dir", default=None,
                        help="folder of the clients' private states (default: temporary)")
    parser.add_argument("--num-cpus", type=int, default=1,
                        help="CPUs for Flower's Ray backend (one ClientApp per CPU)")
    parser.add_argument("--engine", choices=ENGINES, default="ray",
                        help="ray: Flower's simulation engine; inline: every ClientApp in "
                             "this process (quick checks, no Ray)")
    parser.add_argument("--secure-aggregation", action="store_true",
                        help="aggregate the shared updates with Flower's SecAgg+ (the server "
                             "learns only their weighted sum)")
    parser.add_argument("--secagg-shares", default=str(SecureAggregation.shares),
                        help="SecAgg+ shares per client: an integer > 2, or a fraction of the "
                             "round's participants")
    parser.add_argument("--secagg-threshold", default=str(SecureAggregation.threshold),
                        help="shares needed to reconstruct a dropped client's mask: an "
                             "integer, or a fraction of the shares")
    options, overrides = parser.parse_known_args(argv)
    secure = SecureAggregation.from_settings({
        "secure-aggregation": options.secure_aggregation, "secagg-shares": options.secagg_shares,
        "secagg-threshold": options.secagg_threshold})
    outcome = simulate(options.config, overrides, options.state_dir, options.num_cpus,
                       engine=options.engine, secure=secure)
    print(f"run folder: {outcome.summary['run_dir']}")


__all__ = ["ENGINES", "main", "simulate", "without_engine_notes"]
