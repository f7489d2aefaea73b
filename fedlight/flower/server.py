"""The ServerApp: finds which SuperNode plays which client, runs the FedlightStrategy for
trainer.rounds rounds, and writes the run folder of fedlight fit (config.yaml, partition,
metrics.csv, summary.json, per_client.json, accuracy.png) under trainer.default_root_dir.

The run config (pyproject.toml's [tool.flwr.app.config], or flwr run --run-config) names the
fedlight YAML (config), optional command-line style overrides of it (overrides, e.g.
"--trainer.rounds 5") and, optionally, how long to wait for the SuperNodes (discovery-timeout,
seconds). The server holds no client's data; it builds the data module only for the number of
clients, the partition table and the global test set.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flwr.app import Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp
from torch import Tensor

from fedlight.federation.distributed import Distributed
from fedlight.federation.outputs import RunFolder
from fedlight.federation.run import RunWriter, to_yaml
from fedlight.federation.server import ServerContext, ServerRule
from fedlight.flower.codec import state_to_record
from fedlight.flower.setup import FlowerRun, app_config, load_from
from fedlight.flower.strategy import FedlightStrategy


def discover_clients(grid: Grid, num_clients: int, timeout: float = 600.0) -> dict[int, int]:
    """{fedlight client id: Flower node id}, asking every connected SuperNode which client it
    plays, until all num_clients are found.

    Raises:
        ValueError: two SuperNodes play the same client.
        TimeoutError: some clients have no SuperNode after timeout seconds.
    """
    deadline = time.monotonic() + timeout
    nodes: dict[int, int] = {}
    while True:
        asked = [n for n in grid.get_node_ids() if n not in nodes.values()]
        messages = [Message(RecordDict(), dst_node_id=n, message_type=MessageType.QUERY)
                    for n in asked]
        for reply in grid.send_and_receive(messages, timeout=max(1.0, timeout)):
            if reply.has_error():
                continue
            client_id, node = int(reply.content["client"]["client-id"]), reply.metadata.src_node_id
            if nodes.get(client_id, node) != node:
                raise ValueError(f"SuperNodes {nodes[client_id]} and {node} both play client "
                                 f"{client_id}; give each a different partition-id")
            nodes[client_id] = node
        missing = sorted(set(range(num_clients)) - set(nodes))
        if not missing:
            return nodes
        if time.monotonic() > deadline:
            raise TimeoutError(f"no SuperNode plays client(s) {missing} after {timeout} s")
        time.sleep(1.0)


def run_name(run: FlowerRun) -> str:
    """The run folder's name: trainer.run_name, else fedlight fit's default with -flower."""
    data = run.datamodule
    return run.trainer.run_name or (
        f"{run.method.lower()}-{data.source}-{data.partition}-s{run.trainer.seed}-flower")


def hyperparameters(run: FlowerRun, rule_name: str) -> dict[str, Any]:
    """What the loggers record about the run (as fedlight fit, plus the engine)."""
    trainer = run.trainer
    return {
        "engine": "flower", "method": run.method, "server": rule_name,
        "model": dict(run.model.hparams), "data": dict(run.datamodule.hparams),
        "trainer": {k: getattr(trainer, k) for k in (
            "rounds", "join_ratio", "local_epochs", "batch_size", "eval_every", "seed",
            "weighting", "drop_rate")},
    }


@dataclass
class Outcome:
    """What a served run leaves: its summary (as fedlight fit returns), the final global
    shared state, the server rule and the metrics rows."""

    summary: dict[str, Any]
    global_state: dict[str, Tensor]
    rule: ServerRule
    history: list[dict[str, Any]]


def serve(grid: Grid, run: FlowerRun, discovery_timeout: float = 600.0) -> Outcome:
    """Run the whole federation over grid, writing the run folder."""
    trainer = run.trainer
    rule = run.server_rule()
    rule.setup(run.initial_shared, ServerContext(
        run.datamodule.num_clients, trainer.rounds, trainer.join_ratio, trainer.seed,
        trainer.weighting, run.datamodule.public_inputs()))
    nodes = discover_clients(grid, run.datamodule.num_clients, discovery_timeout)
    rule_name = type(rule).__name__
    writer = RunWriter(Distributed(trainer.fabric), trainer.default_root_dir, run_name(run),
                       trainer.loggers, f"{run.method}-flower", trainer.wandb_project, False,
                       trainer.verbose)
    writer.open(None, lambda folder: _write_header(run, folder), hyperparameters(run, rule_name))
    try:
        strategy = FedlightStrategy(run, rule, nodes, writer)
        strategy.start(grid, state_to_record(rule.global_state), num_rounds=trainer.rounds)
        summary = writer.finish(strategy.history, {
            "method": run.method, "server": rule_name, "engine": "flower",
            "rounds": strategy.history[-1]["round"] if strategy.history else 0,
            "num_clients": run.datamodule.num_clients, **strategy.totals,
            **rule.summary(trainer.rounds)}, strategy.per_client_rows())
    except BaseException:
        writer.close(failed=True)
        raise
    writer.close()
    return Outcome(summary, rule.global_state, rule, strategy.history)


def _write_header(run: FlowerRun, folder: RunFolder) -> None:
    folder.write_text("config.yaml", run.trainer.run_config or to_yaml(
        hyperparameters(run, type(run.server_rule()).__name__)))
    run.datamodule.save_partition(folder.path)
    if run.trainer.verbose:
        print(run.datamodule.stats_table())


def build_server_app(config: str | None = None, overrides: str | list[str] | None = None,
                     discovery_timeout: float | None = None,
                     on_finish: Callable[[Outcome], None] | None = None) -> ServerApp:
    """The ServerApp. config, overrides and discovery_timeout, when given, fix those settings;
    otherwise they are read from Flower's run config (config, overrides, discovery-timeout).
    on_finish, when given, receives the run's Outcome at the end."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        settings = app_config(context.run_config, config=config, overrides=overrides,
                              discovery_timeout=discovery_timeout)
        outcome = serve(grid, load_from(settings),
                        float(settings.get("discovery-timeout", 600.0)))
        if on_finish is not None:
            on_finish(outcome)

    return app


__all__ = ["Outcome", "build_server_app", "discover_clients", "hyperparameters", "run_name",
           "serve"]
