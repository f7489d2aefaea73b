"""trainer.threads: the robust default (one thread per CPU process), explicit counts, None."""

from __future__ import annotations

import pytest
import torch
from conftest import make_client, tiny_data, tiny_trainer

from fedlight.clients import CLIENTS, FedAvg
from fedlight.federation import launch
from fedlight.federation import precision as precision_module
from fedlight.federation.launch import apply_threads, check_threads


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


@pytest.mark.parametrize("cores, load, expected", [
    (2, 0.1, 2), (2, 0.9, 1), (2, 1.6, 0), (8, 2.2, 6), (4, 9.0, 0)])
def test_idle_cores_follow_the_load_average(monkeypatch, cores, load, expected):
    monkeypatch.setattr(launch, "cpu_cores", lambda: cores)
    monkeypatch.setattr(launch.os, "getloadavg", lambda: (load, load, load))
    assert launch.idle_cores() == expected


@pytest.mark.parametrize("devices, device, load, hinted", [
    (1, "cpu", 0.2, True), (1, "cpu", 1.0, False), ("auto", "cpu", 0.2, False),
    (2, "cpu", 0.2, False), (1, "cuda", 0.2, False)])
def test_a_one_process_cpu_run_on_idle_cores_gets_a_one_line_hint(monkeypatch, devices, device,
                                                                   load, hinted):
    monkeypatch.setattr(launch, "cpu_cores", lambda: 2)
    monkeypatch.setattr(launch.os, "getloadavg", lambda: (load, load, load))
    hint = launch.devices_hint(devices, torch.device(device))
    assert (hint is not None) == hinted
    if hinted:
        assert "\n" not in hint and "--trainer.devices auto" in hint and "2 of 2" in hint


def test_the_hint_is_printed_with_the_partition_table(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(launch, "cpu_cores", lambda: 4)
    monkeypatch.setattr(launch.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    tiny_trainer(tmp_path, rounds=1).fit(make_client(FedAvg), tiny_data())
    assert "4 of 4 CPU cores are idle" in capsys.readouterr().out


@pytest.mark.parametrize("flags, precision, hinted", [
    ("fpu avx2 fma", "bf16-mixed", True), ("fpu avx2 fma", "bf16", True),
    ("fpu avx512f avx512_bf16", "bf16-mixed", False), ("fpu avx2", "32-true", False)])
def test_bf16_on_a_cpu_without_native_bfloat16_gets_a_one_line_hint(monkeypatch, tmp_path, flags,
                                                                     precision, hinted):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"flags\t: {flags}\n")
    real_path = precision_module.Path
    monkeypatch.setattr(precision_module, "Path",
                        lambda p: cpuinfo if p == "/proc/cpuinfo" else real_path(p))
    hint = precision_module.precision_hint(precision, torch.device("cpu"))
    assert (hint is not None) == hinted
    if hinted:
        assert "\n" not in hint and "bf16-mixed" in hint and "32-true" in hint
