"""benchmarks/gpu.py without a GPU (--smoke): every section writes its table and raw file
from a packed data file, batched runs train as the loop does, and a section that fails
leaves the others' tables in place."""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from fedlight.data.packed import write_packed

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def gpu(monkeypatch):
    """benchmarks/gpu.py as a module (it imports floor.py beside it)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("gpu_script", BENCHMARKS / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_script", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def packed(tmp_path):
    """A packed file of 200 random 3x32x32 uint8 images over 10 classes."""
    generator = torch.Generator().manual_seed(0)
    record = {"x_train": torch.randint(0, 256, (200, 3, 32, 32), dtype=torch.uint8,
                                       generator=generator),
              "y_train": torch.arange(200) % 10, "classes": [str(c) for c in range(10)]}
    return write_packed(tmp_path / "tiny.pt", record)


def rows(path):
    with open(path) as handle:
        return list(csv.DictReader(handle))


def test_a_smoke_run_writes_every_table_and_a_failing_section_keeps_the_others(
        gpu, packed, tmp_path, monkeypatch):
    def broken(*args):
        raise RuntimeError("no floor today")

    monkeypatch.setattr(gpu, "floor_section", broken)
    out = tmp_path / "out"
    gpu.main(["--smoke", "--out", str(out), "--data", str(packed), "--methods", "FedAvg",
              "MAP"])
    text = (out / "gpu.md").read_text()
    assert "failed: RuntimeError: no floor today" in text
    assert "not run (no --pfllib)" in text
    assert "### cnn, batch 10 (3 clients, 90 training images a round)" in text
    assert "### cnn_bn, batch 16" in text and "## Peak GPU memory" in text
    rounds = rows(out / "rounds.csv")
    assert {(r["workload"], r["method"], r["mode"]) for r in rounds} == {
        ("cnn, batch 10", m, mode) for m in ("FedAvg", "MAP") for mode in ("loop", "batched")
    } | {("cnn_bn, batch 16", "FedAvg", mode) for mode in ("loop", "batched")}
    for row in rounds:
        assert float(row["s / round"]) > 0 and float(row["eval s"]) > 0
        assert row["engine"] == row["mode"]
        if row["mode"] == "batched":  # equal to the loop's global model on a CPU
            assert float(row["max |global - loop|"]) < 1e-5 and row["group"] == "3"
    assert [r["clients / round"] for r in rows(out / "memory.csv")] == ["2", "3", "2"]


def test_the_floor_section_times_each_backbone_and_gives_the_ratio(gpu, packed, tmp_path):
    out = tmp_path / "out"
    gpu.main(["--smoke", "--out", str(out), "--data", str(packed), "--sections", "floor",
              "cnn", "--methods", "FedAvg"])
    floors = {r["backbone"]: float(r["samples / s"]) for r in rows(out / "floor.csv")}
    assert set(floors) == {"cnn", "cnn_bn"} and all(v > 0 for v in floors.values())
    for row in rows(out / "rounds.csv"):
        floor = float(row["train samples / round"]) / floors["cnn"]
        assert float(row["x floor"]) == pytest.approx(float(row["s / round"]) / floor)


def test_runs_past_the_budget_are_skipped_and_said_so(gpu, packed, tmp_path):
    out = tmp_path / "out"
    gpu.main(["--smoke", "--out", str(out), "--data", str(packed), "--sections", "cnn",
              "--methods", "FedAvg", "--budget", "0"])
    assert {r["note"] for r in rows(out / "rounds.csv")} == {"skipped (time budget)"}


def test_missing_data_is_a_one_line_error(gpu, tmp_path):
    with pytest.raises(SystemExit, match="no packed data at .*pack_data.py cifar10"):
        gpu.main(["--smoke", "--out", str(tmp_path), "--data", str(tmp_path / "none.pt")])
