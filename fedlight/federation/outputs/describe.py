"""How a run is described: the hyper-parameters logged with it (written as config.yaml for a
run started from Python, checked on resume), its server rule's options among them."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from fedlight.clients.base import FederatedClient
from fedlight.core.messages import SIMULATOR
from fedlight.core.rules import ServerRule
from fedlight.data.datamodule import FederatedDataModule


def describe_run(client: FederatedClient, datamodule: FederatedDataModule, server: ServerRule,
                 trainer: Mapping[str, Any], engine: str = SIMULATOR) -> dict[str, Any]:
    """The hyper-parameters logged with a run (and written as config.yaml from Python), with
    the engine named for runs whose clients are not simulated."""
    server_options = rule_options(server)
    vocabulary = datamodule.vocabulary_record()
    described = {"method": type(client).__name__, "server": type(server).__name__,
                 "server_options": server_options, "model": dict(client.hparams),
                 "data": dict(datamodule.hparams), "trainer": dict(trainer),
                 **({"vocabulary": vocabulary} if vocabulary else {})}
    return described if engine == SIMULATOR else {"engine": engine, **described}


def rule_options(rule: Any) -> dict[str, Any]:
    """A server rule's constructor arguments, as far as the rule (or one of its parts, such as
    a DP mechanism) keeps them under their own name; a wrapped rule is described in turn."""
    parts = [rule, *(v for v in vars(rule).values()
                     if hasattr(v, "__dict__") and not isinstance(v, ServerRule))]
    options: dict[str, Any] = {}
    for name in list(inspect.signature(type(rule).__init__).parameters)[1:]:
        for part in parts:
            value = vars(part).get(name)
            if isinstance(value, ServerRule):
                options[name] = {"class": type(value).__name__, **rule_options(value)}
            elif isinstance(value, (bool, int, float, str)):
                options[name] = value
            else:
                continue
            break
    return options


__all__ = ["describe_run", "rule_options"]
