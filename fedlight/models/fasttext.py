"""fastText on token ids, as GPFL runs it on AG News (token ids ``(N, L)``, 0 = padding)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from torch import Tensor, nn

from fedlight.models.backbone import Backbone
from fedlight.models.sequence import PADDING_ID, check_vocab_size, sequence_length
from fedlight.models.zoo import register_backbone


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
