"""Server rules against values computed by hand on tiny states, their reductions to FedAvg, DP
around a server optimizer, resume of every rule, and the override mechanism."""

from __future__ import annotations

import math

import pytest
import torch

from fedlight.clients import FedAvg
from fedlight.clients.fedproto import PrototypeMean
from fedlight.core.rules import Report, ServerContext, SingleProcess
from fedlight.federation.build import resolve_rule
from fedlight.server import (
    CoordinateMedian,
    DPFedAvg,
    FedAdagrad,
    FedAdam,
    FedAvgM,
    FedYogi,
    Krum,
    TrimmedMean,
    WeightedMean,
)
from tests.conftest import make_client, tiny_data, tiny_trainer

CONTEXT = ServerContext(num_clients=5, rounds=10, join_ratio=1.0)
UNIFORM = ServerContext(num_clients=5, rounds=10, join_ratio=1.0, weighting="uniform")


def started(rule, initial=(0.0, 0.0), context=CONTEXT):
    rule.setup({"w": torch.tensor(initial)}, context)
    return rule


def run_round(rule, states, weights=None, round_idx=0):
    """One round with reports ``states`` (lists of floats); returns the new ``w``."""
    weights = weights or [1.0] * len(states)
    rule.begin_round(round_idx)
    for client_id, (state, weight) in enumerate(zip(states, weights, strict=True)):
        rule.add(Report(client_id, {"w": torch.tensor(state)}, weight))
    rule.end_round(SingleProcess())
    return rule.global_state["w"].tolist()


# ===================================================================== mean and FedAvgM
def test_weighted_mean_weighs_by_report_weight():
    rule = started(WeightedMean())
    assert run_round(rule, [[1.0, 2.0], [3.0, -2.0]], [1.0, 3.0]) == [2.5, -1.0]


def test_fedavgm_accumulates_momentum_over_rounds():
    rule = started(FedAvgM(lr=2.0, momentum=0.5))
    # round 1: Delta = (2.5, -1), m = Delta, x = 0 + 2 m
    assert run_round(rule, [[1.0, 2.0], [3.0, -2.0]], [1.0, 3.0]) == [5.0, -2.0]
    # round 2: Delta = (1, 1) - (5, -2) = (-4, 3); m = 0.5 (2.5, -1) + Delta = (-2.75, 2.5)
    assert run_round(rule, [[1.0, 1.0]], round_idx=1) == [-0.5, 3.0]


def test_fedavgm_with_momentum_0_and_lr_1_is_fedavg_bit_for_bit(tmp_path):
    states = []
    for name, server in (("mean", None), ("avgm", FedAvgM(lr=1.0, momentum=0.0))):
        trainer = tiny_trainer(tmp_path, rounds=2, run_name=name)
        trainer.fit(make_client(FedAvg), tiny_data(), server=server)
        states.append(trainer.global_state)
    assert states[0].keys() == states[1].keys()
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])


# ===================================================================== adaptive optimizers
def adaptive_by_hand(delta, beta1, tau, lr, v):
    m = (1 - beta1) * delta
    return lr * m / (math.sqrt(v) + tau)


@pytest.mark.parametrize(("cls", "second_moment"), [
    (FedAdam, lambda v0, d2, b2: b2 * v0 + (1 - b2) * d2),
    (FedYogi, lambda v0, d2, b2: v0 - (1 - b2) * d2 * math.copysign(1.0, v0 - d2)),
    (FedAdagrad, lambda v0, d2, b2: v0 + d2),
], ids=["adam", "yogi", "adagrad"])
def test_adaptive_rules_take_reddi_algorithm_2_first_step(cls, second_moment):
    beta1, beta2, tau, lr = 0.5, 0.75, 0.1, 0.3
    kwargs = dict(lr=lr, beta1=beta1, tau=tau)
    if cls is not FedAdagrad:
        kwargs["beta2"] = beta2
    rule = started(cls(**kwargs))
    result = run_round(rule, [[1.0, 2.0], [3.0, -2.0]], [1.0, 3.0])
    for value, delta in zip(result, [2.5, -1.0], strict=True):
        v = second_moment(tau**2, delta**2, beta2)
        assert value == pytest.approx(adaptive_by_hand(delta, beta1, tau, lr, v), rel=1e-6)


