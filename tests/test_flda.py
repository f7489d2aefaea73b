"""FLDA: the gated mixture of the private and general experts, and who trains on what."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from fedlight.clients.flda import FLDA


def make(**kwargs):
    torch.manual_seed(0)
    client = FLDA(**{"backbone": "mlp", "num_classes": 4, "input_shape": (1, 8, 8), "lr": 0.1,
                     **kwargs})
    with torch.no_grad():
        for p in client.personal.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return client


def batch():
    torch.manual_seed(1)
    return torch.randn(6, 1, 8, 8), torch.tensor([0, 1, 2, 3, 0, 1])


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"gate": "softmax"}, "'softmax'; valid: client, input"),
    ({"initial_alpha": 1.0}, r"initial_alpha must be in \(0, 1\), got 1.0"),
])
def test_bad_constructor_values_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make(**kwargs)


@pytest.mark.parametrize("gate", ["client", "input"])
def test_prediction_is_the_alpha_mixture_of_probabilities(gate):
    x, _ = batch()
    client = make(gate=gate, initial_alpha=0.3)
    assert set(client.partition.private) == {k for k in client.state_dict()
                                             if k.startswith(("personal.", "gate."))}
    expected = (0.3 * F.softmax(client.personal(x), -1)
                + 0.7 * F.softmax(client.model(x), -1))
    torch.testing.assert_close(client(x).exp(), expected)


def test_general_model_trains_on_its_own_loss_and_the_gate_on_the_mixture():
    x, y = batch()
    client = make(initial_alpha=0.5)
    client.training_step((x, y), 0).backward()
    reference = copy.deepcopy(client.model)
    F.cross_entropy(reference(x), y).backward()
    for p, r in zip(client.model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, r.grad)
    # d NLL / d logit(alpha) = -mean alpha (1 - alpha)(p_priv - p_gen)[y] / p_mix[y]
    p_priv = F.softmax(client.personal(x), -1).gather(1, y[:, None]).squeeze(1)
    p_gen = F.softmax(client.model(x), -1).gather(1, y[:, None]).squeeze(1)
    mix = 0.5 * p_priv + 0.5 * p_gen
    expected = -(0.25 * (p_priv - p_gen) / mix).mean()
    torch.testing.assert_close(client.gate.bias.grad[0], expected.detach())
