"""The non-image backbones: fastText (token ids), CharLSTM (characters) and HAR-CNN (signals)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedlight.models import build_backbone


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def fasttext(**kwargs):
    torch.manual_seed(0)
    return build_backbone("fasttext", (6,), 4, **{"vocab_size": 10, **kwargs})


# ===================================================================== fastText
def test_fasttext_has_gpfls_size_on_ag_news() -> None:
    model = build_backbone("fasttext", (200,), 4, vocab_size=98_635)
    assert model.feature_dim == 32 and model.encoder.embedding.weight.shape == (98_635, 32)
    assert count_params(model) == 98_635 * 32 + (32 * 32 + 32) + (32 * 4 + 4) == 3_157_508
    # the hidden layer has no activation, as PFLlib's
    assert [type(m) for m in model.encoder.children()][1:] == [nn.Linear]


def test_fasttext_averages_the_real_tokens_only() -> None:
    model = fasttext()
    table = model.encoder.embedding.weight
    ids = torch.tensor([[3, 5, 5, 0, 0, 0], [0, 0, 0, 0, 0, 0]])
    bag = model.encoder.embedding(ids)
    torch.testing.assert_close(bag[0], (table[3] + 2 * table[5]) / 3)
    assert torch.equal(bag[1], torch.zeros(32))
    # more padding changes nothing
    longer = torch.cat([ids, torch.zeros(2, 4, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(longer), model(ids))


def test_fasttext_count_padding_is_pfllibs_mean_over_the_padded_length() -> None:
    model = fasttext(count_padding=True)
    table = model.encoder.embedding.weight
    ids = torch.tensor([[3, 5, 5, 0, 0, 0]])
    torch.testing.assert_close(model.encoder.embedding(ids)[0], (table[3] + 2 * table[5]) / 6)


def test_fasttext_padding_row_is_zero_and_never_trains() -> None:
    model = fasttext()
    assert torch.equal(model.encoder.embedding.weight[0], torch.zeros(32))
    model(torch.tensor([[1, 2, 0, 0, 0, 0]])).sum().backward()
    grad = model.encoder.embedding.weight.grad
    assert torch.equal(grad[0], torch.zeros(32)) and grad[1].abs().sum() > 0


# ===================================================================== CharLSTM
def char_lstm(**kwargs):
    torch.manual_seed(0)
    return build_backbone("char_lstm", (80,), 80, **{"vocab_size": 81, **kwargs})


def test_char_lstm_is_the_papers_lstm_8_256_2() -> None:
    model = char_lstm()
    assert model.encoder.embedding.weight.shape == (81, 8)
    lstms = [m for m in model.modules() if isinstance(m, nn.LSTM)]
    assert [(m.input_size, m.hidden_size, m.num_layers) for m in lstms] == [(8, 256, 1),
                                                                             (256, 256, 1)]
    lstm_params = 4 * 256 * (8 + 256 + 2) + 4 * 256 * (256 + 256 + 2)
    assert count_params(model) == 81 * 8 + lstm_params + 256 * 80 + 80 == 819_928
    assert model.feature_dim == 256 and isinstance(model.head, nn.Linear)


def test_char_lstm_layers_compute_one_two_layer_lstm() -> None:
    model = char_lstm()
    stacked = nn.LSTM(8, 256, num_layers=2, batch_first=True)
    with torch.no_grad():
        for layer, block in enumerate((model.encoder.lstm1, model.encoder.lstm2)):
            for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(stacked, f"{kind}_l{layer}").copy_(getattr(block.lstm, f"{kind}_l0"))
    ids = torch.randint(1, 81, (3, 80), generator=torch.Generator().manual_seed(2))
    embedded = model.encoder.embedding(ids)
    torch.testing.assert_close(model.encoder(ids), stacked(embedded)[0][:, -1])


def test_char_lstm_fine_cut_is_embedding_lstm1_lstm2_head() -> None:
    model = char_lstm()
    assert model.cuts == ("coarse", "fine")
    assert model.block_names("fine") == ["encoder.embedding", "encoder.lstm1", "encoder.lstm2",
                                         "head"]
    h = torch.randint(0, 81, (2, 80))
    shapes = []
    for block in model.blocks("fine"):
        h = block(h)
        shapes.append(tuple(h.shape))
    assert shapes == [(2, 80, 8), (2, 80, 256), (2, 256), (2, 80)]


@pytest.mark.parametrize("name", ["fasttext", "char_lstm"])
def test_sequence_backbones_need_a_vocab_size(name: str) -> None:
    with pytest.raises(ValueError, match=rf"'{name}' needs vocab_size"):
        build_backbone(name, (80,), 4)
    with pytest.raises(ValueError, match=r"vocab_size must be an integer >= 2, got 1"):
        build_backbone(name, (80,), 4, vocab_size=1)


@pytest.mark.parametrize("name", ["fasttext", "char_lstm"])
def test_sequence_backbones_refuse_image_shapes(name: str) -> None:
    with pytest.raises(ValueError, match=r"shape \(L,\), got input shape \(1, 28, 28\)"):
        build_backbone(name, (1, 28, 28), 4, vocab_size=10)


def test_image_backbone_refuses_a_vocab_size() -> None:
    with pytest.raises(ValueError, match=r"'cnn' got unknown argument\(s\) \['vocab_size'\]"):
        build_backbone("cnn", (1, 28, 28), 4, vocab_size=10)


# ===================================================================== HAR-CNN
def test_har_cnn_is_pfllibs_harcnn() -> None:
    model = build_backbone("har_cnn", (9, 128), 6)
    convs = [(m.in_channels, m.out_channels, m.kernel_size) for m in model.modules()
             if isinstance(m, nn.Conv1d)]
    assert convs == [(9, 32, (9,)), (32, 64, (9,))]
    linears = [(m.in_features, m.out_features) for m in model.modules() if isinstance(m, nn.Linear)]
    # 128 -conv9-> 120 -pool-> 60 -conv9-> 52 -pool-> 26: 64 * 26 = 1664
    assert linears == [(1664, 1024), (1024, 512), (512, 6)]
    assert count_params(model) == 2_253_958 and model.feature_dim == 512
    code_cut = build_backbone("har_cnn", (9, 128), 6, all_fc_head=True)
    assert code_cut.feature_dim == 1664 and sum(
        isinstance(m, nn.Linear) for m in code_cut.head.modules()) == 3


@pytest.mark.parametrize(("shape", "match"), [
    ((9, 1, 128), r"shape \(C, T\).*got input shape \(9, 1, 128\)"),
    ((9, 27), r"\(9, 27\).*at least 28 time steps"),
])
def test_har_cnn_refuses_shapes_it_cannot_take(shape: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_backbone("har_cnn", shape, 6)
