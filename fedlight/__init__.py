"""fedlight: personalized federated learning on PyTorch Lightning and Fabric.

The classes a user starts from, importable from here: every method (``GPFL``, ``FedPick``,
``MAP``, ``Privatize``, ``FedAvg``, ...; all in :mod:`fedlight.clients`), their base class
``FederatedClient``, the data (``FederatedDataModule``) and the orchestrator
(``FederatedTrainer``)::

    from fedlight import GPFL, FederatedDataModule, FederatedTrainer

Importing ``fedlight`` imports torch and Lightning (the classes are ``LightningModule`` s):
several seconds, most of it theirs.
"""

import gc

# Importing torch, Lightning and torchmetrics creates a few million objects that live as long
# as the process; the collections during the imports walk them to free nothing (0.5 s of the
# ~4 s of CPU of `import fedlight` on a 2-core machine). The collector pauses for the imports,
# then what they made goes to the oldest generation, where collections with the collector on
# would have moved it, without walking it there (else the first collection after the imports
# does: 0.2 s of `fedlight fit --help`). See also fedlight.console.
_collecting = gc.isenabled()
gc.disable()
try:
    from fedlight.clients import (
        APFL,
        FLDA,
        GPFL,
        MAP,
        MOON,
        SCAFFOLD,
        AutoCS,
        AutoHS,
        AutoSA,
        Ditto,
        DittoRS,
        FedAvg,
        FedAwS,
        FedBABU,
        FedBN,
        FedDF,
        FedDyn,
        FederatedClient,
        FedMMD,
        FedNova,
        FedPer,
        FedPHP,
        FedPick,
        FedProto,
        FedProx,
        FedRep,
        FedRoD,
        FedRS,
        LGFedAvg,
        Local,
        PerFedAvg,
        PFedMe,
        Privatize,
        ScaRS,
    )
    from fedlight.data import FederatedDataModule
    from fedlight.federation.trainer import FederatedTrainer
    from fedlight.version import __version__
finally:
    gc.freeze()
    gc.unfreeze()
    if _collecting:
        gc.enable()
    del _collecting

__all__ = [
    "APFL", "FLDA", "GPFL", "MAP", "MOON", "SCAFFOLD", "AutoCS", "AutoHS", "AutoSA", "Ditto",
    "DittoRS", "FedAvg", "FedAwS", "FedBABU", "FedBN", "FedDF", "FedDyn", "FedMMD", "FedNova",
    "FedPHP", "FedPer", "FedPick", "FedProto", "FedProx", "FedRS", "FedRep", "FedRoD",
    "FederatedClient", "FederatedDataModule", "FederatedTrainer", "LGFedAvg", "Local",
    "PFedMe", "PerFedAvg", "Privatize", "ScaRS", "__version__",
]
