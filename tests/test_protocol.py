"""The round protocol as the simulator drives it: server rules fresh for every run, a trainer
reusable after test / validate and after a run in forked processes, weights through the one
aggregation_weight, per-class counts kept on the clients when asked, the engine contract."""

import math

import pytest
import torch

from fedlight.clients import FedAvg
from fedlight.core.messages import ClientFailure
from fedlight.core.seeding import drop_clients
from fedlight.federation.engines.sequential import SequentialEngine
from fedlight.federation.protocol import RoundProtocol
from fedlight.server import FedAdam
from fedlight.server.mean import WeightedMean
from tests.conftest import make_client, tiny_data, tiny_trainer


def _states_equal(a, b):
    assert set(a) == set(b)
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_one_server_rule_object_passed_to_two_runs_gives_the_same_result(tmp_path):
    rule = FedAdam(lr=0.05)
    first = tiny_trainer(tmp_path, rounds=3, run_name="a")
    first.fit(make_client(FedAvg), tiny_data(), server=rule)
    second = tiny_trainer(tmp_path, rounds=3, run_name="b")
    second.fit(make_client(FedAvg), tiny_data(), server=rule)
    _states_equal(first.global_state, second.global_state)
    assert first.server is not rule and first.server.moments  # each run used its own copy


def test_fit_after_test_reinitializes_the_model_again(tmp_path):
    trainer = tiny_trainer(tmp_path, rounds=2, run_name="run")
    trainer.fit(make_client(FedAvg), tiny_data())
    first = dict(trainer.global_state)
    trainer.test(make_client(FedAvg), tiny_data())
    assert trainer.reinitialize
    other = make_client(FedAvg)
    with torch.no_grad():  # other weights: only a re-initialization from seed gives the same run
        for parameter in other.parameters():
            parameter.add_(1.0)
    trainer.fit(other, tiny_data())
    _states_equal(first, trainer.global_state)


class _FailsInRoundTwo(FedAvg):
    def on_round_start(self, round_idx, message):
        if round_idx == 1 and self.context.client_id == 1:
            raise RuntimeError("client 1 broke")
        super().on_round_start(round_idx, message)


def test_a_client_exception_in_the_simulator_stops_the_run_and_keeps_its_folder(tmp_path):
    trainer = tiny_trainer(tmp_path, rounds=3, run_name="run", checkpoint_every=5)
    with pytest.raises(RuntimeError, match="client 1 broke"):
        trainer.fit(make_client(_FailsInRoundTwo), tiny_data())
    assert (tmp_path / "run" / "metrics.csv").read_text().count("\n") == 2  # header + round 1


def test_without_shared_class_counts_the_scores_hold_none_and_macro_f1_is_empty(tmp_path):
    trainer = tiny_trainer(tmp_path, rounds=1, share_class_counts=False)
    trainer.fit(make_client(FedAvg), tiny_data())
    row = trainer.history[-1]
    assert math.isnan(row["personalized_macro_f1"])
    assert not math.isnan(row["personalized_accuracy"])
    assert all(not s.class_counts for scores in trainer.last_client_scores.values()
               for s in scores.values())
    # The server's own test set is not a client's: the global macro-F1 is that of a run that
    # shares the counts (a number; approx fails on NaN).
    sharing = tiny_trainer(tmp_path / "sharing", rounds=1)
    sharing.fit(make_client(FedAvg), tiny_data())
    assert row["global_macro_f1"] == pytest.approx(sharing.history[-1]["global_macro_f1"])


class _FailingEngine:
    """SequentialEngine, except that one client's work never comes back."""

    def __init__(self, engine, lost):
        self.engine, self.lost, self.holds_clients = engine, lost, True

    def attach(self, trainer):
        pass

    def train(self, tasks):
        for outcome in self.engine.train(tasks):
            yield (ClientFailure(outcome.client_id, "lost") if outcome.client_id == self.lost
                   else outcome)

    def evaluate(self, round_idx, downloads):
        return self.engine.evaluate(round_idx, downloads)


def test_a_failure_reported_by_an_engine_counts_as_dropped_like_drop_rate(tmp_path,
                                                                          monkeypatch):
    dropped = tiny_trainer(tmp_path, rounds=1, run_name="drop", drop_rate=0.25)
    dropped.fit(make_client(FedAvg), tiny_data())
    (lost,) = drop_clients([0, 1, 2, 3], 0.25, 0, 0)
    original = RoundProtocol.__init__

    def with_failing_engine(self, rule, engine, *args, **kwargs):
        original(self, rule, _FailingEngine(engine, lost), *args, **kwargs)

    monkeypatch.setattr(RoundProtocol, "__init__", with_failing_engine)
    trainer = tiny_trainer(tmp_path, rounds=1, run_name="lost")
    trainer.fit(make_client(FedAvg), tiny_data())
    assert trainer.history[-1]["dropped"] == dropped.history[-1]["dropped"] == 1
    _states_equal(trainer.global_state, dropped.global_state)
    assert trainer.history[-1]["train_loss"] == pytest.approx(dropped.history[-1]["train_loss"])


def test_weights_follow_trainer_weighting(tmp_path):
    seen = []

    class Recording(WeightedMean):
        def add(self, report):
            seen.append(report.weight)
            super().add(report)

    trainer = tiny_trainer(tmp_path, rounds=1, weighting="uniform")
    trainer.fit(make_client(FedAvg), tiny_data(), server=Recording())
    assert seen == [1.0] * 4
    seen.clear()
    trainer = tiny_trainer(tmp_path, rounds=1, weighting="samples")
    trainer.fit(make_client(FedAvg), tiny_data(), server=Recording())
    assert seen == [float(len(trainer.datamodule.client_train(i)[1])) for i in range(4)]


def test_the_simulator_engine_is_the_default(tmp_path):
    trainer = tiny_trainer(tmp_path, rounds=1)
    summary = trainer.fit(make_client(FedAvg), tiny_data())
    assert isinstance(trainer.engine, SequentialEngine) and summary["engine"] == "simulator"


def test_after_a_forked_run_the_trainer_reports_its_folder_and_client_states(tmp_path):
    threads = torch.get_num_threads()
    trainer = tiny_trainer(tmp_path, rounds=1, run_name="forked", threads=1, devices=2,
                           strategy="ddp_fork")
    try:
        trainer.fit(make_client(FedAvg, extra_private=["model.head.*"]), tiny_data())
    finally:
        torch.set_num_threads(threads)
    assert trainer.run_dir == tmp_path / "forked"
    states = trainer.client_states
    assert sorted(states) == [0, 1, 2, 3]
    assert all(any(".head." in key for key in state) for state in states.values())


def test_test_scores_clients_as_fit_does_without_shared_class_counts(tmp_path):
    """fedlight test scores the clients through the same runtime as fit: without shared class
    counts its personalized macro-F1 is empty (NaN) too, the accuracies are fit's."""
    trainer = tiny_trainer(tmp_path, rounds=1, share_class_counts=False)
    trainer.fit(make_client(FedAvg), tiny_data())
    row = trainer.history[-1]
    metrics = trainer.test(make_client(FedAvg), tiny_data())
    assert math.isnan(row["personalized_macro_f1"]) and math.isnan(metrics["personalized_macro_f1"])
    assert metrics["personalized_accuracy"] == pytest.approx(row["personalized_accuracy"])
