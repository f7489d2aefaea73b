"""Per-FedAvg: the first-order meta gradient, the Hessian-free correction, one adaptation
step at evaluation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

from fedlight.clients.perfedavg import PerFedAvg


def make(**kwargs):
    torch.manual_seed(0)
    return PerFedAvg(**{"backbone": "mlp", "num_classes": 4, "input_shape": (1, 8, 8),
                        "lr": 0.1, **kwargs}).double()


def batch(n):
    torch.manual_seed(1)
    return torch.randn(n, 1, 8, 8, dtype=torch.float64), torch.arange(n) % 4


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"variant": "so"}, "'so'; valid: fo, hf"),
    ({"inner_lr": 0.0}, "inner_lr .* got 0.0"),
    ({"hvp_delta": -1.0}, "hvp_delta must be positive, got -1.0"),
])
def test_bad_constructor_values_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make(**kwargs)


def outer_gradient(client, first, second):
    """grad f(w'; D') with w' = w - alpha grad f(w; D), and w' itself."""
    params = dict(client.model.named_parameters())
    inner = torch.autograd.grad(F.cross_entropy(client.model(first[0]), first[1]),
                                list(params.values()))
    adapted = {n: (p - 0.05 * g).detach().requires_grad_()
               for (n, p), g in zip(params.items(), inner, strict=True)}
    loss = F.cross_entropy(functional_call(client.model, adapted, (second[0],)), second[1])
    return dict(zip(adapted, torch.autograd.grad(loss, list(adapted.values())), strict=True))


def test_first_order_step_is_the_gradient_at_the_adapted_weights():
    client = make(inner_lr=0.05)
    x, y = batch(8)
    client.phase = "meta"
    client.training_step((x, y), 0).backward()
    expected = outer_gradient(client, (x[:4], y[:4]), (x[4:], y[4:]))
    for name, param in client.model.named_parameters():
        torch.testing.assert_close(param.grad, expected[name])


def test_hessian_free_correction_subtracts_alpha_times_the_hessian_vector_product():
    client = make(variant="hf", inner_lr=0.05, hvp_delta=1e-5)
    x, y = batch(9)
    client.phase = "meta"
    client.training_step((x, y), 0).backward()
    u = outer_gradient(client, (x[:3], y[:3]), (x[3:6], y[3:6]))
    params = dict(client.model.named_parameters())
    grads = torch.autograd.grad(F.cross_entropy(client.model(x[6:]), y[6:]),
                                list(params.values()), create_graph=True)
    dot = sum((g * u[n]).sum() for n, g in zip(params, grads, strict=True))
    hvp = dict(zip(params, torch.autograd.grad(dot, list(params.values())), strict=True))
    client.on_before_optimizer_step(torch.optim.SGD(client.parameters(), lr=0.1))
    for name, param in params.items():
        torch.testing.assert_close(param.grad, u[name] - 0.05 * hvp[name], rtol=1e-4,
                                   atol=1e-7)


def test_evaluation_adapts_with_one_step_at_the_inner_rate():
    (phase,) = make(inner_lr=0.02).evaluation_phases()
    assert (phase.max_steps, phase.epochs, phase.trainable) == (1, 1, None)
    assert phase.lr_scale == pytest.approx(0.2)
