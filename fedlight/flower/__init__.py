"""fedlight on Flower: the same client modules, trained on SuperNodes, aggregated by the same
server rules on a SuperLink.

From a fedlight config (the YAML of fedlight fit), build_client_app and build_server_app give
a Flower ClientApp and ServerApp (Flower's Message API). The ServerApp runs fedlight's own
round protocol (FederatedTrainer.federate with the FlowerEngine): the same sampling, dropout,
server rule, evaluation, rows, run folder and checkpoints as fedlight fit. The ClientApp plays
one fedlight client per SuperNode (its partition-id): it trains the task it is sent exactly as
the simulator trains a client, keeps the private partition on the node's disk and replies with
what upload() returns, its training statistics and, on evaluated rounds, its scores. This
package holds only that transport: the apps, the engine that moves tasks and results over a
Flower Grid, the codec, secure aggregation of the updates with Flower's SecAgg+ (secure) and
the certificates and keys of a deployment with TLS and SuperNode authentication
(certificates). simulate runs both apps under Flower's simulation engine; fedlight flower
CONFIG does it from the command line.

Needs the flower extra: pip install "fedlight[flower]".
"""

try:
    import flwr  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the install
    raise ImportError('fedlight.flower needs Flower: pip install "fedlight[flower]"') from error

from fedlight.flower.client import ClientNode, build_client_app
from fedlight.flower.engine import FlowerEngine
from fedlight.flower.secure import SecureAggregation
from fedlight.flower.server import Outcome, build_server_app, serve
from fedlight.flower.settings import load_run
from fedlight.flower.simulate import simulate

__all__ = ["ClientNode", "FlowerEngine", "Outcome", "SecureAggregation", "build_client_app",
           "build_server_app", "load_run", "serve", "simulate"]
