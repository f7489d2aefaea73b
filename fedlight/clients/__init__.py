"""Client modules, one file per method; every class here is a ``LightningModule``.

Every module of this package is imported and each ``FederatedClient`` subclass it defines is
exported here, so a new method is one new file: no registry to edit. Short names in configs
(``class_path: GPFL``) resolve against these classes.
"""

import importlib
import pkgutil

from fedlight.clients.base import FederatedClient
from fedlight.core.client import ClientContext, Phase, Upload


def _discover() -> dict[str, type[FederatedClient]]:
    found: dict[str, type[FederatedClient]] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name, obj in vars(module).items():
            if (isinstance(obj, type) and issubclass(obj, FederatedClient)
                    and obj.__module__ == module.__name__):
                found[name] = obj
    return found


CLIENTS: dict[str, type[FederatedClient]] = _discover()
globals().update(CLIENTS)

__all__ = ["CLIENTS", "ClientContext", "FederatedClient", "Phase", "Upload", *CLIENTS]