def test_adam_with_beta1_beta2_0_and_lr_tau_approaches_fedavg_as_tau_grows():
    # v = Delta^2, so the step is tau Delta / (|Delta| + tau) -> Delta
    target = [2.5, -1.0]
    big = started(FedAdam(lr=1e4, beta1=0.0, beta2=0.0, tau=1e4))
    small = started(FedAdam(lr=1e-3, beta1=0.0, beta2=0.0, tau=1e-3))
    assert run_round(big, [[1.0, 2.0], [3.0, -2.0]], [1.0, 3.0]) == pytest.approx(target, rel=1e-3)
    assert run_round(small, [[1.0, 2.0], [3.0, -2.0]], [1.0, 3.0]) != pytest.approx(target, rel=0.1)


def test_server_optimizers_average_integer_buffers_plainly():
    rule = FedAdam(lr=0.5)
    rule.setup({"n": torch.tensor(0)}, CONTEXT)
    rule.begin_round(0)
    for client_id, n in enumerate((4, 6)):
        rule.add(Report(client_id, {"n": torch.tensor(n)}, 1.0))
    rule.end_round(SingleProcess())
    assert rule.global_state["n"].item() == 5 and rule.global_state["n"].dtype == torch.int64


@pytest.mark.parametrize("bad", [
    lambda: FedAvgM(momentum=1.0), lambda: FedAdam(lr=0.0), lambda: FedYogi(beta2=1.5),
    lambda: FedAdagrad(tau=0.0), lambda: TrimmedMean(trim_ratio=0.5), lambda: Krum(byzantine=-1),
    lambda: Krum(selected=0)])
def test_bad_rule_settings_are_refused(bad):
    with pytest.raises(ValueError):
        bad()


# ===================================================================== robust rules
def test_coordinate_median_odd_and_even_counts():
    rule = started(CoordinateMedian())
    assert run_round(rule, [[1.0, 5.0], [2.0, -1.0], [10.0, 0.0]]) == [2.0, 0.0]
    assert run_round(rule, [[1.0, 0.0], [2.0, 0.0], [3.0, 0.0], [4.0, 8.0]], round_idx=1) == [
        2.5, 0.0]


def test_trimmed_mean_drops_the_extremes_of_each_coordinate():
    rule = started(TrimmedMean(trim_ratio=0.25))
    # per coordinate: drop 1 largest and 1 smallest of 4, average the middle two
    assert run_round(rule, [[1.0, -50.0], [2.0, 0.0], [3.0, 2.0], [100.0, 4.0]]) == [2.5, 1.0]


