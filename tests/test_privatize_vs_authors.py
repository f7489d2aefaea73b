"""benchmarks/privatize_vs_authors.py --self-test: against the stand-in for the authors'
modules the script writes (not the authors' code; no checkout needed)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from fedlight.models import BACKBONES

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "privatize_vs_authors.py"


@pytest.fixture
def script(monkeypatch):
    """The script as a module, its backbone registered for this test only, the stand-in's
    modules forgotten afterwards."""
    spec = importlib.util.spec_from_file_location("privatize_vs_authors", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(BACKBONES, module.BACKBONE, module.tfcnn_padded)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield module
    for name in module.AUTHORS_MODULES:
        sys.modules.pop(name, None)


@pytest.mark.slow  # two federated runs in each library (~20 s on an idle core)
def test_same_start_runs_agree_and_are_written_with_their_choices(script, tmp_path):
    clients = tmp_path / "clients"
    script.write_random_clients(clients, clients=2, train=100, test=12)
    out = tmp_path / "same_start"
    script.main(["--self-test", "--folder", str(clients), "--rounds", "2",
                 "--methods", "AaBb", "autohs", "--out", str(out)])
    block = json.loads((out / "privatize_AaBb.json").read_text())
    learned = json.loads((out / "autohs.json").read_text())
    for record in (block, learned):
        assert {"method", "authors_repo", "authors_commit", "split", "rounds", "per_round",
                "max_param_diff", "command"} <= set(record)
        assert [row["round"] for row in record["per_round"]] == [1, 2]
        assert all(row["fedlight"] == row["authors"] for row in record["per_round"])
        assert max(record["max_param_diff"].values()) < 1e-4
        assert record["command"].startswith("python benchmarks/privatize_vs_authors.py ")
    assert block["method"] == "Privatize AaBb" and "choices" not in block
    assert set(block["max_param_diff"]) == {"shared", "private"}
    assert set(learned["max_param_diff"]) == {"shared", "private", "coefficients"}
    assert learned["choices"]["fedlight"].keys() == {"A", "B"}
    for block_name in ("A", "B"):
        ours, theirs = (learned["choices"][side][block_name] for side in ("fedlight", "authors"))
        assert ours["prefers"] == theirs["prefers"]
        assert sum(ours["weights"], []) == pytest.approx(sum(theirs["weights"], []), abs=1e-5)
    assert learned["fedlight_arguments"]["sample_at_evaluation"] is True


@pytest.mark.slow
def test_the_paper_form_departs_from_the_authors_code(script, tmp_path, capsys):
    clients = tmp_path / "clients"
    script.write_random_clients(clients, clients=2, train=100, test=12)
    script.main(["--self-test", "--folder", str(clients), "--rounds", "1",
                 "--methods", "autosa", "--paper-form"])
    printed = capsys.readouterr().out
    gaps = printed.split("largest |fedlight - authors|: ")[1].splitlines()[0]
    shared = float(gaps.split("shared ")[1].split(",")[0])
    assert shared > 1e-3, printed  # temperature, output fusion and the second step all differ


def test_without_a_checkout_or_with_a_method_the_stand_in_lacks_it_stops(script, capsys):
    for argv, message in (([], "give the authors' checkout, or --self-test"),
                          (["--self-test", "--methods", "ABb"], "--self-test runs AaBb, ab")):
        with pytest.raises(SystemExit) as stopped:
            script.main(argv)
        assert stopped.value.code == 2 and message in capsys.readouterr().err

