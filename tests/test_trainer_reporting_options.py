"""Trainer options a sweep relies on: the W&B group of a run and MAP's evaluation protocol
for any method."""

from __future__ import annotations

import pytest

from fedlight.clients import MAP, FedAvg
from tests.conftest import make_client, tiny_data, tiny_trainer


def test_wandb_group_defaults_to_method_and_setting_and_can_be_named(tmp_path):
    default = tiny_trainer(tmp_path, rounds=1, run_name="a")
    default.fit(make_client(FedAvg), tiny_data())
    named = tiny_trainer(tmp_path, rounds=1, run_name="b", wandb_group="my-sweep")
    named.fit(make_client(FedAvg), tiny_data())
    assert default.run.writer.group == "FedAvg-synthetic-iid"
    assert named.run.writer.group == "my-sweep"


def test_evaluate_after_local_training_applies_maps_protocol_to_any_method(tmp_path):
    stored = tiny_trainer(tmp_path, rounds=1, run_name="stored")
    stored.fit(make_client(FedAvg), tiny_data())
    after = tiny_trainer(tmp_path, rounds=1, run_name="after", evaluate_after_local_training=True)
    client = make_client(FedAvg)
    after.fit(client, tiny_data())
    assert client.evaluate_after_local_training
    # scored right after local training, before aggregation: not the global model's accuracy
    assert after.history[-1]["personalized_accuracy"] != stored.history[-1][
        "personalized_accuracy"]
    kept = tiny_trainer(tmp_path, rounds=1, run_name="map")
    map_client = make_client(MAP)
    kept.fit(map_client, tiny_data())
    assert map_client.evaluate_after_local_training  # None keeps the method's own choice


def test_a_run_cannot_resume_under_another_evaluation_protocol(tmp_path):
    tiny_trainer(tmp_path, rounds=1, run_name="r", evaluate_after_local_training=True).fit(
        make_client(FedAvg), tiny_data())
    resumed = tiny_trainer(tmp_path, rounds=2, run_name="r")
    with pytest.raises(ValueError, match="evaluate_after_local_training: True -> None"):
        resumed.fit(make_client(FedAvg), tiny_data(), ckpt_path="last")
