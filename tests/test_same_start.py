"""benchmarks/map_vs_authors.py on a fake of the authors' modules (no checkout needed), and
benchmarks/same_start.py, the generator of benchmarks/results/same_start.md."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from fedlight.core.seeding import derive_seed
from fedlight.data.datamodule import iterate_batches

ROOT = Path(__file__).resolve().parents[1]


def load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


map_vs_authors = load("map_vs_authors")
same_start = load("same_start")


@pytest.mark.slow  # two short federated runs, each side: seconds, not milliseconds
def test_self_test_drives_the_fake_authors_and_writes_the_shared_format(tmp_path):
    out = tmp_path / "map.json"
    map_vs_authors.main(["--self-test", "--methods", "map", "--rounds", "2", "--clients", "2",
                         "--train", "20", "--test", "10", "--batch", "10", "--epochs", "1",
                         "--json", str(out)])
    record = json.loads(out.read_text())
    assert {"method", "authors_repo", "authors_commit", "split", "rounds", "per_round",
            "max_param_diff", "command"} <= set(record)
    assert record["method"] == "MAP" and record["rounds"] == 2
    assert [row["round"] for row in record["per_round"]] == [1, 2]
    assert {"fedlight", "authors", "fedlight_hpm", "authors_hpm"} <= set(record["per_round"][0])
    assert set(record["max_param_diff"]) == {"global model", "HPMs"}
    assert all(0 <= v < float("inf") for v in record["max_param_diff"].values())


def test_the_authors_loader_yields_fedlights_batches_pass_after_pass():
    x = torch.randn(25, 3, 4, 4).numpy()
    y = torch.arange(25).numpy()
    loader = map_vs_authors.FedlightBatchOrder(x, y, 10, client=3)
    loader.start(4)
    passes = [[b[1].tolist() for b in loader] for _ in range(2)]
    generator = torch.Generator().manual_seed(derive_seed(0, 4, 3))
    expected = [[b[1].tolist() for b in iterate_batches(torch.from_numpy(x), torch.from_numpy(y),
                                                        10, generator)] for _ in range(2)]
    assert passes == expected and passes[0] != passes[1] and len(loader) == 3


def test_same_start_md_is_its_generators_output():
    assert same_start.main(["--check"]) == 0


GPFL_OUTPUT = """GPFL on folder: 2 clients
round  PFLlib accuracy (%)  fedlight accuracy (%)
    1              10.0000                10.0000
    2              20.0000                20.6000
