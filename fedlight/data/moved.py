"""The data section's options of the flat form, before sources and partitions became
class_path objects: each old key read as the one line that names its new form."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fedlight.core.errors import ConfigError
from fedlight.data.partitions import PARTITIONS
from fedlight.data.sources import SOURCES

__all__ = ["MOVED", "check_data_section", "moved_message"]

#: old key -> (the new option's path, the class_path it belongs to or None, its new name)
MOVED: dict[str, tuple[str, str | None, str]] = {
    "root": ("source", None, "root"),
    "download": ("source", None, "download"),
    "image_size": ("source", None, "image_size"),
    "first_per_class": ("source", "ImageFolder", "first_per_class"),
    "domain_transforms": ("source", None, "domain_transforms"),
    "synthetic_samples": ("source", "Synthetic", "samples"),
    "synthetic_shape": ("source", "Synthetic", "shape"),
    "synthetic_classes": ("source", "Synthetic", "classes"),
    "partition_file": ("partition", "FromFile", "path"),
    "beta": ("partition", "Dirichlet", "beta"),
    "min_client_size": ("partition", "Dirichlet", "min_client_size"),
    "size_sigma": ("partition", "Incomplete", "size_sigma"),
    "classes_per_client": ("partition", "Pathological", "classes_per_client"),
    "balanced": ("partition", "Pathological", "balanced"),
    "shards_per_client": ("partition", "Shards", "shards_per_client"),
    "max_client_samples": ("caps", None, "client_samples"),
    "max_train_samples": ("caps", None, "train_samples"),
    "surplus_train": ("caps", None, "surplus_train"),
}

_UNSET = object()


def _shown(value: Any) -> str:
    return "..." if value is _UNSET else json.dumps(value)


def moved_message(key: str, value: Any = _UNSET) -> str | None:
    """``data.beta moved: use data.partition: {class_path: Dirichlet, init_args: {beta:
    0.1}}`` for an old flat key of the data section (``beta``, ``data.beta`` or
    ``data.init_args.beta``) with its value where known; a source or partition name of the
    flat form (``source: cifar10``) gives its class; None for anything else."""
    name = key.split(".")[-1]
    if name in ("source", "partition"):
        if not isinstance(value, str):
            return None
        classes = SOURCES if name == "source" else PARTITIONS
        cls = classes.get(value)
        if cls is None:  # not a name of the flat form: jsonargparse's unknown class
            return None
        return (f"data.{name}: {value} moved: use data.{name}: {{class_path: {cls.__name__}}} "
                f"(valid: {', '.join(sorted(c.__name__ for c in classes.values()))})")
    if name not in MOVED:
        return None
    section, class_path, new = MOVED[name]
    if section == "caps":
        return f"data.{name} moved: use data.caps: {{{new}: {_shown(value)}}}"
    cls = class_path or "<Source>"
    return (f"data.{name} moved: use data.{section}: {{class_path: {cls}, init_args: "
            f"{{{new}: {_shown(value)}}}}}")


def check_data_section(data: Mapping[str, Any]) -> None:
    """Refuse a data section of the flat form (a YAML's ``data:`` mapping) with the one line
    naming the first old key's new form."""
    for key, value in data.items():
        message = moved_message(str(key), value)
        if message is not None:
            raise ConfigError(message)
