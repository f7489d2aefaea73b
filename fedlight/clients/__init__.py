"""Client modules, one file per method; every class here is a ``LightningModule``.

Each method class is imported here by name (so IDEs and type checkers see it) and listed in
``__all__``. ``CLIENTS`` maps every ``FederatedClient`` subclass defined in a module of this
package to its class, found by importing each module: a new method file joins ``CLIENTS`` and
the configs' short names (``class_path: GPFL``) by itself, and ``tests/test_public_api.py``
fails until the file's class is imported and listed here too.
"""

import importlib
import pkgutil

from fedlight.clients.apfl import APFL
from fedlight.clients.auto_privatize import AutoCS, AutoHS, AutoSA
from fedlight.clients.base import FederatedClient
from fedlight.clients.ditto import Ditto
from fedlight.clients.dittors import DittoRS
from fedlight.clients.fedavg import FedAvg
from fedlight.clients.fedaws import FedAwS
from fedlight.clients.fedbabu import FedBABU
from fedlight.clients.fedbn import FedBN
from fedlight.clients.feddf import FedDF
from fedlight.clients.feddyn import FedDyn
from fedlight.clients.fedmmd import FedMMD
from fedlight.clients.fednova import FedNova
from fedlight.clients.fedper import FedPer
from fedlight.clients.fedphp import FedPHP
from fedlight.clients.fedpick import FedPick
from fedlight.clients.fedproto import FedProto
from fedlight.clients.fedprox import FedProx
from fedlight.clients.fedrep import FedRep
from fedlight.clients.fedrod import FedRoD
from fedlight.clients.fedrs import FedRS
from fedlight.clients.flda import FLDA
from fedlight.clients.gpfl import GPFL
from fedlight.clients.lgfedavg import LGFedAvg
from fedlight.clients.local import Local
from fedlight.clients.map import MAP
from fedlight.clients.moon import MOON
from fedlight.clients.perfedavg import PerFedAvg
from fedlight.clients.pfedme import PFedMe
from fedlight.clients.privatize import Privatize
from fedlight.clients.scaffold import SCAFFOLD
from fedlight.clients.scars import ScaRS
from fedlight.core.client import ClientContext, Phase, Upload


def discover_clients() -> dict[str, type[FederatedClient]]:
    """Every ``FederatedClient`` subclass defined in a module of this package, by class name
    (each module imported, in name order)."""
    found: dict[str, type[FederatedClient]] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name, obj in vars(module).items():
            if (isinstance(obj, type) and issubclass(obj, FederatedClient)
                    and obj is not FederatedClient and obj.__module__ == module.__name__):
                found[name] = obj
    return found


CLIENTS: dict[str, type[FederatedClient]] = discover_clients()

__all__ = [
    "APFL", "CLIENTS", "FLDA", "GPFL", "MAP", "MOON", "SCAFFOLD", "AutoCS", "AutoHS", "AutoSA",
    "ClientContext", "Ditto", "DittoRS", "FedAvg", "FedAwS", "FedBABU", "FedBN", "FedDF",
    "FedDyn", "FedMMD", "FedNova", "FedPHP", "FedPer", "FedPick", "FedProto", "FedProx",
    "FedRS", "FedRep", "FedRoD", "FederatedClient", "LGFedAvg", "Local", "PFedMe", "PerFedAvg",
    "Phase", "Privatize", "ScaRS", "Upload", "discover_clients",
]
