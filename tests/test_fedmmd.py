"""FedMMD: the MMD term against the frozen received encoder; lamda = 0 is FedAvg."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fedlight.clients import FedAvg
from fedlight.clients.fedmmd import FedMMD
from fedlight.clients.map import mmd_loss
from fedlight.data.partitions.dirichlet import Dirichlet
from tests.conftest import tiny_data, tiny_trainer


def make(cls=FedMMD, **kwargs):
    torch.manual_seed(0)
    return cls(**{"backbone": "mlp", "num_classes": 4, "input_shape": (1, 8, 8), "lr": 0.1,
                  **kwargs})


def test_bad_lamda_is_named():
    with pytest.raises(ValueError, match="lamda .* got -1.0"):
        make(lamda=-1.0)


def test_loss_adds_lamda_times_mmd_to_the_received_encoder():
    torch.manual_seed(1)
    x, y = torch.randn(8, 1, 8, 8), torch.arange(8) % 4
    client = make(lamda=0.5)
    client.on_round_start(0, {})
    received = [p.detach().clone() for p in client.model.encoder.parameters()]
    ce = F.cross_entropy(client(x), y)
    torch.testing.assert_close(client.training_step((x, y), 0), ce)  # same model: MMD 0
    with torch.no_grad():
        for p in client.model.encoder.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    features = client.model.encoder(x)
    (frozen,) = client._global
    for p, r in zip(frozen.parameters(), received, strict=True):
        assert torch.equal(p, r)  # the global stream did not follow the local model
    expected = F.cross_entropy(client.model.head(features), y) + 0.5 * mmd_loss(
        features, frozen(x))
    loss = client.training_step((x, y), 0)
    torch.testing.assert_close(loss, expected)
    assert loss > F.cross_entropy(client(x), y)


def test_lamda_zero_equals_fedavg(tmp_path):
    data = tiny_data(partition=Dirichlet(beta=0.3, min_client_size=5))
    states = {}
    for name, cls, kwargs in (("fedavg", FedAvg, {}), ("mmd0", FedMMD, {"lamda": 0.0})):
        trainer = tiny_trainer(tmp_path, rounds=1, run_name=name)
        trainer.fit(make(cls, **kwargs), data)
        states[name] = trainer.global_state
    for key, value in states["fedavg"].items():
        assert torch.equal(states["mmd0"][key], value), key
