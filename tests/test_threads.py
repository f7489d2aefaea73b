"""trainer.threads: the robust default (one thread per CPU process), explicit counts, None."""

from __future__ import annotations

import pytest
import torch
from conftest import make_client, tiny_data, tiny_trainer

from fedlight.clients import CLIENTS, FedAvg
from fedlight.federation.options import check_threads
from fedlight.federation.processes import cpus as sensing
from fedlight.federation.processes.cpus import apply_threads
from fedlight.federation.processes.cpus import busy_cores as measured_busy_cores


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_default_is_auto_and_runs_one_thread_on_cpu(tmp_path):
    torch.set_num_threads(2)
    trainer = tiny_trainer(tmp_path, rounds=1, checkpoint_every=1, verbose=False)
    assert trainer.threads == "auto"
    trainer.fit(make_client(CLIENTS["FedAvg"]), tiny_data())
    assert torch.get_num_threads() == 1


@pytest.mark.parametrize(("threads", "expected"), [(2, 2), (1, 1), (None, 2), ("auto", 1)])
def test_apply_threads_on_cpu(threads, expected):
    torch.set_num_threads(2)
    apply_threads(threads, torch.device("cpu"))
    assert torch.get_num_threads() == expected


def test_auto_leaves_torch_default_on_an_accelerator():
    torch.set_num_threads(2)
    apply_threads("auto", torch.device("cuda", 0))  # a device object only: no GPU needed
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("bad", [0, -1, "many", "2", True, 1.5])
def test_bad_threads_raise_naming_the_value(tmp_path, bad):
    with pytest.raises(ValueError, match="threads must be 'auto', None or an integer"):
        tiny_trainer(tmp_path, threads=bad)
    with pytest.raises(ValueError, match=repr(bad).replace("(", r"\(")):
        check_threads(bad)


@pytest.mark.parametrize("cores, busy, expected", [
    (2, 0.1, 2), (2, 0.9, 1), (2, 1.6, 0), (8, 2.2, 6), (4, 9.0, 0)])
def test_idle_cores_are_the_cores_not_busy_now(monkeypatch, cores, busy, expected):
    monkeypatch.setattr(sensing, "cpu_cores", lambda: cores)
    monkeypatch.setattr(sensing, "busy_cores", lambda window=0.25: busy)
    monkeypatch.setattr(sensing.os, "getloadavg", lambda: (0.0, 0.0, 0.0))  # not read
    assert sensing.idle_cores() == expected


def test_idle_cores_fall_back_to_the_load_average_without_proc_stat(monkeypatch):
    monkeypatch.setattr(sensing, "cpu_cores", lambda: 4)
    monkeypatch.setattr(sensing, "busy_cores", lambda window=0.25: None)
    monkeypatch.setattr(sensing.os, "getloadavg", lambda: (2.8, 0.0, 0.0))
    assert sensing.idle_cores() == 1


def stat_line(user: int, idle: int) -> str:
    """The first line of /proc/stat: user nice system idle iowait irq softirq steal guest."""
    return f"cpu  {user} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"


@pytest.mark.parametrize("user_delta, idle_delta, cpus, expected", [
    (50, 50, 2, 1.0), (0, 100, 2, 0.0), (100, 0, 4, 4.0), (30, 90, 8, 2.0)])
def test_busy_cores_are_the_busy_share_of_proc_stat_over_the_window(
        monkeypatch, tmp_path, user_delta, idle_delta, cpus, expected):
    stat = tmp_path / "stat"
    stat.write_text(stat_line(1000, 5000))
    monkeypatch.setattr(sensing, "PROC_STAT", stat)
    monkeypatch.setattr(sensing.os, "cpu_count", lambda: cpus)
    # the counters move while busy_cores waits
    monkeypatch.setattr(sensing.time, "sleep", lambda seconds: stat.write_text(
        stat_line(1000 + user_delta, 5000 + idle_delta)))
    assert measured_busy_cores() == pytest.approx(expected)


def test_busy_cores_is_none_without_proc_stat(monkeypatch, tmp_path):
    monkeypatch.setattr(sensing, "PROC_STAT", tmp_path / "missing")
    monkeypatch.setattr(sensing.time, "sleep", lambda seconds: None)
    assert measured_busy_cores() is None


def test_busy_cores_reads_this_machine():
    if not sensing.PROC_STAT.exists():
        pytest.skip("no /proc/stat on this platform")
    busy = measured_busy_cores(window=0.05)
    assert busy is not None and 0 <= busy <= (sensing.os.cpu_count() or 1) + 1e-9


@pytest.mark.parametrize("devices, world_size, device, noted", [
    ("auto", 1, "cpu", True), ("auto", 3, "cpu", True), ("auto", 4, "cpu", False),
    (1, 1, "cpu", False), (2, 2, "cpu", False), ("auto", 1, "cuda", False)])
def test_an_auto_cpu_run_that_found_busy_cores_says_so_in_one_line(monkeypatch, devices,
                                                                   world_size, device, noted):
    monkeypatch.setattr(sensing, "cpu_cores", lambda: 4)
    note = sensing.devices_note(devices, world_size, torch.device(device))
    assert (note is not None) == noted
    if noted:
        assert "\n" not in note and "4-core CPU" in note and "busy" in note
        assert f"runs {world_size} process" in note and "--trainer.devices N" in note


def test_the_note_is_printed_with_the_partition_table(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(sensing, "cpu_cores", lambda: 4)
    monkeypatch.setattr(sensing, "busy_cores", lambda window=0.25: 3.2)  # one idle core
    trainer = tiny_trainer(tmp_path, rounds=1)
    assert trainer.fabric.world_size == 1
    trainer.fit(make_client(FedAvg), tiny_data())
    out = capsys.readouterr().out
    assert out.index("devices: auto runs 1 process on this 4-core CPU") > out.index("client")


@pytest.mark.parametrize("flags, precision, hinted", [
    ("fpu avx2 fma", "bf16-mixed", True), ("fpu avx2 fma", "bf16", True),
    ("fpu avx512f avx512_bf16", "bf16-mixed", False), ("fpu avx2", "32-true", False)])
def test_bf16_on_a_cpu_without_native_bfloat16_gets_a_one_line_hint(monkeypatch, tmp_path, flags,
                                                                     precision, hinted):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"flags\t: {flags}\n")
    real_path = sensing.Path
    monkeypatch.setattr(sensing, "Path",
                        lambda p: cpuinfo if p == "/proc/cpuinfo" else real_path(p))
    hint = sensing.precision_hint(precision, torch.device("cpu"))
    assert (hint is not None) == hinted
    if hinted:
        assert "\n" not in hint and "bf16-mixed" in hint and "32-true" in hint
