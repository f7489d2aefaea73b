"""fedlight on Flower: the same client modules, trained on SuperNodes, aggregated by the same
server rules on a SuperLink.

From a fedlight config (the YAML of fedlight fit), build_client_app and build_server_app give
a Flower ClientApp and ServerApp (Flower's Message API). The ClientApp plays one fedlight
client per SuperNode (its partition-id): it runs the method's local phases with fedlight's
LocalLoop, keeps the private partition on the node's disk and sends exactly what upload()
returns. The ServerApp runs the method's server rule as a Flower Strategy (FedlightStrategy)
and writes the run folder of fedlight fit. simulate runs both under Flower's simulation
engine; fedlight flower CONFIG does it from the command line.

Needs the flower extra: pip install "fedlight[flower]".
"""

try:
    import flwr  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the install
    raise ImportError('fedlight.flower needs Flower: pip install "fedlight[flower]"') from error

from fedlight.flower.client import ClientNode, build_client_app
from fedlight.flower.server import build_server_app, serve
from fedlight.flower.setup import FlowerRun, load_run
from fedlight.flower.simulate import simulate
from fedlight.flower.strategy import FedlightStrategy

__all__ = ["ClientNode", "FedlightStrategy", "FlowerRun", "build_client_app",
           "build_server_app", "load_run", "serve", "simulate"]
