"""MOON: the model-contrastive loss, its direction, the previous model, mu = 0 == FedAvg."""

from __future__ import annotations

import math

import pytest
import torch

from fedlight.clients import FedAvg
from fedlight.clients.moon import MOON
from fedlight.data.partitions.dirichlet import Dirichlet
from tests.conftest import tiny_data, tiny_trainer


def make(cls=MOON, **kwargs):
    torch.manual_seed(0)
    return cls(**{"backbone": "mlp", "num_classes": 4, "input_shape": (1, 8, 8), "lr": 0.1,
                  **kwargs})


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"mu": -1.0}, "mu .* got -1.0"),
    ({"temperature": 0.0}, "temperature must be positive, got 0.0"),
    ({"projection_dim": 0}, "projection_dim must be at least 1, got 0"),
])
def test_bad_constructor_values_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make(**kwargs)


def test_contrastive_loss_matches_hand_values_and_prefers_the_global_model():
    client = make(temperature=0.5)
    z = torch.tensor([[1.0, 0.0]])
    z_global, z_previous = torch.tensor([[1.0, 1.0]]), torch.tensor([[0.0, 1.0]])
    positive, negative = 1 / math.sqrt(2) / 0.5, 0.0
    expected = -math.log(math.exp(positive) / (math.exp(positive) + math.exp(negative)))
    assert client.contrastive_loss(z, z_global, z_previous).item() == pytest.approx(expected)
    towards_global = client.contrastive_loss(z_global, z_global, z_previous)
    towards_previous = client.contrastive_loss(z_previous, z_global, z_previous)
    assert towards_global < towards_previous


def test_huge_temperature_removes_the_pull():
    client = make(temperature=1e6)
    z = torch.randn(3, 5, requires_grad=True)
    client.contrastive_loss(z, torch.randn(3, 5), torch.randn(3, 5)).backward()
    assert z.grad.abs().max() < 1e-5


def test_previous_model_is_private_and_takes_the_trained_weights_at_round_end():
    client = make()
    assert set(client.partition.private) == {k for k in client.state_dict()
                                             if k.startswith("previous.")}
    assert client.has_global_model
    client.on_round_start(0, {})
    with torch.no_grad():
        for p in client.projector.parameters():
            p.add_(1.0)
    client.on_round_end()
    for key, value in client.representation().state_dict().items():
        assert torch.equal(client.previous.state_dict()[key], value)


def test_mu_zero_equals_fedavg_and_mu_one_does_not(tmp_path):
    data = tiny_data(partition=Dirichlet(beta=0.3, min_client_size=5))
    states = {}
    for name, cls, kwargs in (("fedavg", FedAvg, {}), ("mu0", MOON, {"mu": 0.0}),
                              ("mu1", MOON, {"mu": 1.0})):
        trainer = tiny_trainer(tmp_path, rounds=2, run_name=name, checkpoint_every=2)
        trainer.fit(make(cls, **kwargs), data)
        states[name] = trainer.global_state
    for key, value in states["fedavg"].items():
        assert torch.equal(states["mu0"][key], value), key
    assert any(not torch.equal(states["mu1"][k], v) for k, v in states["fedavg"].items())
