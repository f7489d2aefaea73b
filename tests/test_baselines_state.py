"""Resume is exact, and two processes equal one, for the baselines that keep server state or
per-client buffers between rounds (SCAFFOLD's control variates, FedDyn's h and gradient state,
FedNova's second running sum, MOON's previous model)."""

from __future__ import annotations

import csv

import pytest
import torch

from fedlight.clients import CLIENTS
from fedlight.data.partitions.dirichlet import Dirichlet
from tests.conftest import tiny_data, tiny_trainer

METHODS = ["SCAFFOLD", "FedDyn", "FedNova", "MOON"]


def make(name):
    torch.manual_seed(0)
    return CLIENTS[name](backbone="mlp", num_classes=4, input_shape=(1, 8, 8), lr=0.1)


def rows(path):
    with open(path / "metrics.csv") as handle:
        return [{k: v for k, v in r.items() if k != "seconds"} for r in csv.DictReader(handle)]


@pytest.mark.parametrize("name", METHODS)
def test_resumed_run_equals_uninterrupted_run(name, tmp_path):
    data = tiny_data(partition=Dirichlet(beta=0.3, min_client_size=5))
    full = tiny_trainer(tmp_path, rounds=3, join_ratio=0.5, run_name="full")
    full.fit(make(name), data)
    tiny_trainer(tmp_path, rounds=2, join_ratio=0.5, run_name="resumed").fit(make(name), data)
    resumed = tiny_trainer(tmp_path, rounds=3, join_ratio=0.5, run_name="resumed")
    resumed.fit(make(name), data, ckpt_path="last")
    assert rows(tmp_path / "resumed") == rows(tmp_path / "full")
    for key, value in full.global_state.items():
        assert torch.equal(resumed.global_state[key], value), key
    for client_id, state in full.client_states.items():
        for key, value in state.items():
            assert torch.equal(resumed.client_states[client_id][key], value), (client_id, key)


@pytest.mark.parametrize("name", ["SCAFFOLD", "FedNova"])
def test_two_processes_equal_one(name, tmp_path):
    threads = torch.get_num_threads()
    data = tiny_data(partition=Dirichlet(beta=0.3, min_client_size=5))
    one = tiny_trainer(tmp_path, rounds=2, run_name="one", threads=1)
    one.fit(make(name), data)
    two = tiny_trainer(tmp_path, rounds=2, run_name="two", threads=1, devices=2,
                       strategy="ddp_fork")
    two.fit(make(name), data)
    torch.set_num_threads(threads)
    assert rows(tmp_path / "one") == rows(tmp_path / "two")
    for key, value in one.global_state.items():
        assert torch.equal(value, two.global_state[key]), key
    for key, value in one.server.message.get("control", {}).items():
        assert torch.equal(value, two.server.message["control"][key]), key
