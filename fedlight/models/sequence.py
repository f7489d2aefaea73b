"""Backbones on token sequences: GPFL's fastText (AG News) and the privatization paper's
CharLSTM (Shakespeare).

Input: int64 token ids ``(N, L)`` with 0 = padding, ``input_shape == (L,)``; ``vocab_size`` is
the number of ids, padding included (``len(vocab)`` of the source), which the data module
passes to the backbone for token sources.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from torch import Tensor, nn

from fedlight.core.errors import ConfigError
from fedlight.models.backbone import Backbone, check_shape
from fedlight.models.zoo import register_backbone

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


class MeanEmbedding(nn.EmbeddingBag):
    """The mean of the embeddings of each sequence's tokens, padding (id 0) left out.

    ``EmbeddingBag`` sums the rows in one fused gather (no ``(N, L, D)`` tensor is built) and
    skips ``padding_idx``; the sum is divided by the number of real tokens, so a sentence's
    feature does not shrink with the padding it got (a row of padding only gives zeros). With
    ``count_padding`` it is divided by ``L`` instead, the mean over the padded sequence that
    PFLlib's fastText takes.
    """

    def __init__(self, vocab_size: int, embed_dim: int, count_padding: bool = False) -> None:
        super().__init__(vocab_size, embed_dim, mode="sum", padding_idx=PADDING_ID)
        self.count_padding = count_padding

    def forward(self, ids: Tensor) -> Tensor:  # type: ignore[override]
        """``(N, embed_dim)`` features of token ids ``(N, L)``."""
        total = super().forward(ids)
        if self.count_padding:
            return total / ids.shape[1]
        return total / (ids != PADDING_ID).sum(1, keepdim=True).clamp(min=1)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, count_padding={self.count_padding}"


@register_backbone
def fasttext(
    input_shape: Sequence[int],
    num_classes: int,
    vocab_size: int | None = None,
    embed_dim: int = 32,
    count_padding: bool = False,
) -> Backbone:
    """fastText as GPFL (Zhang et al., ICCV 2023) runs it on AG News (PFLlib's ``fastText``).

    Token embedding (``vocab_size`` x ``embed_dim``, row 0 = padding, kept at zero), the mean
    over each sequence's tokens, then Linear(embed_dim, embed_dim) with no activation (as
    PFLlib's hidden layer) is the feature; head Linear(embed_dim, U). GPFL's settings:
    ``embed_dim`` 32, AG News' 98,635-token vocabulary, sequences of 200 ids, 4 classes:
    3,157,508 parameters (3,156,320 in the embedding). Submodules: ``encoder.embedding``,
    ``encoder.fc``.

    Args:
        vocab_size: number of token ids, padding included (passed by token sources).
        embed_dim: size of the embedding and of the hidden layer (GPFL: 32).
        count_padding: False (default): the mean over the real tokens only (padding ids left
            out, the bag-of-words mean of fastText). True: the mean over all ``L`` positions,
            padding counted as zero vectors, which is what PFLlib's code computes.
    """
    length = sequence_length("fasttext", input_shape)
    vocab_size = check_vocab_size("fasttext", vocab_size)
    encoder = nn.Sequential(OrderedDict(
        embedding=MeanEmbedding(vocab_size, embed_dim, count_padding),
        fc=nn.Linear(embed_dim, embed_dim),
    ))
    return Backbone(encoder, embed_dim, num_classes, (length,), name="fasttext")


class LSTMLayer(nn.Module):
    """One LSTM layer over ``(N, L, D)``: all its outputs ``(N, L, H)`` or only the last
    step's ``(N, H)`` (``last_step_only``). Zero initial state."""

    def __init__(self, input_size: int, hidden_size: int, last_step_only: bool) -> None:
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, batch_first=True)
        self.last_step_only = last_step_only

    def forward(self, x: Tensor) -> Tensor:
        outputs, _ = self.lstm(x)
        return outputs[:, -1] if self.last_step_only else outputs


@register_backbone
def char_lstm(
    input_shape: Sequence[int],
    num_classes: int,
    vocab_size: int | None = None,
    embed_dim: int = 8,
    hidden_size: int = 256,
) -> Backbone:
    """CharLSTM, the Shakespeare model of "Aggregate or Not?" (Li et al., arXiv:2107.11954,
    Fig. 4: "LSTM(8, 256, 2)"), FedAvg's next-character LSTM as in LEAF.

    Character embedding of size 8 (row 0 = padding, kept at zero), two stacked LSTM layers of
    256 (zero initial state, no dropout), the last time step's output is the 256-d feature;
    head Linear(256, U). The prediction reads the *last position*: Shakespeare's samples are
    fixed 80-character windows; shorter sequences must be padded on the left. For 81 ids
    (LEAF's 80 characters plus padding) and 80 classes: 819,928 parameters.

    Blocks, bottom first. Coarse cut (the paper's): ``encoder`` (embedding and both LSTM
    layers) and ``head`` (the FC layer), so "AaB" adds a private copy of the embedding and the
    LSTM. Fine cut (``cut: fine``, four blocks, the authors' layered CharLSTM):

    - A ``encoder.embedding``: ids ``(N, L)`` -> ``(N, L, 8)``
    - B ``encoder.lstm1``: LSTM layer 1 over the sequence -> ``(N, L, 256)``
    - C ``encoder.lstm2``: LSTM layer 2, its last step -> ``(N, 256)``
    - D ``head``: Linear(256, U)

    The two single-layer LSTMs compute exactly what one ``nn.LSTM(8, 256, num_layers=2)``
    computes (the same parameters, split by layer).

    Args:
        vocab_size: number of character ids, padding included (passed by token sources).
        embed_dim: size of the character embedding (8).
        hidden_size: size of each LSTM layer (256).
    """
    length = sequence_length("char_lstm", input_shape)
    vocab_size = check_vocab_size("char_lstm", vocab_size)
    encoder = nn.Sequential(OrderedDict(
        embedding=nn.Embedding(vocab_size, embed_dim, padding_idx=PADDING_ID),
        lstm1=LSTMLayer(embed_dim, hidden_size, last_step_only=False),
        lstm2=LSTMLayer(hidden_size, hidden_size, last_step_only=True),
    ))
    fine = [f"encoder.{part}" for part, _ in encoder.named_children()] + ["head"]
    return Backbone(encoder, hidden_size, num_classes, (length,), name="char_lstm",
                    fine_blocks=fine)