def test_krum_keeps_the_report_closest_to_its_neighbours():
    points = [[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [3.0, 0.0], [100.0, 0.0]]
    # n - f - 2 = 2 nearest: scores 0: 1+4, 1: 1+1, 2: 1+1, 3: 1+4, 100: 97^2+98^2
    assert run_round(started(Krum(byzantine=1)), points) == [1.0, 0.0]
    multi = started(Krum(byzantine=1, selected=3))  # clients 1, 2, then 0 (ties keep order)
    # weighted by 1, 2, 1: (1 + 2 * 2 + 0) / 4
    assert run_round(multi, points, [1.0, 1.0, 2.0, 1.0, 1.0]) == [1.25, 0.0]


def test_krum_needs_enough_reports():
    with pytest.raises(ValueError, match="at least 5 reports"):
        run_round(started(Krum(byzantine=1)), [[0.0, 0.0]] * 4)


def test_gathering_rules_keep_a_copy_of_each_report():
    rule = started(CoordinateMedian())
    rule.begin_round(0)
    state = {"w": torch.tensor([1.0, 1.0])}
    rule.add(Report(0, state, 1.0))
    state["w"].add_(5.0)  # the live module's tensors change when the next client trains
    rule.end_round(SingleProcess())
    assert rule.global_state["w"].tolist() == [1.0, 1.0]


# ===================================================================== DP around FedAdam
def test_dp_clips_each_update_before_fedadam_steps():
    adam = dict(lr=0.3, beta1=0.5, beta2=0.75, tau=0.1)
    wrapped = started(DPFedAvg(clip_norm=1.0, rule=FedAdam(**adam)), context=UNIFORM)
    plain = started(FedAdam(**adam))
    result = run_round(wrapped, [[3.0, 4.0], [0.3, 0.4]])
    # update norms 5 and 0.5: the first is scaled to norm 1, the second kept
    expected = run_round(plain, [[0.6, 0.8], [0.3, 0.4]])
    assert result == pytest.approx(expected, rel=1e-6)
    assert result != pytest.approx(run_round(started(FedAdam(**adam)), [[3.0, 4.0], [0.3, 0.4]]))


def test_dp_noise_around_fedadam_is_seeded_and_reports_epsilon():
    def noisy(seed):
        rule = DPFedAvg(clip_norm=1.0, noise_multiplier=1.0, rule=FedAdam(lr=0.3))
        started(rule, context=ServerContext(5, 10, 1.0, seed=seed, weighting="uniform"))
        return run_round(rule, [[0.3, 0.4]] * 5), rule

    first, rule = noisy(0)
    assert first == noisy(0)[0] and first != noisy(1)[0]
    clean = run_round(started(FedAdam(lr=0.3)), [[0.3, 0.4]] * 5)
    assert first != pytest.approx(clean)
    assert rule.round_metrics(1)["dp_epsilon"] > 0


def test_dp_needs_uniform_weighting():
    with pytest.raises(ValueError, match="weighting: uniform"):
        started(DPFedAvg(clip_norm=1.0, rule=FedAdam()))


# ===================================================================== resume and overrides
@pytest.mark.parametrize("make_rule", [
    WeightedMean, lambda: FedAvgM(lr=0.7), lambda: FedAdam(lr=0.1), lambda: FedYogi(lr=0.1),
    lambda: FedAdagrad(lr=0.1), CoordinateMedian, TrimmedMean, lambda: Krum(byzantine=0),
    lambda: DPFedAvg(clip_norm=1.0, noise_multiplier=0.5, rule=FedAdam(lr=0.1))],
    ids=["mean", "avgm", "adam", "yogi", "adagrad", "median", "trimmed", "krum", "dp-adam"])
def test_rule_state_dict_resumes_exactly(make_rule):
    reports = [[[1.0, 2.0], [3.0, -2.0], [0.5, 0.5]], [[2.0, 2.0], [1.0, 0.0], [0.0, 1.0]],
               [[0.0, 3.0], [1.0, 1.0], [2.0, -1.0]]]
    uninterrupted = started(make_rule(), context=UNIFORM)
    for r in range(3):
        expected = run_round(uninterrupted, reports[r], round_idx=r)
    first = started(make_rule(), context=UNIFORM)
    for r in range(2):
        run_round(first, reports[r], round_idx=r)
    resumed = started(make_rule(), context=UNIFORM)
    resumed.load_state_dict(first.state_dict())
    assert run_round(resumed, reports[2], round_idx=2) == expected


def test_a_method_specific_rule_cannot_be_replaced():
    with pytest.raises(ValueError, match="PrototypeMean"):
        resolve_rule(PrototypeMean(), FedAdam(), "FedProto")


def test_trainer_runs_the_config_rule_and_names_it(tmp_path):
    trainer = tiny_trainer(tmp_path, rounds=2)
    summary = trainer.fit(make_client(FedAvg), tiny_data(), server=FedAdam(lr=0.01))
    assert summary["server"] == "FedAdam" and isinstance(trainer.server, FedAdam)


# ===================================================================== per-client downloads
class OffsetPerClient(WeightedMean):
    """A server-side personalization stand-in: client i starts from global + i."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: dict[int, dict[str, torch.Tensor]] = {}
        self.reports: dict[int, dict[str, torch.Tensor]] = {}

    def download(self, client_id):
        state = {k: v + float(client_id) for k, v in self.global_state.items()}
        self.sent.setdefault(client_id, state)  # the first: round 1's training start
        return state, self.message

    def add(self, report):
        self.reports[report.client_id] = report.state
        super().add(report)


def test_each_client_trains_from_its_own_download(tmp_path):
    trainer = tiny_trainer(tmp_path, rounds=1, verbose=False)
    trainer.fit(make_client(FedAvg, lr=1e-6), tiny_data(), server=OffsetPerClient())
    rule = trainer.server  # the run's own copy of the rule
    assert sorted(rule.reports) == [0, 1, 2, 3]
    for client_id, state in rule.reports.items():
        sent = rule.sent[client_id]
        shift = torch.cat([(v - sent[k]).flatten() for k, v in state.items()])
        # at lr 1e-6 one local epoch moves a weight by far less than the 1-apart starts
        assert shift.abs().max() < 0.1, client_id
