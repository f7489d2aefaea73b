"""FedDyn: the linear and quadratic terms, the gradient-state update, the server's h."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fedlight.clients.feddyn import FedDyn, FedDynServer
from fedlight.core.rules import Report, ServerContext, SingleProcess


def make(**kwargs):
    torch.manual_seed(0)
    return FedDyn(**{"backbone": "mlp", "num_classes": 4, "input_shape": (1, 8, 8), "lr": 0.1,
                     **kwargs})


def randoms(client, seed):
    generator = torch.Generator().manual_seed(seed)
    return {n: torch.randn(p.shape, generator=generator) for n, p in client.named_parameters()}


def prepared(alpha=0.3):
    """A client with gradient state g, its anchor theta0 received, then moved by delta."""
    client = make(alpha=alpha)
    g, delta = randoms(client, 1), randoms(client, 2)
    with torch.no_grad():
        for name, value in g.items():
            client.grad_state.get_buffer(name).copy_(value)
    client.on_round_start(0, {})
    anchor = {n: p.detach().clone() for n, p in client.named_parameters()}
    with torch.no_grad():
        for n, p in client.named_parameters():
            p.add_(delta[n], alpha=0.1)
    return client, g, anchor


@pytest.mark.parametrize("cls", [FedDyn, FedDynServer])
def test_bad_alpha_is_named(cls):
    with pytest.raises(ValueError, match="alpha .* got -0.1"):
        make(alpha=-0.1) if cls is FedDyn else FedDynServer(alpha=-0.1)


def test_gradient_state_is_private():
    client = make()
    assert set(client.partition.private) == {f"grad_state.{n}" for n, _ in
                                             client.named_parameters()}
    assert client.has_global_model


def test_loss_is_task_minus_linear_plus_quadratic():
    client, g, anchor = prepared(alpha=0.3)
    x = torch.randn(5, 1, 8, 8)
    y = torch.tensor([0, 1, 2, 3, 0])
    theta = dict(client.named_parameters())
    linear = sum((g[n] * theta[n].detach()).sum() for n in theta)
    quadratic = 0.15 * sum((theta[n].detach() - anchor[n]).pow(2).sum() for n in theta)
    assert quadratic > 0 and linear.abs() > 0
    torch.testing.assert_close(client.linear_term().detach(), linear)
    torch.testing.assert_close(client.quadratic_term().detach(), quadratic)
    expected = F.cross_entropy(client(x), y).detach() - linear + quadratic
    torch.testing.assert_close(client.training_step((x, y), 0).detach(), expected)


def test_gradient_state_moves_against_the_local_drift():
    client, g, anchor = prepared(alpha=0.3)
    theta = {n: p.detach().clone() for n, p in client.named_parameters()}
    client.on_round_end()
    for name in theta:
        torch.testing.assert_close(client.grad_state.get_buffer(name),
                                   g[name] - 0.3 * (theta[name] - anchor[name]))


def test_server_h_and_global_model_match_hand_values():
    rule = FedDynServer(alpha=0.1, parameters=["w"])
    rule.setup({"w": torch.zeros(2), "bn": torch.zeros(1)},
               ServerContext(num_clients=4, rounds=2, join_ratio=0.5))

    def round_of(states):
        rule.begin_round(0)
        for i, (w, bn) in enumerate(states):
            rule.add(Report(i, {"w": torch.tensor(w), "bn": torch.tensor([bn])}, 1.0))
        rule.end_round(SingleProcess())

    round_of([([2.0, 4.0], 1.0), ([4.0, 0.0], 3.0)])
    # mean [3, 2]; h = -0.1 * 2/4 * ([3, 2] - 0) = [-0.15, -0.1]; theta = mean - h / 0.1
    torch.testing.assert_close(rule.h["w"], torch.tensor([-0.15, -0.1], dtype=torch.float64))
    torch.testing.assert_close(rule.global_state["w"], torch.tensor([4.5, 3.0]))
    torch.testing.assert_close(rule.global_state["bn"], torch.tensor([2.0]))  # plain mean
    restored = FedDynServer(alpha=0.1, parameters=["w"])
    restored.setup(rule.global_state, rule.context)
    restored.load_state_dict(rule.state_dict())
    round_of([([4.5, 3.0], 0.0)] * 2)  # clients that did not move: h stays, still corrects
    torch.testing.assert_close(rule.global_state["w"], torch.tensor([6.0, 4.0]))
    torch.testing.assert_close(restored.h["w"], rule.h["w"])
