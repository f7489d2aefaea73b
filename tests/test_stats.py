"""Partition statistics: exact counts, JSON-ready output, readable table, heatmap file."""

import json
from pathlib import Path

import numpy as np
import pytest

from fedlight.data.stats import format_stats_table, partition_stats, save_heatmap

TRAIN = [np.array([0, 0, 1, 2]), np.array([2, 2, 2]), np.array([1], dtype=np.int32)]
TEST = [np.array([0]), np.array([], dtype=np.int64), np.array([1, 1])]


def test_counts_sum_correctly() -> None:
    stats = partition_stats(TRAIN, TEST, num_classes=4)
    assert stats["num_clients"] == 3 and stats["num_classes"] == 4
    assert stats["total_train"] == 8 and stats["total_test"] == 3
    first = stats["clients"][0]
    assert first == {
        "client": 0,
        "train_samples": 4,
        "test_samples": 1,
        "train_label_counts": [2, 1, 1, 0],
        "test_label_counts": [1, 0, 0, 0],
    }
    for client in stats["clients"]:
        assert sum(client["train_label_counts"]) == client["train_samples"]
        assert sum(client["test_label_counts"]) == client["test_samples"]


def test_output_is_plain_json() -> None:
    stats = partition_stats(TRAIN, TEST, num_classes=4)
    assert json.loads(json.dumps(stats)) == stats
    assert all(type(n) is int for c in stats["clients"] for n in c["train_label_counts"])


def test_bad_input_is_rejected() -> None:
    with pytest.raises(ValueError, match="train labels for 3 clients but test labels for 2"):
        partition_stats(TRAIN, TEST[:2], num_classes=4)
    with pytest.raises(ValueError, match=r"client 0 has train label 2 outside 0\.\.1"):
        partition_stats(TRAIN, TEST, num_classes=2)


def test_table_lists_every_client() -> None:
    table = format_stats_table(partition_stats(TRAIN, TEST, num_classes=4))
    lines = table.splitlines()
    assert lines[0].split()[:4] == ["client", "train", "test", "classes"]
    assert lines[2].split()[:4] == ["0", "4", "1", "3"]  # client 0: 4 train, 1 test, 3 classes
    assert lines[3].split()[:4] == ["1", "3", "0", "1"]
    assert "3 clients, 4 classes; train 8" in table


def test_table_summarises_many_clients() -> None:
    rng = np.random.default_rng(0)
    labels = [rng.integers(0, 100, 50) for _ in range(200)]
    table = format_stats_table(partition_stats(labels, labels, num_classes=100), max_rows=10)
    assert "(190 clients not shown)" in table
    assert len(table.splitlines()) < 20
    assert "(+" in table  # 100 classes: the histogram names the largest classes only


def test_heatmap_is_written(tmp_path: Path) -> None:
    path = tmp_path / "run" / "partition.png"  # the folder does not exist yet
    save_heatmap(partition_stats(TRAIN, TEST, num_classes=4), path)
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 1000
