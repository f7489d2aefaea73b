"""What the backbones on token sequences share (``fasttext``, ``char_lstm``): the input
checks and the padding id.

Input: int64 token ids ``(N, L)`` with 0 = padding, ``input_shape == (L,)``; ``vocab_size`` is
the number of ids, padding included (``len(vocab)`` of the source), which the data module
passes to the backbone for token sources.
"""

from __future__ import annotations

from collections.abc import Sequence

from fedlight.core.errors import ConfigError
from fedlight.models.backbone import check_shape

PADDING_ID = 0


def sequence_length(name: str, input_shape: Sequence[int]) -> int:
    """``L`` of ``input_shape == (L,)``, or a ``ValueError`` if it is not a sequence shape."""
    shape = check_shape(name, input_shape)
    if len(shape) != 1:
        raise ConfigError(
            f"backbone {name!r} takes token ids of shape (L,), got input shape {shape}"
        )
    return shape[0]


def check_vocab_size(name: str, vocab_size: int | None) -> int:
    """``vocab_size`` if it is an int of at least 2 (padding and one token), else a
    ``ValueError`` naming ``name``."""
    if vocab_size is None:
        raise ConfigError(
            f"backbone {name!r} needs vocab_size (the number of token ids, padding id 0 "
            "included); a token source passes it, or set backbone_kwargs: {vocab_size: N}"
        )
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 2:
        raise ConfigError(f"backbone {name!r}: vocab_size must be an integer >= 2, got "
                         f"{vocab_size!r}")
    return vocab_size
