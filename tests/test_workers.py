"""trainer.workers_per_device: several processes on one device give the run of one process."""

from __future__ import annotations

import csv

import pytest
import torch
from conftest import make_client, tiny_data, tiny_trainer

from fedlight.clients import CLIENTS


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def rows(summary):
    with open(f"{summary['run_dir']}/metrics.csv") as handle:
        return [{k: v for k, v in r.items() if k != "seconds"} for r in csv.DictReader(handle)]


def test_two_workers_on_one_cpu_device_equal_one_process(tmp_path):
    one = tiny_trainer(tmp_path, rounds=2, run_name="one", threads=1)
    two = tiny_trainer(tmp_path, rounds=2, run_name="two", threads=1, devices=1,
                       workers_per_device=2, strategy="ddp_fork")
    assert two.fabric.world_size == 2 and one.fabric.world_size == 1
    assert [d.type for d in two.fabric.strategy.parallel_devices] == ["cpu", "cpu"]
    first = one.fit(make_client(CLIENTS["GPFL"]), tiny_data())
    second = two.fit(make_client(CLIENTS["GPFL"]), tiny_data())
    assert rows(first) == rows(second)
    for key, value in one.global_state.items():
        assert torch.equal(value, two.global_state[key]), key


@pytest.mark.parametrize("bad", [0, -2])
def test_bad_workers_per_device_is_refused(tmp_path, bad):
    with pytest.raises(ValueError, match=f"workers_per_device must be at least 1, got {bad}"):
        tiny_trainer(tmp_path, workers_per_device=bad)
