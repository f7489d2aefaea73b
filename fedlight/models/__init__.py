"""The backbone zoo: classifiers cut as ``encoder`` + ``head`` (see ``Backbone``).

``build_backbone("cnn", (1, 28, 28), 10)`` builds one by name. Each backbone registers its
name where it is defined (``@register_backbone``, see :mod:`fedlight.models.zoo`); importing
this package imports every module in it, so ``BACKBONES`` holds them all and a new backbone is
one new file here (its state-dict names must start with ``encoder.`` or ``head.``).
"""

from __future__ import annotations

import importlib
import pkgutil

from fedlight.models.backbone import CUTS, Backbone, feature_size
from fedlight.models.zoo import BACKBONES, build_backbone, register_backbone


def _import_every_module() -> None:
    """Import each module of the package, so each backbone registers its name."""
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")


_import_every_module()

__all__ = ["BACKBONES", "CUTS", "Backbone", "build_backbone", "feature_size", "register_backbone"]
