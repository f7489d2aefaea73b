"""CharLSTM on character ids, the privatization paper's Shakespeare model (ids ``(N, L)``,
0 = padding)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from torch import Tensor, nn

from fedlight.models.backbone import Backbone
from fedlight.models.sequence import PADDING_ID, check_vocab_size, sequence_length
from fedlight.models.zoo import register_backbone


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
