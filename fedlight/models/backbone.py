"""The ``Backbone`` contract every model in the zoo meets, and input-shape checks they share.

A backbone is a classifier cut in two: ``encoder`` maps an input batch to a feature vector of
size ``feature_dim``, ``head`` maps that feature to ``num_classes`` logits. Every parameter and
buffer lives under ``encoder.`` or ``head.``, so a client can declare what it shares and what it
keeps private by state-dict name patterns (``"model.head.*"`` is FedPer).

A backbone can also be read as an ordered list of blocks, bottom first, for the privatization
strings of "Aggregate or Not?" (``"AaBb"``): the ``"coarse"`` cut is ``[encoder, head]``, and a
backbone may offer a ``"fine"`` cut (VGG11: the six blocks of that paper's Fig. 4; CharLSTM:
embedding, LSTM-1, LSTM-2, head).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from fedlight.core.errors import ConfigError

CUTS = ("coarse", "fine")


class Backbone(nn.Module):
    """A classifier cut as ``encoder`` (input -> ``feature_dim`` vector) and ``head`` (-> logits).

    Args:
        encoder: module mapping a batch of inputs to features of shape ``(B, feature_dim)``.
        feature_dim: size of the encoder's output feature.
        num_classes: number of logits the head produces.
        input_shape: shape of one input sample, e.g. ``(1, 28, 28)``; kept for reference.
        name: the zoo name (``"cnn"``, ...), kept for messages and logs.
        head: the classifier; by default a fresh ``nn.Linear(feature_dim, num_classes)``.
        fine_blocks: state-dict prefixes of the ``"fine"`` cut, bottom first (each names a
            submodule, e.g. ``"encoder.0"``), or ``None`` when the backbone has no fine cut.
        channels_last: the backbone trains faster on a CPU with its images and convolution
            weights in the ``channels_last`` memory format (measured per backbone, see
            ``benchmarks/README.md``); the trainer's ``memory_format: auto`` follows it.
    """

    def __init__(
        self,
        encoder: nn.Module,
        feature_dim: int,
        num_classes: int,
        input_shape: Sequence[int],
        *,
        name: str = "backbone",
        head: nn.Module | None = None,
        fine_blocks: Sequence[str] | None = None,
        channels_last: bool = False,
    ) -> None:
        super().__init__()
        check_num_classes(num_classes)
        self.encoder = encoder
        self.head = head if head is not None else nn.Linear(feature_dim, num_classes)
        self.feature_dim = feature_dim
        self.num_classes = num_classes
        self.input_shape = tuple(input_shape)
        self.name = name
        self._fine_blocks = tuple(fine_blocks) if fine_blocks is not None else None
        self.channels_last = channels_last

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``(B, num_classes)`` for an input batch ``(B, *input_shape)``."""
        return self.head(self.encoder(x))

    def extra_repr(self) -> str:
        return f"name={self.name!r}, feature_dim={self.feature_dim}, num_classes={self.num_classes}"

    @property
    def cuts(self) -> tuple[str, ...]:
        """The block cuts this backbone offers: always ``"coarse"``, plus ``"fine"`` if any."""
        return CUTS if self._fine_blocks is not None else CUTS[:1]

    def block_names(self, cut: str = "coarse") -> list[str]:
        """State-dict prefixes of the blocks of ``cut``, bottom first.

        Every parameter and buffer name starts with exactly one of them followed by a dot.
        ``"coarse"`` gives ``["encoder", "head"]``; ``"fine"`` gives the finer cut where the
        backbone has one (e.g. ``["encoder.0", ..., "encoder.4", "head"]`` for VGG11).

        Raises:
            ValueError: ``cut`` is unknown, or is ``"fine"`` and this backbone has no fine cut.
        """
        if cut == "coarse":
            return ["encoder", "head"]
        if cut == "fine" and self._fine_blocks is not None:
            return list(self._fine_blocks)
        if cut == "fine":
            raise ConfigError(
                f"backbone {self.name!r} has no 'fine' cut; valid cuts for it: {list(self.cuts)}"
            )
        raise ConfigError(f"unknown cut {cut!r}; valid cuts: {list(CUTS)}")

    def blocks(self, cut: str = "coarse") -> list[nn.Module]:
        """The blocks of ``cut`` as modules, bottom first; applying them in order is ``forward``.

        The modules are the backbone's own (not copies): training them trains the backbone.
        """
        return [self.get_submodule(name) for name in self.block_names(cut)]


