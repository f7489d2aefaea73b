"""FedDF: zero distillation steps is FedAvg; the teacher is the mean of the reported models'
logits; distillation moves the averaged model towards that teacher; the public set."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fedlight.clients import FedAvg, FedDF
from fedlight.core.rules import Report, ServerContext, SingleProcess
from tests.conftest import make_client, tiny_data, tiny_trainer


def rule_with_reports(steps: int = 30):
    """An EnsembleDistillation over a public set and two different client states."""
    client = make_client(FedDF, distill_steps=steps, distill_lr=0.001, distill_batch_size=32)
    public = torch.randn(32, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    rule = client.configure_server()
    rule.setup(client.shared_state(), ServerContext(2, 1, 1.0, public_inputs=public))
    states = [make_client(FedAvg).shared_state()]
    torch.manual_seed(5)
    states.append({k: v + 0.3 * torch.randn_like(v) if v.is_floating_point() else v
                   for k, v in states[0].items()})
    rule.begin_round(0)
    for client_id, state in enumerate(states):
        rule.add(Report(client_id, state, weight=1.0 + client_id))
    return rule, client, public, states


def logits(client, state, x):
    client.load_state_dict(state, strict=False)
    client.eval()
    with torch.no_grad():
        return client.global_forward(x)


def test_teacher_is_the_mean_of_the_reported_models_logits():
    rule, client, public, states = rule_with_reports()
    expected = (logits(client, states[0], public) + logits(client, states[1], public)) / 2
    assert torch.allclose(rule.logits.mean()["logits"].float(), expected, atol=1e-5)


def test_distillation_moves_the_average_towards_the_ensemble():
    rule, client, public, states = rule_with_reports()
    teacher = F.softmax(rule.logits.mean()["logits"].float(), dim=-1)
    mean = rule.total.mean()

    def kl(state):
        student = F.log_softmax(logits(client, state, public), dim=-1)
        return float(F.kl_div(student, teacher, reduction="batchmean"))

    rule.end_round(SingleProcess())
    assert kl(rule.global_state) < 0.5 * kl(mean)


def test_zero_distillation_steps_is_fedavg_bit_for_bit(tmp_path):
    states = []
    for name, cls, options in (("fedavg", FedAvg, {}), ("feddf", FedDF, {"distill_steps": 0})):
        trainer = tiny_trainer(tmp_path, rounds=2, run_name=name)
        trainer.fit(make_client(cls, **options), tiny_data())
        states.append(trainer.global_state)
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])


def test_a_run_distills_on_the_public_set_and_differs_from_fedavg(tmp_path):
    finals = []
    for name, steps in (("zero", 0), ("distilled", 5)):
        trainer = tiny_trainer(tmp_path, rounds=1, run_name=name)
        trainer.fit(make_client(FedDF, distill_steps=steps), tiny_data(public_samples=20))
        finals.append(trainer.global_state["model.head.weight"])
    assert not torch.equal(*finals)


def test_public_set_is_seeded_unlabeled_and_bounded():
    data = tiny_data(public_samples=10)
    data.setup("fit")
    first, second = data.public_inputs(), data.public_inputs()
    assert first.shape[0] == 10 and torch.equal(first, second)
    assert tiny_data().public_inputs() is None
    with pytest.raises(ValueError, match="public_samples must be >= 0"):
        tiny_data(public_samples=-1)
    too_many = tiny_data(public_samples=10**6)
    too_many.setup("fit")
    with pytest.raises(ValueError, match="exceeds the global test set"):
        too_many.public_inputs()


def test_feddf_needs_a_public_set_and_refuses_bad_settings(tmp_path):
    with pytest.raises(ValueError, match="data.public_samples"):
        tiny_trainer(tmp_path, rounds=1).fit(make_client(FedDF), tiny_data())
    for bad in ({"distill_steps": -1}, {"distill_lr": 0.0}, {"distill_batch_size": 0},
                {"temperature": 0.0}):
        with pytest.raises(ValueError):
            make_client(FedDF, **bad)
