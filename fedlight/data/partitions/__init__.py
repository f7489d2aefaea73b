"""Partitions, one file per scheme: each a `Partition` subclass, a config's ``data.partition``
(``class_path: Dirichlet``, its options under ``init_args``).

Every module of this package is imported here, so a new scheme is one new file: defining the
class registers it in ``PARTITIONS`` (by its ``name``) and lets a config name it by its class
name. ``base`` holds the `Partition` class and the helpers the schemes share.
"""

import importlib
import pkgutil

from fedlight.data.partitions.base import PARTITIONS, Partition, as_partition, split_client

for _module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["PARTITIONS", "Partition", "as_partition", "split_client"]
