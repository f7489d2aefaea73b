"""Counter-based noise (fedlight.core.noise): the distributions it draws, streams that are a
function of (key, counter, index) alone, its dropout, and the runtime keying every source
from (seed, round, client) before a client trains."""

from __future__ import annotations

import math

import pytest
import torch
from torch.func import functional_call, vmap

from fedlight.clients import FedPick
from fedlight.core.noise import Dropout, NoiseSource, reseed_noise
from fedlight.core.seeding import derive_seed
from tests.conftest import tiny_data, tiny_trainer


def source(seed: int) -> NoiseSource:
    noise = NoiseSource()
    noise.reseed(seed)
    return noise


def test_uniform_draws_are_uniform_inside_the_open_interval():
    draws = source(0).uniform_like(torch.empty(1 << 20))
    assert 0 < draws.min() and draws.max() < 1
    assert draws.mean().item() == pytest.approx(0.5, abs=2e-3)
    assert draws.var().item() == pytest.approx(1 / 12, rel=1e-2)
    counts = torch.histc(draws, 100, 0, 1)
    expected = len(draws) / 100
    assert ((counts - expected) ** 2 / expected).sum().item() < 160  # chi2, 99 dof: p ~ 1e-4


def test_gumbel_noise_has_the_standard_gumbel_moments():
    noise = source(0).gumbel_like(torch.empty(200_000))
    assert noise.mean().item() == pytest.approx(0.5772, abs=0.01)  # Euler-Mascheroni
    assert noise.var().item() == pytest.approx(math.pi ** 2 / 6, rel=0.03)
    assert torch.isfinite(noise).all()


def test_other_keys_and_later_draws_are_uncorrelated_and_the_same_key_repeats():
    first = source(1)
    a, b = first.uniform_like(torch.empty(50_000)), first.uniform_like(torch.empty(50_000))
    c = source(2).uniform_like(torch.empty(50_000))
    for other in (b, c):
        assert abs(torch.corrcoef(torch.stack([a, other]))[0, 1].item()) < 0.02
    assert torch.equal(source(1).uniform_like(torch.empty(50_000)), a)
    assert first.counter.item() == 2


def test_an_element_draws_the_same_whatever_the_shape_around_it():
    # the first rows of a larger batch are what a smaller batch draws
    small = source(3).uniform_like(torch.empty(3, 5))
    large = source(3).uniform_like(torch.empty(8, 5))
    assert torch.equal(large[:3], small)


def test_vmapped_sources_draw_each_rows_own_stream():
    noise = NoiseSource()
    keys = [source(seed) for seed in (4, 5, 6)]
    stacked = {name: torch.stack([dict(k.named_buffers())[name] for k in keys])
               for name, _ in noise.named_buffers()}
    noise.keyed = True
    wrapper = _Draw(noise)

    def draw(state, like):
        return functional_call(wrapper, {f"noise.{k}": v for k, v in state.items()}, (like,))

    drawn = vmap(draw)(stacked, torch.empty(3, 4, 2))
    for row, key in enumerate(keys):
        assert torch.equal(drawn[row], key.uniform_like(torch.empty(4, 2)))
    assert stacked["counter"].tolist() == [1, 1, 1]  # the in-place counter lands in the rows


class _Draw(torch.nn.Module):
    def __init__(self, noise: NoiseSource) -> None:
        super().__init__()
        self.noise = noise

    def forward(self, like: torch.Tensor) -> torch.Tensor:
        return self.noise.uniform_like(like)


def test_dropout_zeroes_a_share_p_and_rescales_in_training_only():
    dropout = Dropout(0.3)
    dropout.noise.reseed(0)
    x = torch.ones(100_000)
    y = dropout(x)
    assert (y == 0).float().mean().item() == pytest.approx(0.3, abs=5e-3)
    assert y.unique().tolist() == [0.0, pytest.approx(1 / 0.7)]
    dropout.eval()
    assert torch.equal(dropout(x), x)
    with pytest.raises(ValueError, match=r"dropout probability must be in \[0, 1\), got 1"):
        Dropout(1)


def test_unkeyed_sources_key_themselves_from_torchs_seed():
    torch.manual_seed(0)
    first = NoiseSource().uniform_like(torch.empty(10))
    torch.manual_seed(0)
    assert torch.equal(NoiseSource().uniform_like(torch.empty(10)), first)


def test_every_source_is_keyed_apart_and_the_runtime_keys_each_client(tmp_path, monkeypatch):
    model = torch.nn.Sequential(Dropout(0.5), Dropout(0.5))
    reseed_noise(model, 7)
    assert model[0].noise.key.tolist() != model[1].noise.key.tolist()
    keys = []
    original = NoiseSource.reseed

    def record(self, seed):
        keys.append(seed)
        original(self, seed)

    monkeypatch.setattr(NoiseSource, "reseed", record)
    shape = (1, 16, 16)
    trainer = tiny_trainer(tmp_path, rounds=1, verbose=False)
    torch.manual_seed(0)
    trainer.fit(FedPick(backbone="cnn_bn", num_classes=4, input_shape=shape),
                tiny_data(num_clients=2, shape=shape))
    assert keys[:2] == [derive_seed(derive_seed(0, 0, client), 0) for client in (0, 1)]
