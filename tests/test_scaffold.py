"""SCAFFOLD: drift correction, control-variate updates (options I and II), server rule."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fedlight.clients import ClientContext, FedAvg
from fedlight.clients.scaffold import SCAFFOLD, SCAFFOLDServer
from fedlight.core.rules import Report, ServerContext, SingleProcess
from fedlight.data.partitions.dirichlet import Dirichlet
from tests.conftest import tiny_data, tiny_trainer


def make(cls=SCAFFOLD, **kwargs):
    torch.manual_seed(0)
    return cls(**{"backbone": "mlp", "num_classes": 4, "input_shape": (1, 8, 8), "lr": 0.1,
                  **kwargs})


def with_context(client):
    data = tiny_data()
    data.setup("fit")
    client.context = ClientContext(client_id=0, round=0, rounds=1, join_ratio=1.0,
                                   class_counts=data.class_counts(0),
                                   train_data=data.client_train(0), batch_size=16)
    return client


def randoms(client, seed):
    generator = torch.Generator().manual_seed(seed)
    return {n: torch.randn(p.shape, generator=generator) for n, p in client.named_parameters()}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"option": "III"}, "'III'; valid: I, II"),
    ({"global_lr": 0.0}, "global_lr .* got 0.0"),
])
def test_bad_constructor_values_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make(**kwargs)


def test_control_variates_are_private_and_zero_at_start():
    client = make()
    assert set(client.partition.private) == {f"control.{n}" for n, _ in
                                             client.named_parameters()}
    assert all(not b.any() for b in client.control.buffers())
    assert client.has_global_model


def test_correction_is_gradient_minus_client_plus_server_control():
    client = make()
    c = randoms(client, 1)
    c_i = randoms(client, 2)
    g = randoms(client, 3)
    with torch.no_grad():
        for name, value in c_i.items():
            client.client_control(name).copy_(value)
    client.on_round_start(0, {"control": c})
    for name, param in client.named_parameters():
        param.grad = g[name].clone()
    client.on_before_optimizer_step(torch.optim.SGD(client.parameters(), lr=0.1))
    for name, param in client.named_parameters():
        torch.testing.assert_close(param.grad, g[name] - c_i[name] + c[name])


def test_option_two_matches_the_hand_formula():
    client = make(lr=0.05)
    c, c_i = randoms(client, 1), randoms(client, 2)
    with torch.no_grad():
        for name, value in c_i.items():
            client.client_control(name).copy_(value)
    client.on_round_start(0, {"control": c})
    x = {n: p.detach().clone() for n, p in client.named_parameters()}
    optimizer = torch.optim.SGD(client.parameters(), lr=0.05)
    steps = 3
    for step in range(steps):  # move the weights as local training would
        with torch.no_grad():
            for n, p in client.named_parameters():
                p.add_(randoms(client, 10 + step)[n], alpha=0.01)
        client.on_before_optimizer_step(optimizer)
    y = {n: p.detach().clone() for n, p in client.named_parameters()}
    delta = client.upload().payload["control_delta"]
    client.on_round_end()
    for name in x:
        expected = c_i[name] - c[name] + (x[name] - y[name]) / (steps * 0.05)
        torch.testing.assert_close(client.client_control(name), expected)
        torch.testing.assert_close(delta[name], expected - c_i[name])


def test_option_one_is_the_local_gradient_at_the_received_model():
    client = with_context(make(option="I"))
    x, y = client.context.train_data
    expected = torch.autograd.grad(F.cross_entropy(client(x), y), list(client.parameters()))
    client.on_round_start(0, {})
    with torch.no_grad():  # local training moves the weights; c_i+ stays grad f_i(x)
        for p in client.parameters():
            p.add_(1.0)
    client.upload()
    client.on_round_end()
    for (name, _), grad in zip(client.named_parameters(), expected, strict=True):
        torch.testing.assert_close(client.client_control(name), grad)


def test_server_steps_with_global_lr_and_sums_control_deltas_over_all_clients():
    rule = SCAFFOLDServer(global_lr=0.5)
    rule.setup({"w": torch.zeros(2)}, ServerContext(num_clients=4, rounds=1, join_ratio=0.5))
    rule.begin_round(0)
    rule.add(Report(0, {"w": torch.tensor([2.0, 4.0])}, 1.0,
                    {"control_delta": {"w": torch.tensor([1.0, -2.0])}}))
    rule.add(Report(1, {"w": torch.tensor([4.0, 0.0])}, 1.0,
                    {"control_delta": {"w": torch.tensor([3.0, 2.0])}}))
    rule.end_round(SingleProcess())
    torch.testing.assert_close(rule.global_state["w"], torch.tensor([1.5, 1.0]))
    torch.testing.assert_close(rule.message["control"]["w"], torch.tensor([1.0, 0.0]))
    restored = SCAFFOLDServer(global_lr=0.5)
    restored.load_state_dict(rule.state_dict())
    torch.testing.assert_close(restored.control["w"], torch.tensor([1.0, 0.0]))


def test_first_round_equals_fedavg_and_the_second_does_not(tmp_path):
    data = tiny_data(partition=Dirichlet(beta=0.3, min_client_size=5))
    states = {}
    for cls in (FedAvg, SCAFFOLD):
        for rounds in (1, 2):
            trainer = tiny_trainer(tmp_path, rounds=rounds, run_name=f"{cls.__name__}{rounds}",
                                   checkpoint_every=rounds)
            trainer.fit(make(cls), data)
            states[cls, rounds] = trainer.global_state
    for key, value in states[FedAvg, 1].items():
        assert torch.equal(value, states[SCAFFOLD, 1][key]), key
    assert any(not torch.equal(v, states[SCAFFOLD, 2][k]) for k, v in states[FedAvg, 2].items())
