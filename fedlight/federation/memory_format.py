"""The memory format of a run's images and convolution weights (``trainer.memory_format``).

oneDNN, PyTorch's CPU convolution library, runs many small convolution stacks faster on
``channels_last`` (NHWC) tensors: the backbones that do say so (``Backbone.channels_last``),
and ``auto`` uses that format on a CPU where every backbone of the client asks for it. On a
GPU ``auto`` keeps the default format (channels_last pays there mostly under mixed precision
on tensor cores, which the papers' small models at batch 10 do not use). The format changes
the order of floating-point sums, not what is computed: results agree with the default format
to float tolerance, and a run is deterministic in either.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from fedlight.core.errors import ConfigError
from fedlight.models.backbone import Backbone

MEMORY_FORMATS = ("auto", "channels_last", "contiguous")


def check_memory_format(value: str) -> str:
    """Return ``value`` when it is one of :data:`MEMORY_FORMATS`, else raise ConfigError."""
    if value not in MEMORY_FORMATS:
        raise ConfigError(f"trainer.memory_format: unknown memory_format {value!r}; valid: "
                          f"{', '.join(MEMORY_FORMATS)}")
    return value


def resolve_memory_format(option: str, model: nn.Module,
                          device: torch.device) -> torch.memory_format:
    """The torch memory format ``option`` means for ``model`` on ``device`` (see module doc)."""
    if check_memory_format(option) == "channels_last":
        return torch.channels_last
    if option == "contiguous" or device.type != "cpu":
        return torch.contiguous_format
    backbones = [m for m in model.modules() if isinstance(m, Backbone)]
    wanted = bool(backbones) and all(b.channels_last for b in backbones)
    return torch.channels_last if wanted else torch.contiguous_format


def in_memory_format(x: Tensor, memory_format: torch.memory_format) -> Tensor:
    """``x`` in ``memory_format`` when it is a batch of images (4-D), else ``x`` itself."""
    return x.contiguous(memory_format=memory_format) if x.dim() == 4 else x


def on_device(batch: tuple[Tensor, Tensor], device: torch.device,
              memory_format: torch.memory_format) -> tuple[Tensor, Tensor]:
    """An ``(inputs, targets)`` pair moved to ``device``, the inputs in ``memory_format``."""
    return in_memory_format(batch[0].to(device), memory_format), batch[1].to(device)


def apply_memory_format(model: nn.Module, option: str,
                        device: torch.device) -> torch.memory_format:
    """Put ``model``'s 4-D weights in the format ``option`` resolves to, and return it (the
    format the run's image batches must have too)."""
    memory_format = resolve_memory_format(option, model, device)
    model.to(memory_format=memory_format)
    return memory_format


__all__ = ["MEMORY_FORMATS", "apply_memory_format", "check_memory_format",
           "in_memory_format", "on_device", "resolve_memory_format"]
