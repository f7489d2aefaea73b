"""benchmarks/gpu.py without a GPU (--smoke): every section writes its table and raw file
from a packed data file, batched runs train as the loop does, the measured run reports its
choice, a section that fails leaves the others' tables in place, and nothing runs past the
budget: runs that would not fit are skipped, the alarm cuts a section at its deadline, a
subprocess is killed there with every process it started, and the tables say so."""

from __future__ import annotations

import csv
import importlib.util
import os
import sys
import time
from pathlib import Path

import pytest
import torch

from fedlight.data.sources.packed import write_packed

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
    modes = ("loop", "batched", "measured")
    assert {(r["workload"], r["method"], r["mode"]) for r in rounds} == {
        ("cnn, batch 10", m, mode) for m in ("FedAvg", "MAP") for mode in modes
    } | {("cnn_bn, batch 16", "FedAvg", mode) for mode in modes}
    for row in rounds:
        assert float(row["s / round"]) > 0 and float(row["eval s"]) > 0 and row["note"] == ""
        if row["mode"] == "measured":  # its choice, and what it measured of each way
            assert row["engine"] == row["choice"] in ("loop", "batched")
            assert float(row["probe loop s/step"]) > 0 and float(row["probe batched s/step"]) > 0
        else:
            assert row["engine"] == row["mode"]
        if row["mode"] != "loop":  # equal to the loop's global model on a CPU
            assert float(row["max |global - loop|"]) < 1e-5
        if row["mode"] == "batched":
            assert row["group"] == "3"
    assert "- cnn, batch 10, MAP: measured chose" in text
    assert [r["clients / round"] for r in rows(out / "memory.csv")] == ["2", "3", "2"]
    assert "| floor |" in text and "failed: RuntimeError: no floor today" in text
    assert "| memory |" in text and "| complete |" in text


def test_the_floor_section_times_each_backbone_and_gives_the_ratio(gpu, packed, tmp_path):
    out = tmp_path / "out"
    gpu.main(["--smoke", "--out", str(out), "--data", str(packed), "--sections", "floor",
              "cnn", "--methods", "FedAvg"])
    floors = {r["backbone"]: float(r["samples / s"]) for r in rows(out / "floor.csv")}
    assert set(floors) == {"cnn", "cnn_bn"} and all(v > 0 for v in floors.values())
    for row in rows(out / "rounds.csv"):
        floor = float(row["train samples / round"]) / floors["cnn"]
        assert float(row["x floor"]) == pytest.approx(float(row["s / round"]) / floor)


def test_under_a_spent_budget_every_section_stops_and_still_writes_its_tables(
        gpu, packed, tmp_path):
    out = tmp_path / "out"
    gpu.main(["--smoke", "--out", str(out), "--data", str(packed), "--methods", "FedAvg",
              "--budget", "0", "--pfllib", str(tmp_path / "PFLlib")])
    assert {r["note"] for r in rows(out / "rounds.csv")} == {"skipped (time budget)"}
    assert {r["note"] for r in rows(out / "memory.csv")} == {"skipped (time budget)"}
    text = (out / "gpu.md").read_text()
    for heading in ("## Floor", "### cnn, batch 10", "### cnn_bn, batch 16",
                    "## fedlight (batched_clients: auto) against PFLlib", "## Peak GPU memory",
                    "## Sections (budget 0 s"):
        assert heading in text, heading
    # PFLlib's subprocess had no time at all: killed at once, the section says it was cut
    assert "No pair of processes ended." in text and "Section cut at its deadline" in text
    ended = {line.split(" | ")[0].strip("| "): line.split(" | ")[-1].strip(" |")
             for line in text.split("## Sections")[1].splitlines()[4:] if line}
    assert ended["pfllib"].startswith("cut at its deadline")
    assert ended["floor"] == "complete; 2 of 2 runs skipped (time budget)"
    assert ended["cnn"] == "complete; 3 of 3 runs skipped (time budget)"
    assert ended["memory"] == "complete; 3 of 3 runs skipped (time budget)"


def test_a_section_cut_at_its_deadline_keeps_its_rows_and_the_next_sections_run(
        gpu, packed, tmp_path, monkeypatch):
    original, calls = gpu.fit, []

    def fit(*args):  # the second run of the cnn section meets the deadline
        calls.append(args)
        if len(calls) == 2:
            raise gpu.Overrun
        return original(*args)

    monkeypatch.setattr(gpu, "fit", fit)
    out = tmp_path / "out"
    gpu.main(["--smoke", "--out", str(out), "--data", str(packed), "--sections", "cnn",
              "memory", "--methods", "FedAvg"])
    notes = [r["note"] for r in rows(out / "rounds.csv")]
    assert notes == ["", "cut (deadline)", "skipped (time budget)"]
    text = (out / "gpu.md").read_text()
    assert "Section cut at its deadline" in text
    assert ("| cnn |" in text and "| cut at its deadline" in text
            and "runs skipped (time budget)" in text)
    assert {r["note"] for r in rows(out / "memory.csv")} == {""}  # the next section ran


def test_the_alarm_cuts_the_block_at_its_deadline(gpu):
    with pytest.raises(gpu.Overrun):
        with gpu.alarm(0.05):
            for _ in range(1000):  # 10 s at most; the alarm comes after 0.05
                time.sleep(0.01)
    with gpu.alarm(60):  # a block that ends in time is left alone, and the alarm is off
        pass
    time.sleep(0.01)


def running(pid):
    """Whether process ``pid`` exists and is not a zombie (without /proc: whether a signal
    reaches it)."""
    if Path("/proc").is_dir():
        stat = Path(f"/proc/{pid}/stat")
        return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups are POSIX")
def test_a_subprocess_is_killed_at_its_deadline_with_the_processes_it_started(gpu, tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    script = ("import subprocess, sys, time; "
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
              f"open({str(pid_file)!r}, 'w').write(str(child.pid)); time.sleep(60)")
    started = time.monotonic()
    while True:  # the deadline after the grandchild started (its pid written)
        code = gpu.run_until([sys.executable, "-c", script], 3.0, tmp_path / "log.txt",
                             tmp_path, dict(os.environ))
        if pid_file.exists() or time.monotonic() - started > 60:
            break
    assert code is None and pid_file.exists()
    grandchild = int(pid_file.read_text())
    for _ in range(100):  # killed: gone, or a zombie its new parent has not reaped yet
        if not running(grandchild):
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the grandchild outlived the deadline")
    assert gpu.run_until([sys.executable, "-c", "pass"], 60, tmp_path / "log.txt", tmp_path,
                         dict(os.environ)) == 0


def test_missing_data_is_a_one_line_error(gpu, tmp_path):
    with pytest.raises(SystemExit, match="no packed data at .*pack_data.py cifar10"):
        gpu.main(["--smoke", "--out", str(tmp_path), "--data", str(tmp_path / "none.pt")])


def test_the_measured_choice_is_set_beside_the_fastest_round_of_the_ways_run(gpu):
    rows = [{"workload": "w", "method": "GPFL", "mode": "loop", "s / round": 2.0},
            {"workload": "w", "method": "GPFL", "mode": "batched", "s / round": 0.5},
            {"workload": "w", "method": "GPFL", "mode": "measured", "s / round": 0.6,
             "choice": "batched", "probe loop s/step": 0.002, "probe batched s/step": 0.001}]
    assert gpu.speedups(rows) == [
        "- w, GPFL: loop / batched 4.00x",
        "- w, GPFL: measured chose batched (s per client step: loop 0.002, batched 0.001); "
        "the fastest round of the ways run: batched"]
