"""The ClientApp and ServerApp that a Flower app's pyproject.toml names:

    [tool.flwr.app.components]
    serverapp = "fedlight.flower.apps:server_app"
    clientapp = "fedlight.flower.apps:client_app"

    [tool.flwr.app.config]
    config = "mnist5k_fedavg.yaml"      # the fedlight YAML, as for fedlight fit
    overrides = ""                      # e.g. "--trainer.rounds 5"
"""

from fedlight.flower.client import build_client_app
from fedlight.flower.server import build_server_app

client_app = build_client_app()
server_app = build_server_app()

__all__ = ["client_app", "server_app"]
