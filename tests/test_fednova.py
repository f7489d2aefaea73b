"""FedNova: step-coefficient norms, the normalized server update, equal steps == FedAvg."""

from __future__ import annotations

import pytest
import torch

from fedlight.clients import FedAvg
from fedlight.clients.fednova import FedNova, NormalizedAveraging, step_coefficient_norm
from fedlight.core.rules import Report, ServerContext, SingleProcess
from fedlight.data.partitions.dirichlet import Dirichlet
from fedlight.data.partitions.iid import IID
from tests.conftest import tiny_data, tiny_trainer


def make(cls=FedNova, **kwargs):
    torch.manual_seed(0)
    return cls(**{"backbone": "mlp", "num_classes": 4, "input_shape": (1, 8, 8), "lr": 0.1,
                  **kwargs})


def test_non_sgd_optimizer_is_refused():
    with pytest.raises(ValueError, match="optimizer must be 'sgd', got 'adam'"):
        make(optimizer="adam")


def test_step_coefficient_norm_is_tau_or_the_momentum_sum():
    assert step_coefficient_norm(7) == 7.0
    rho, tau = 0.5, 3  # a = (1, 1 + rho, 1 + rho + rho^2) summed
    assert step_coefficient_norm(tau, rho) == pytest.approx(1 + 1.5 + 1.75)


def test_upload_reports_the_counted_steps():
    client = make(momentum=0.5)
    client.on_round_start(0, {})
    optimizer = torch.optim.SGD(client.parameters(), lr=0.1)
    for _ in range(3):
        client.on_before_optimizer_step(optimizer)
    assert float(client.upload().payload["tau"]) == pytest.approx(4.25)


def test_server_normalizes_updates_by_their_step_norms():
    rule = NormalizedAveraging()
    rule.setup({"w": torch.zeros(2)}, ServerContext(num_clients=2, rounds=1, join_ratio=1.0))
    rule.begin_round(0)
    # client 0: 2 steps, moved to [2, 4]; client 1: 4 steps, moved to [4, 0]; p = (1/4, 3/4)
    rule.add(Report(0, {"w": torch.tensor([2.0, 4.0])}, 1.0, {"tau": torch.tensor(2.0)}))
    rule.add(Report(1, {"w": torch.tensor([4.0, 0.0])}, 3.0, {"tau": torch.tensor(4.0)}))
    rule.end_round(SingleProcess())
    # d = 1/4 [2, 4] / 2 + 3/4 [4, 0] / 4 = [1, 0.5];  tau_eff = 1/4 2 + 3/4 4 = 3.5
    torch.testing.assert_close(rule.global_state["w"], torch.tensor([3.5, 1.75]))


def test_equal_step_counts_equal_fedavg_and_unequal_ones_do_not(tmp_path):
    states = {}
    for name, partition in (("iid", IID()),
                            ("dirichlet", Dirichlet(beta=0.3, min_client_size=5))):
        data = tiny_data(partition=partition)
        for cls in (FedAvg, FedNova):
            trainer = tiny_trainer(tmp_path, rounds=1, run_name=f"{cls.__name__}-{name}")
            trainer.fit(make(cls), data)
            states[cls, name] = trainer.global_state
    for key, value in states[FedAvg, "iid"].items():
        torch.testing.assert_close(states[FedNova, "iid"][key], value, rtol=0, atol=1e-6)
    assert any(not torch.allclose(states[FedNova, "dirichlet"][k], v, atol=1e-4)
               for k, v in states[FedAvg, "dirichlet"].items())
