"""Data sources, one file per source: each a `Source` subclass, a config's ``data.source``
(``class_path: CIFAR10``, its options under ``init_args``).

Every module of this package is imported here, so a new source is one new file: defining the
class registers it in ``SOURCES`` (by its ``name``) and lets a config name it by its class
name. The shared parts live beside them: ``base`` (the `Source` class and `SourceData`),
``image_source`` (resize and domain transforms), ``images`` (decoding files), ``cache``
(decoded files on disk), ``files`` (roots, downloads, format errors).
"""

import importlib
import pkgutil

from fedlight.data.sources.base import SOURCES, Source, SourceData, as_source
from fedlight.data.sources.image_source import ImageSource

for _module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["SOURCES", "ImageSource", "Source", "SourceData", "as_source"]
