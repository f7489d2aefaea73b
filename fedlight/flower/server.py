"""The ServerApp: the fedlight run of the config, with its clients on the SuperNodes.

It reads the config as fedlight fit does and runs FederatedTrainer.federate with the Flower
engine, so the rounds, the metrics rows, the run folder under trainer.default_root_dir and its
checkpoints are those of fedlight fit (the folder is named like fit's with -flower appended).
Resume a stopped run by adding --ckpt_path last to the overrides.

The run config (pyproject.toml's [tool.flwr.app.config], or flwr run --run-config) names the
fedlight YAML (config), optional command-line style overrides of it (overrides, e.g.
"--trainer.rounds 5 --ckpt_path last") and, optionally, how long to wait for the SuperNodes
(discovery-timeout, seconds) and for a round's replies (round-timeout, seconds). The server
holds no client's data; it builds the data module only for the number of clients, the
partition table and the global test set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from torch import Tensor

from fedlight.config import InstantiatedConfig
from fedlight.core.errors import ConfigError
from fedlight.core.rules import ServerRule
from fedlight.federation.build import resolve_rule
from fedlight.federation.callbacks import RoundCallback
from fedlight.flower.engine import FlowerEngine
from fedlight.flower.secure import SecureAggregation, refusal
from fedlight.flower.settings import app_settings, load_from


@dataclass
class Outcome:
    """What a served run leaves: its summary (as fedlight fit returns), the final global
    shared state, the server rule and the metrics rows."""

    summary: dict[str, Any]
    global_state: dict[str, Tensor]
    rule: ServerRule
    history: list[dict[str, Any]]


#: The run folder's record of the updates the server refused (see RefusalLog).
REFUSED_FILE = "refused.json"


class RefusalLog(RoundCallback):
    """Keeps the run folder's refused.json: every refused update of the run (round, client,
    cause; see fedlight.federation.protocol), written after each round that refused one and
    carried across a resume in the checkpoints."""

    def __init__(self) -> None:
        self.earlier: list[dict[str, Any]] = []  # refusals before a resume
        self.current: list[dict[str, Any]] = []  # the round protocol's, since the run started

    def on_fit_start(self, trainer: Any, client: Any) -> None:
        self.current = trainer.run.protocol.refusals

    def on_round_end(self, trainer: Any, client: Any, round_idx: int,
                     metrics: Mapping[str, Any]) -> None:
        if metrics.get("refused"):
            trainer.run.writer.opened.write_json(REFUSED_FILE, self.state_dict()["refusals"])

    def state_dict(self) -> dict[str, Any]:
        return {"refusals": [*self.earlier, *self.current]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.earlier = list(state.get("refusals", []))


def serve(grid: Grid, run: InstantiatedConfig, discovery_timeout: float = 600.0,
          round_timeout: float | None = None, secure: SecureAggregation | None = None) -> Outcome:
    """Run the federation of run over grid, writing the run folder (with refused.json where
    an update was refused); secure: SecAgg+'s settings (None: no secure aggregation).

    Raises:
        ConfigError: secure aggregation with a rule that needs individual updates.
    """
    trainer, data = run.trainer, run.datamodule
    max_weight = 1.0
    if secure is not None:
        method = type(run.model).__name__
        why = refusal(resolve_rule(run.model.configure_server(), run.server, method), method)
        if why:
            raise ConfigError(why)
        if trainer.weighting == "samples":
            max_weight = float(max(data.client_train_size(i) for i in range(data.num_clients)))
    trainer.callbacks = [*trainer.callbacks, RefusalLog()]
    engine = FlowerEngine(grid, data.num_clients, discovery_timeout, round_timeout, secure,
                          max_weight)
    summary = trainer.federate(run.model, run.datamodule, engine, run.ckpt_path, run.server)
    return Outcome(summary, trainer.global_state, trainer.server, trainer.history)


def build_server_app(config: str | None = None, overrides: str | list[str] | None = None,
                     discovery_timeout: float | None = None,
                     on_finish: Callable[[Outcome], None] | None = None,
                     secure: SecureAggregation | None = None) -> ServerApp:
    """The ServerApp. config, overrides, discovery_timeout and secure, when given, fix those
    settings; otherwise they are read from Flower's run config (config, overrides,
    discovery-timeout, round-timeout, secure-aggregation with secagg-shares, secagg-threshold
    and secagg-clipping-range: see fedlight.flower.secure). on_finish, when given, receives
    the run's Outcome at the end."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        settings = app_settings(context.run_config, config=config, overrides=overrides,
                                discovery_timeout=discovery_timeout)
        round_timeout = settings.get("round-timeout")
        outcome = serve(grid, load_from(settings),
                        float(settings.get("discovery-timeout", 600.0)),
                        None if round_timeout in (None, "", 0) else float(round_timeout),
                        secure or SecureAggregation.from_settings(settings))
        if on_finish is not None:
            on_finish(outcome)

    return app


__all__ = ["REFUSED_FILE", "Outcome", "RefusalLog", "build_server_app", "serve"]
