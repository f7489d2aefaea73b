"""LightningCLI without two private steps of its ``__init__`` (lightning)."""

from __future__ import annotations

from lightning.pytorch.cli import LightningCLI

#: The private LightningCLI steps that ``LightningCLI.__init__`` calls and fedlight disables
#: (checked by tests/test_compat.py).
DISABLED_CLI_STEPS = ("_parse_ckpt_path", "_set_seed")


class LightningCLISteps(LightningCLI):
    """LightningCLI without two steps of its ``__init__`` that have no public switch:

    - ``_parse_ckpt_path`` reads model hyper-parameters from a Lightning checkpoint given as
      ``--ckpt_path``; a fedlight checkpoint holds a federated run's state instead (and
      ``--ckpt_path last`` names a run, not a file).
    - ``_set_seed`` seeds from ``--seed_everything``, which fedlight does not have (the run's
      one seed is ``trainer.seed``, applied in the public ``before_instantiate_classes``).
    """

    def _parse_ckpt_path(self) -> None:
        """Disabled (see the class docstring)."""

    def _set_seed(self) -> None:
        """Disabled (see the class docstring)."""


__all__ = ["DISABLED_CLI_STEPS", "LightningCLISteps"]
