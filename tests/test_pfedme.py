"""pFedMe: the K inner steps, the w update towards theta, lamda = 0 as Local, beta mixing."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from fedlight.clients.pfedme import PFedMe
from fedlight.core.rules import Report, ServerContext, SingleProcess
from tests.conftest import tiny_data, tiny_trainer


def make(**kwargs):
    torch.manual_seed(0)
    client = PFedMe(**{"backbone": "mlp", "num_classes": 4, "input_shape": (1, 8, 8),
                       "lr": 0.1, **kwargs})
    with torch.no_grad():  # theta away from w
        for p in client.personal.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return client


def batch():
    torch.manual_seed(1)
    return torch.randn(6, 1, 8, 8), torch.tensor([0, 1, 2, 3, 0, 1])


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"lamda": -1.0}, "lamda .* got -1.0"),
    ({"inner_steps": 0}, "inner_steps .* at least 1, got 0"),
    ({"personal_lr": 0.0}, "personal_lr must be positive, got 0.0"),
    ({"beta": 0.0}, "beta .* got 0.0"),
])
def test_bad_constructor_values_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make(**kwargs)


def hand_inner(client, x, y, lamda, steps, lr):
    theta = copy.deepcopy(client.personal).requires_grad_(True)
    w = [p.detach() for p in client.model.parameters()]
    for _ in range(steps):
        grads = torch.autograd.grad(F.cross_entropy(theta(x), y), list(theta.parameters()))
        with torch.no_grad():
            for p, g, anchor in zip(theta.parameters(), grads, w, strict=True):
                p.sub_(lr * (g + lamda * (p - anchor)))
    return [p.detach() for p in theta.parameters()]


def test_inner_steps_and_the_w_gradient_match_hand_values():
    client = make(lamda=2.0, inner_steps=3, personal_lr=0.05)
    x, y = batch()
    expected = hand_inner(client, x, y, 2.0, 3, 0.05)
    client.training_step((x, y), 0).backward()
    for theta, hand, w in zip(client.personal.parameters(), expected, client.model.parameters(),
                              strict=True):
        torch.testing.assert_close(theta, hand)
        torch.testing.assert_close(w.grad, 2.0 * (w.detach() - hand))


def test_lamda_zero_trains_theta_alone_and_never_moves_w(tmp_path):
    client = make(lamda=0.0, inner_steps=2, personal_lr=0.05)
    x, y = batch()
    expected = hand_inner(client, x, y, 0.0, 2, 0.05)
    client.training_step((x, y), 0).backward()
    for theta, hand, w in zip(client.personal.parameters(), expected, client.model.parameters(),
                              strict=True):
        torch.testing.assert_close(theta, hand)
        assert not w.grad.any()
    initial = {k: v.clone() for k, v in make(lamda=0.0).state_dict().items()}
    trainer = tiny_trainer(tmp_path, rounds=1)
    trainer.fit(make(lamda=0.0), tiny_data())
    for key, value in trainer.global_state.items():
        assert torch.equal(value, initial[key]), key


def test_server_mixes_with_beta():
    rule = make(beta=2.0).configure_server()
    rule.setup({"w": torch.tensor([1.0])}, ServerContext(num_clients=2, rounds=1, join_ratio=1))
    rule.begin_round(0)
    rule.add(Report(0, {"w": torch.tensor([2.0])}, 1.0))
    rule.add(Report(1, {"w": torch.tensor([4.0])}, 1.0))
    rule.end_round(SingleProcess())
    torch.testing.assert_close(rule.global_state["w"], torch.tensor([1.0 + 2.0 * 2.0]))