after the last round, largest |fedlight - PFLlib|: encoder 1.000e-04, heads 2.000e-03
"""


def record(per_round, **extra):
    return {"method": "M", "authors_repo": "a/b", "authors_commit": "0123456789", "split": "s",
            "rounds": len(per_round), "per_round": per_round,
            "max_param_diff": {"model": 1e-6}, "command": "python x.py", **extra}


def test_raw_output_is_read_and_the_threshold_applies_to_every_accuracy(tmp_path, monkeypatch):
    (tmp_path / "gpfl.txt").write_text(GPFL_OUTPUT)
    (tmp_path / "gpfl.json").write_text(json.dumps({**record([]), "raw_output": "gpfl.txt"}))
    (tmp_path / "map.json").write_text(json.dumps(record(
        [{"round": 1, "fedlight": 50.0, "authors": 50.2, "fedlight_hpm": 40.0,
          "authors_hpm": 40.7}])))
    monkeypatch.setattr(same_start, "RAW", tmp_path)
    (gpfl_name, gpfl), (_, mapped) = same_start.comparisons()
    assert gpfl_name == "gpfl.json" and gpfl["rounds"] == 2
    assert gpfl["max_param_diff"] == {"encoder": 1e-4, "heads": 2e-3}
    assert same_start.largest_gap(gpfl) == pytest.approx((0.6, 2))
    assert not same_start.agrees(gpfl)
    assert same_start.largest_gap(mapped) == pytest.approx((0.2, 1))
    assert not same_start.agrees(mapped)  # the personalized accuracy agrees, the HPM's not
    text = same_start.render()
    assert "beyond it in some round: M, M." in text
    assert "| HPM 0.70 (round 1) |" in text


def test_learned_choices_are_compared_block_by_block(tmp_path, monkeypatch):
    side = {"A": {"weights": [[0.6, 0.4]], "prefers": ["shared"]}}
    other = {"A": {"weights": [[0.4, 0.6]], "prefers": ["private"]}}
    rows = [{"round": 1, "fedlight": 1.0, "authors": 1.0}]
    (tmp_path / "a.json").write_text(json.dumps(record(rows, choices={"fedlight": side,
                                                                      "authors": side})))
    (tmp_path / "b.json").write_text(json.dumps(record(rows, method="N", choices={
        "fedlight": side, "authors": other})))
    monkeypatch.setattr(same_start, "RAW", tmp_path)
    text = same_start.render()
    assert "| M | A: shared | A: shared | yes |" in text
    assert "| N | A: shared | A: private | no |" in text
    assert "Same preferred blocks on both sides: M; different: N." in text


def test_the_authors_code_against_itself_sits_beside_fedlight_over_the_same_rounds(
        tmp_path, monkeypatch):
    rows = [{"round": 1, "fedlight": 50.0, "authors": 50.0},
            {"round": 2, "fedlight": 52.0, "authors": 50.0},
            {"round": 3, "fedlight": 60.0, "authors": 50.0}]
    (tmp_path / "fedrs.json").write_text(json.dumps(record(rows, method="FedRS")))
    (tmp_path / "float_order").mkdir()
    (tmp_path / "float_order" / "fedrs.json").write_text(json.dumps({
        "method": "FedRS", "rounds": 2, "per_round": [
            {"round": 1, "authors": 50.0, "authors_reordered": 50.4},
            {"round": 2, "authors": 50.0, "authors_reordered": 51.0}]}))
    monkeypatch.setattr(same_start, "RAW", tmp_path)
    text = same_start.render()
    # itself: 1.00 at round 2, within 0.5 through round 1; fedlight over rounds 1-2 only
    assert ("| FedRS | 2 | 1.00 (round 2) | 1 | 2.00 (round 2) | 1 | "
            "[fedrs.json](same_start/float_order/fedrs.json) |") in text


def test_the_authors_server_can_sum_the_uploads_as_fedlight_does(tmp_path):
    from fedlight.core.rules import weighted_mean

    options = map_vs_authors.parse(["--self-test", "--clients", "2", "--train", "6",
                                    "--test", "2", "--authors-aggregation", "fedlight"])
    map_vs_authors.write_fake_authors(tmp_path / "authors")
    map_vs_authors.write_random_clients(tmp_path / "clients", options)
    clients = map_vs_authors.read_clients(tmp_path / "clients")
    algorithm = map_vs_authors.authors_algorithm(tmp_path / "authors", "fedrs", clients, options)
    uploads = {}
    for client in (1, 0):  # the authors' random order: fedlight's sum takes them by id
        uploads[client] = map_vs_authors.copy.deepcopy(algorithm.model)
        with torch.no_grad():
            for parameter in uploads[client].parameters():
                parameter.normal_()
    # their weights are ignored: fedlight's are the training samples (6 each)
    algorithm.update_global(1, algorithm.model, uploads, {1: 0.3, 0: 0.7})
    expected = weighted_mean([uploads[0].state_dict(), uploads[1].state_dict()], [6.0, 6.0])
    assert all(torch.equal(value, expected[key])
               for key, value in algorithm.model.state_dict().items())


def test_the_aggregation_section_says_whether_fedlights_sum_removes_the_drift(
        tmp_path, monkeypatch):
    drifting = [{"round": 1, "fedlight": 50.0, "authors": 50.0},
                {"round": 2, "fedlight": 53.0, "authors": 50.0}]
    (tmp_path / "fedrs.json").write_text(json.dumps(record(drifting, method="FedRS")))
    (tmp_path / "map.json").write_text(json.dumps(record(drifting, method="MAP")))
    (tmp_path / "aggregation_as_fedlight").mkdir()
    (tmp_path / "aggregation_as_fedlight" / "fedrs.json").write_text(json.dumps(record(
        [{"round": 1, "fedlight": 50.0, "authors": 50.0},
         {"round": 2, "fedlight": 50.3, "authors": 50.0}], method="FedRS")))
    (tmp_path / "aggregation_as_fedlight" / "map.json").write_text(json.dumps(record(
        [{"round": 1, "fedlight": 50.0, "authors": 50.0},
         {"round": 2, "fedlight": 51.0, "authors": 50.0}], method="MAP")))
    monkeypatch.setattr(same_start, "RAW", tmp_path)
    text = same_start.render()
    assert ("| FedRS | 2 | 1 | 3.00 (round 2) | 2 | 0.30 (round 2) | model 1.0e-06 | "
            "[fedrs.json](same_start/aggregation_as_fedlight/fedrs.json) |") in text
    assert "FedRS: with fedlight's sum on both sides, within 0.5" in text
    assert "isolated to float rounding in the authors' aggregation" in text
    assert "MAP: with fedlight's sum on both sides, still beyond 0.5" in text
    assert "its cause is still open." in text
    assert "### FedRS, the authors' aggregation made fedlight's" in text


def test_a_drift_left_by_the_sum_is_read_from_the_run_with_fedlights_hpm_update(
        tmp_path, monkeypatch):
    drifting = [{"round": 1, "fedlight": 50.0, "authors": 50.0},
                {"round": 2, "fedlight": 53.0, "authors": 50.0}]
    same = [{"round": 1, "fedlight": 50.0, "authors": 50.0},
            {"round": 2, "fedlight": 50.0, "authors": 50.0}]
    (tmp_path / "fedphp.json").write_text(json.dumps(record(drifting, method="FedPHP")))
    (tmp_path / "aggregation_as_fedlight").mkdir()
    (tmp_path / "aggregation_as_fedlight" / "fedphp.json").write_text(json.dumps(record(
        drifting, method="FedPHP")))
    (tmp_path / "aggregation_as_fedlight" / "fedphp_hpm.json").write_text(json.dumps(record(
        same, method="FedPHP", authors_hpm_update="fedlight")))
    monkeypatch.setattr(same_start, "RAW", tmp_path)
    text = same_start.render()
    assert "| FedPHP (and fedlight's HPM update) | 2 | 1 | 3.00 (round 2) | 2 | " in text
    assert "the rest is the float rounding of the authors' HPM update" in text
    assert "FedPHP: with fedlight's sum and fedlight's HPM update on both sides, within" in text
    assert "its cause is still open." not in text
