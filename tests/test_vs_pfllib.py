"""benchmarks/vs_pfllib.py without PFLlib: the flags it gives PFLlib carry fedlight's resolved
hyper-parameters and as many training rounds (PFLlib trains -gr + 1), PFLlib's printed best
accuracy is read back, every timed process is recorded, and bad checkouts / shapes are
one-line errors."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import yaml

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "vs_pfllib.py"
spec = importlib.util.spec_from_file_location("vs_pfllib", SCRIPT)
vs_pfllib = importlib.util.module_from_spec(spec)
sys.modules["vs_pfllib"] = vs_pfllib  # dataclasses look their module up while it executes
spec.loader.exec_module(vs_pfllib)

CONFIG = {"model": {"class_path": "FedAvg", "init_args": {"backbone": "cnn", "lr": 0.005}},
          "data": {"source": {"class_path": "Synthetic",
                              "init_args": {"samples": 90, "shape": [1, 28, 28]}},
                   "num_clients": 3, "partition": {"class_path": "IID"}},
          "trainer": {"rounds": 2, "batch_size": 10, "local_epochs": 1, "join_ratio": 1.0,
                      "eval_every": 1, "accelerator": "cpu"}}


def flags(command: list[str]) -> dict[str, str]:
    return dict(zip(command[1::2], command[2::2], strict=False))


@pytest.mark.parametrize("label, expected", [
    ("GPFL", {"-algo": "GPFL", "-lam": "0.01", "-mu": "0.1"}),
    ("FedRep", {"-algo": "FedRep", "-pls": "1"}),
    ("Ditto", {"-algo": "Ditto", "-mu": "1.0", "-pls": "1"}),  # fedlight's lamda is PFLlib's mu
    ("FedProx", {"-algo": "FedProx", "-mu": "1.0"}),  # fedlight's default, not PFLlib's 0
    ("FedRoD", {"-algo": "FedROD"}),
])
def test_pfllib_flags_carry_the_resolved_fedlight_hyperparameters(tmp_path, label, expected):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    method = vs_pfllib.METHODS[label]
    resolved = vs_pfllib.resolve_arguments(
        vs_pfllib.fedlight_arguments(method, config, tmp_path / "MNIST_x", 7, 1), label)
    command = vs_pfllib.pfllib_command(method, resolved, "MNIST_x", 3, 10, "cpu")
    given = flags(command)
    assert command[0] == "main.py" and given["-data"] == "MNIST_x" and given["-m"] == "CNN"
    # 7 rounds: PFLlib's -gr 6, since it trains range(global_rounds + 1)
    assert (given["-gr"], given["-lbs"], given["-lr"], given["-ls"], given["-jr"],
            given["-nc"], given["-ncl"], given["-eg"]) == ("6", "10", "0.005", "1", "1.0", "3",
                                                            "10", "1")
    assert expected.items() <= given.items()
    assert resolved["data"]["source"]["class_path"].endswith(".PFLlib")


def test_best_accuracy_is_read_from_pfllib_output():
    out = "Averaged Test Accuracy: 0.41\n\nBest accuracy.\n0.8125\n\nAverage time cost per round."
    assert vs_pfllib.best_accuracy(out) == 0.8125
    assert math.isnan(vs_pfllib.best_accuracy("no result"))


def test_bad_checkout_and_unsupported_shape_are_one_line_errors(tmp_path):
    with pytest.raises(SystemExit, match="is not a PFLlib checkout"):
        vs_pfllib.check_checkout(tmp_path)
    assert vs_pfllib.dataset_name((3, 32, 32), Path("c.yaml")) == "Cifar10_fedlight_c"
    with pytest.raises(SystemExit, match="PFLlib's CNN takes inputs 3x32x32, 1x28x28"):
        vs_pfllib.dataset_name((3, 64, 64), Path("c.yaml"))


def checkout_and_config(tmp_path):
    """An empty PFLlib checkout in tmp_path / "PFLlib" and CONFIG written as a file."""
    (tmp_path / "PFLlib" / "system").mkdir(parents=True)
    (tmp_path / "PFLlib" / "system" / "main.py").write_text("")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    return config


def test_dry_run_prints_both_commands_for_every_method(tmp_path, capsys):
    config = checkout_and_config(tmp_path)
    vs_pfllib.main([str(tmp_path / "PFLlib"), "--config", str(config), "--rounds", "3",
                    "--methods", "FedAvg", "FedProto", "--dry-run"])
    out = capsys.readouterr().out
    assert "export-partition" in out and "MNIST_fedlight_config" in out
    assert out.count("-m fedlight fit") == 2 and "-algo FedProto -gr 2 " in out  # 3 rounds
    with pytest.raises(SystemExit, match="--rounds must be at least 1, got 0"):
        vs_pfllib.pfllib_rounds(0)


def test_set_changes_the_exported_split_and_names_its_own_folder(tmp_path, capsys):
    config = checkout_and_config(tmp_path)
    vs_pfllib.main([str(tmp_path / "PFLlib"), "--config", str(config), "--methods", "FedAvg",
                    "--set", "data.num_clients=5", "--set", "trainer.batch_size=4", "--dry-run"])
    out = capsys.readouterr().out
    export = next(line for line in out.splitlines() if "export-partition" in line).split()
    changed = yaml.safe_load(Path(export[-2]).read_text())
    assert changed["data"]["num_clients"] == 5 and changed["trainer"]["batch_size"] == 4
    assert changed["data"]["source"]["init_args"]["samples"] == 90  # the rest is kept
    assert Path(export[-1]).name.startswith("MNIST_fedlight_config_")
    # fedlight trains on the exported folder: the data change is not given to fit again
    assert "--trainer.batch_size=4" in out and "--data.num_clients" not in out
    assert "-nc 5 " in out and "-lbs 4 " in out
    with pytest.raises(SystemExit, match="expected KEY=VALUE"):
        vs_pfllib.changed_config(config, ["rounds"], tmp_path / "x.yaml")


def test_speed_up_is_the_median_of_the_pairs_ratios_not_a_ratio_of_medians():
    timing = vs_pfllib.Timing
    row = {"method": "FedAvg", "fedlight": [0.25] * 3, "pfllib": [0.24, 0.2, 0.23],
           "fedlight_time": [timing(100, 190, ""), timing(200, 200, ""), timing(120, 195, "")],
           "pfllib_time": [timing(300, 300, ""), timing(220, 310, ""), timing(150, 305, "")]}
    line = vs_pfllib.table([row]).splitlines()[-1]
    cells = [cell.strip() for cell in line.strip("|").split("|")]
    assert cells[1:3] == ["25.00", "23.00"]  # PFLlib's accuracy: the median of its repeats
    assert cells[4:8] == ["120.0", "220.0", "195.0", "305.0"]
    # pairs 3.00, 1.10, 1.25 -> 1.25 (the ratio of the medians, 220 / 120, would be 1.83)
    assert cells[8] == "1.25x (1.10-3.00)"


def test_timed_counts_the_cpu_of_the_process_and_its_children(tmp_path):
    burn = "import subprocess, sys; subprocess.run([sys.executable, '-c', " \
           "'sum(i * i for i in range(3_000_000))'])"
    timing = vs_pfllib.timed([sys.executable, "-c", burn], tmp_path, {})
    assert timing.cpu > 0.1 and timing.wall >= timing.cpu * 0.5


def _fake_processes(monkeypatch):
    """timed() without processes: a fedlight fit writes its summary.json (best accuracy 0.5)
    and metrics.csv (rounds 1 and 3 evaluated), PFLlib prints rounds 0 and 1 and its best
    0.25; walls and CPU seconds are fixed per library."""
    def fake(command, cwd, env):
        options = dict(arg.split("=", 1) for arg in command if arg.startswith("--trainer."))
        if "fit" in command:
            folder = Path(options["--trainer.default_root_dir"]) / options["--trainer.run_name"]
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "summary.json").write_text(json.dumps({"best_personalized_accuracy": 0.5}))
            (folder / "metrics.csv").write_text("round,personalized_accuracy,seconds\n"
                                                "1,0.4,1.0\n2,,1.0\n3,0.5,1.0\n")
            wall = 50.0 if "--trainer.devices=1" not in command else 80.0
            return vs_pfllib.Timing(wall, wall * 1.8, "", "2026-01-01T00:00:00+00:00", 1.25)
        if "export-partition" in command:
            return vs_pfllib.Timing(1.0, 1.0, "")
        out = ("-------------Round number: 0-------------\nAveraged Test Accuracy: 0.1000\n"
               "-------------Round number: 1-------------\nAveraged Test Accuracy: 0.2500\n"
               "Best accuracy.\n0.25\n")
        return vs_pfllib.Timing(100.0, 200.0, out, "t", 1.5)
    monkeypatch.setattr(vs_pfllib, "timed", fake)


def test_variants_share_pfllibs_runs_and_every_process_is_recorded(tmp_path, monkeypatch,
                                                                   capsys):
    config = checkout_and_config(tmp_path)
    _fake_processes(monkeypatch)
    raw = tmp_path / "results" / "pairs.csv"
    vs_pfllib.main([str(tmp_path / "PFLlib"), "--config", str(config), "--rounds", "3",
                    "--methods", "FedAvg", "--repeats", "2", "--variant", "defaults=",
                    "--variant", "one process=--trainer.devices=1", "--raw", str(raw)])
    rows = list(csv.DictReader(raw.open()))
    assert list(rows[0]) == vs_pfllib.RAW_COLUMNS
    # each repeat: both fedlight variants, then one PFLlib run that both are paired with
    assert [(r["repeat"], r["library"], r["variant"]) for r in rows] == [
        ("0", "fedlight", "defaults"), ("0", "fedlight", "one process"), ("0", "PFLlib", ""),
        ("1", "fedlight", "defaults"), ("1", "fedlight", "one process"), ("1", "PFLlib", "")]
    assert [r["wall_s"] for r in rows[:3]] == ["50.00", "80.00", "100.00"]
    assert [r["best_accuracy"] for r in rows[:3]] == ["0.500000", "0.500000", "0.250000"]
    assert rows[0]["load_1min_at_start"] == "1.25" and rows[2]["cpu_s"] == "200.00"
    assert rows[1]["command"].endswith("--trainer.devices=1")
    assert "main.py" in rows[2]["command"] and "-gr 2 " in rows[2]["command"]
    assert all(r["rounds"] == "3" for r in rows)
    table = capsys.readouterr().out
    assert "| FedAvg, defaults | 50.00 | 25.00 | +25.00 | 50.0 | 100.0 |" in table
    assert "| FedAvg, one process | 50.00 | 25.00 | +25.00 | 80.0 | 100.0 |" in table
    assert "2.00x (2.00-2.00)" in table and "1.25x (1.25-1.25)" in table
    rounds = list(csv.DictReader(vs_pfllib.rounds_path(raw).open()))
    assert [(r["library"], r["variant"], r["trained_rounds"], r["accuracy"])
            for r in rounds if r["repeat"] == "0"] == [
        ("fedlight", "defaults", "1", "0.400000"), ("fedlight", "defaults", "3", "0.500000"),
        ("fedlight", "one process", "1", "0.400000"),
        ("fedlight", "one process", "3", "0.500000"),
        ("PFLlib", "", "0", "0.100000"), ("PFLlib", "", "1", "0.250000")]


def test_a_variant_without_a_label_is_a_one_line_error():
    with pytest.raises(SystemExit, match="expected LABEL=OPTIONS"):
        vs_pfllib.parse_variant("--trainer.devices=1")
    assert vs_pfllib.parse_variant("one process=--trainer.devices=1 --trainer.threads=1") == (
        "one process", ["--trainer.devices=1", "--trainer.threads=1"])


def test_median_rounds_are_read_from_pfllibs_output_and_fedlights_metrics(tmp_path):
    line = "-" * 25 + " time cost " + "-" * 25
    out = f"{line} 1.5\nRound number: 3\n{line} 0.5\n{line} 0.75\n"
    assert vs_pfllib.pfllib_round_seconds(out) == 0.75
    assert math.isnan(vs_pfllib.pfllib_round_seconds("Best accuracy.\n0.5"))
    (tmp_path / "metrics.csv").write_text("round,seconds\n1,2.0\n2,0.5\n3,0.25\n")
    assert vs_pfllib.fedlight_round_seconds(tmp_path) == 0.5
    assert math.isnan(vs_pfllib.fedlight_round_seconds(tmp_path / "missing"))
    row = {"method": "GPFL", "fedlight_round": [0.5, 0.25], "pfllib_round": [3.0]}
    assert vs_pfllib.round_table([row]).splitlines()[-1] == "| GPFL | 0.3750 | 3.0000 | 8.00x |"
