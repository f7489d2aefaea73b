"""The ``fedlight`` command line (:mod:`~fedlight.cli.commands`): ``fedlight fit / validate /
test`` (``FedlightCLI``, a LightningCLI whose trainer is the ``FederatedTrainer``), the tools'
subcommands (``TOOLS``) and the entry point ``main``. The parser and the one-line messages it
shares with every config reader are :mod:`fedlight.parsing`'s.
"""

from fedlight.cli.commands import COMMANDS, TOOLS, FedlightCLI, main

__all__ = ["COMMANDS", "TOOLS", "FedlightCLI", "main"]