def feature_size(model: nn.Module, input_shape: Sequence[int], owner: str = "this method") -> int:
    """Size of the feature ``model.encoder`` outputs (and ``model.head`` reads).

    ``model.feature_dim`` where the model has that attribute (every zoo ``Backbone``), else
    the last dimension of one dry forward of ``model.encoder`` on two zero samples of
    ``input_shape``, run without gradients and in eval mode (no BatchNorm statistic moves).

    Raises:
        ConfigError: the model has no ``encoder``, or the dry forward gives no
            ``(batch, feature)`` output (e.g. a token embedding on float zeros); the one line
            names ``owner`` and the model's class and says what to add.
    """
    declared = getattr(model, "feature_dim", None)
    if isinstance(declared, int):
        return declared
    name = type(model).__name__
    encoder = getattr(model, "encoder", None)
    if not isinstance(encoder, nn.Module):
        raise ConfigError(f"{owner} needs backbone {name} cut as submodules `encoder` (input -> "
                          f"feature) and `head` (feature -> logits); {name} has no `encoder`")
    features = _dry_forward(encoder, input_shape)
    if features is None or features.dim() != 2:
        raise ConfigError(f"{owner} needs the feature size of backbone {name}: set "
                          f"{name}.feature_dim (its encoder gives no (batch, feature) output "
                          f"on zeros of shape {tuple(input_shape)})")
    return int(features.shape[1])


def _dry_forward(encoder: nn.Module, input_shape: Sequence[int]) -> Tensor | None:
    """``encoder``'s output on two zero samples of ``input_shape`` (None where it fails),
    every submodule's train / eval mode left as it was."""
    modes = [(module, module.training) for module in encoder.modules()]
    weight = next(encoder.parameters(), None)
    zeros = torch.zeros(2, *input_shape, device=weight.device if weight is not None else None)
    encoder.eval()
    try:
        with torch.no_grad():
            output = encoder(zeros)
    except (RuntimeError, TypeError, ValueError, IndexError):  # the input it cannot take
        return None
    finally:
        for module, training in modes:
            module.training = training
    return output if isinstance(output, Tensor) else None


def check_num_classes(num_classes: int) -> None:
    """Raise a ``ValueError`` unless ``num_classes`` is a positive integer."""
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ConfigError(f"num_classes must be a positive integer, got {num_classes!r}")


def check_shape(name: str, input_shape: Sequence[int]) -> tuple[int, ...]:
    """``input_shape`` as a tuple of positive ints, or a ``ValueError`` naming ``name``."""
    try:
        shape = tuple(operator.index(d) for d in input_shape)
    except TypeError:
        shape = ()
    if not shape or min(shape) < 1:
        raise ConfigError(
            f"backbone {name!r} got input shape {input_shape!r}; it must be a non-empty "
            "sequence of positive integers, e.g. (1, 28, 28) or (64,)"
        )
    return shape


def image_shape(name: str, input_shape: Sequence[int]) -> tuple[int, int, int]:
    """``input_shape`` as ``(C, H, W)``, or a ``ValueError`` if it is not an image shape."""
    shape = check_shape(name, input_shape)
    if len(shape) != 3:
        raise ConfigError(
            f"backbone {name!r} takes images of shape (C, H, W), got input shape {shape}; "
            "use 'mlp' for vector inputs"
        )
    channels, height, width = shape
    return channels, height, width
