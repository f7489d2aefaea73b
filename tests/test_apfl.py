"""APFL: the mixed model, the gradients of w, v and alpha, alpha kept in [0, 1]."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from fedlight.clients.apfl import APFL


def make(**kwargs):
    torch.manual_seed(0)
    client = APFL(**{"backbone": "mlp", "num_classes": 4, "input_shape": (1, 8, 8), "lr": 0.1,
                     **kwargs})
    with torch.no_grad():  # a local model different from the global one
        for p in client.personal.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return client


def batch():
    torch.manual_seed(1)
    return torch.randn(6, 1, 8, 8), torch.tensor([0, 1, 2, 3, 0, 1])


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"alpha": 1.5}, "alpha .* in \\[0, 1\\], got 1.5"),
    ({"alpha_lr": 0.0}, "alpha_lr must be positive .* got 0.0"),
])
def test_bad_constructor_values_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make(**kwargs)


def test_personal_model_and_alpha_are_private():
    client = make()
    assert set(client.partition.private) == {"mixing", *(k for k in client.state_dict()
                                                         if k.startswith("personal."))}


def mixed_copy(client, alpha):
    """A plain model holding alpha v + (1 - alpha) w."""
    mixed = copy.deepcopy(client.personal)
    with torch.no_grad():
        for m, w in zip(mixed.parameters(), client.model.parameters(), strict=True):
            m.mul_(alpha).add_(w, alpha=1 - alpha)
    return mixed


def test_forward_is_the_mixture_and_alpha_zero_is_the_global_model():
    x, _ = batch()
    client = make(alpha=0.3)
    torch.testing.assert_close(client(x), mixed_copy(client, 0.3)(x))
    zero = make(alpha=0.0, adaptive=False)
    torch.testing.assert_close(zero(x), zero.global_forward(x))


def test_gradients_are_the_papers_updates():
    x, y = batch()
    client = make(alpha=0.3)
    client.training_step((x, y), 0).backward()
    # w: grad f(w) only
    reference = copy.deepcopy(client.model)
    F.cross_entropy(reference(x), y).backward()
    for p, r in zip(client.model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, r.grad)
    # v: alpha grad f(v_bar); alpha: <v - w, grad f(v_bar)>
    mixed = mixed_copy(client, 0.3)
    F.cross_entropy(mixed(x), y).backward()
    inner = 0.0
    for v, w, m in zip(client.personal.parameters(), client.model.parameters(),
                       mixed.parameters(), strict=True):
        torch.testing.assert_close(v.grad, 0.3 * m.grad)
        inner += ((v - w).detach() * m.grad).sum()
    torch.testing.assert_close(client.mixing.grad, inner)


def test_alpha_is_clipped_to_the_unit_interval():
    client = make(alpha=0.9)
    with torch.no_grad():
        client.mixing.fill_(1.4)
    client.on_train_batch_end(None, None, 0)
    assert client.mixing.item() == 1.0
