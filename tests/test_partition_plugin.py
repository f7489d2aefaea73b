"""A new partition scheme is one class (docs/extending.md, "A new partition scheme"): defined
anywhere, here in this test file, it registers and a config names it by its class name."""

import numpy as np
import yaml

from fedlight.config import read_config
from fedlight.data.partitions import PARTITIONS
from fedlight.data.partitions.base import Partition


class RoundRobin(Partition):
    """Sample i goes to client (i + offset) mod num_clients, whatever its label.

    Args:
        offset: the client of sample 0.
    """

    name = "round_robin"

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset

    def assign(self, labels, k, rng, ids):
        owner = (np.arange(len(labels)) + self.offset) % k
        return [np.flatnonzero(owner == client) for client in range(k)]


def test_round_robin_deals_samples_in_turn():
    parts = RoundRobin(offset=1).split(np.zeros(7, np.int64), 3, seed=0)
    assert [p.tolist() for p in parts] == [[2, 5], [0, 3, 6], [1, 4]]


def test_defining_the_class_registers_it():
    assert PARTITIONS["round_robin"] is RoundRobin
    assert RoundRobin(offset=2).record() == {
        "class_path": f"{__name__}.RoundRobin", "init_args": {"offset": 2}}


def test_a_config_names_the_new_scheme_by_its_class_name(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"class_path": "FedAvg", "init_args": {"backbone": "mlp"}},
        "data": {"source": {"class_path": "Synthetic",
                            "init_args": {"samples": 30, "shape": [4], "classes": 3}},
                 "partition": {"class_path": "RoundRobin", "init_args": {"offset": 1}},
                 "num_clients": 3},
        "trainer": {"accelerator": "cpu", "default_root_dir": str(tmp_path / "runs")}}))
    data = read_config(config).datamodule
    assert isinstance(data.partition, RoundRobin) and data.partition.offset == 1
    data.setup()
    assert [sorted([*s.train, *s.test]) for s in data.splits] == [list(range(c, 30, 3))
                                                                   for c in (2, 0, 1)]
