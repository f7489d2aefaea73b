"""python -m fedlight.analysis.per_client: each client's best (or last) score over rounds from a
sweep's per_client_rounds.csv files, mean ± sample std over seeds (FedPick's per-domain
tables)."""

from __future__ import annotations

import csv
import statistics

import pytest

from fedlight.analysis.per_client import main, write_table
from fedlight.cli import main as fedlight
from fedlight.core.errors import ConfigError, MissingFileError
from tests.test_sweep import write

#: method, seed -> per round, per client (name, personalized, global_head)
SCORES = {
    ("FedPick", 0): [[("mnist", 0.5, 0.4), ("svhn", 0.2, 0.3)],
                     [("mnist", 0.7, 0.1), ("svhn", 0.1, 0.2)],
                     [("mnist", 0.6, 0.2), ("svhn", "", 0.1)]],
    ("FedPick", 1): [[("mnist", 0.8, 0.5), ("svhn", 0.3, 0.1)],
                     [("mnist", 0.4, 0.6), ("svhn", 0.4, 0.2)]],
    ("FedBN", 0): [[("mnist", 0.9, 0.0), ("svhn", 0.5, 0.0)]],
}


def sweep_folder(tmp_path):
    """A sweep folder as fedlight sweep leaves it: runs.csv and each run's per-client file."""
    listing = [["method", "setting", "seed", "rounds", "run"]]
    for (method, seed), rounds in SCORES.items():
        name = f"{method}-s{seed}-abc"
        listing.append([method, "digits5", seed, len(rounds), name])
        folder = tmp_path / "runs" / name
        folder.mkdir(parents=True)
        rows = [["round", "client", "client_name", "personalized_accuracy",
                 "global_head_accuracy"]]
        rows += [[r + 1, c, name_, value, head] for r, clients in enumerate(rounds)
                 for c, (name_, value, head) in enumerate(clients)]
        with (folder / "per_client_rounds.csv").open("w", newline="") as handle:
            csv.writer(handle).writerows(rows)
    with (tmp_path / "runs.csv").open("w", newline="") as handle:
        csv.writer(handle).writerows(listing)
    return tmp_path


def table(path):
    with path.open(newline="") as handle:
        return {(r["method"], r["name"]): r for r in csv.DictReader(handle)}


def test_each_clients_best_over_rounds_pooled_over_seeds(tmp_path):
    written = write_table(sweep_folder(tmp_path))
    rows = table(written[0])
    mnist, svhn = rows[("FedPick", "mnist")], rows[("FedPick", "svhn")]
    assert float(mnist["mean"]) == pytest.approx(statistics.mean([0.7, 0.8]))
    assert float(mnist["std"]) == pytest.approx(statistics.stdev([0.7, 0.8]))
    assert mnist["seeds"] == "2" and mnist["client"] == "0"
    assert float(svhn["mean"]) == pytest.approx(statistics.mean([0.2, 0.4]))  # empty cell skipped
    average = rows[("FedPick", "Avg")]
    assert float(average["mean"]) == pytest.approx(statistics.mean([0.45, 0.6]))
    assert float(average["std"]) == pytest.approx(statistics.stdev([0.45, 0.6]))
    assert rows[("FedBN", "mnist")]["std"] == ""  # one seed: no spread
    markdown = written[1].read_text()
    assert "| method | mnist | svhn | Avg | seeds |" in markdown
    assert "| FedPick | 75.00 ± 7.07 | 30.00 ± 14.14 | 52.50 ± 10.61 | 2 |" in markdown
    assert "| FedBN | 90.00 | 50.00 | 70.00 | 1 |" in markdown


def test_last_round_and_another_metric(tmp_path, capsys):
    main([str(sweep_folder(tmp_path)), "--over", "last", "--metric", "global_head_accuracy",
          "--out", str(tmp_path / "out")])
    rows = table(tmp_path / "out" / "per_client_table.csv")
    assert float(rows[("FedPick", "mnist")]["mean"]) == pytest.approx(
        statistics.mean([0.2, 0.6]))
    assert "each client's last global_head_accuracy" in capsys.readouterr().out


def test_one_line_errors(tmp_path):
    with pytest.raises(MissingFileError, match="runs.csv' does not exist"):
        write_table(tmp_path)
    folder = sweep_folder(tmp_path)
    with pytest.raises(ConfigError, match="--metric 'accuracy' is not a per-client column; "
                                          "valid: personalized_accuracy, global_head"):
        write_table(folder, metric="accuracy")
    (folder / "runs" / "FedBN-s0-abc" / "per_client_rounds.csv").unlink()
    with pytest.raises(MissingFileError, match="trainer.per_client_scores"):
        write_table(folder)


def test_a_sweep_writes_the_per_client_files_the_table_reads(tmp_path, capsys):
    path = write(tmp_path, {"methods": ["FedAvg"], "seeds": 2,
                            "overrides": {"trainer.rounds": 2}})
    out = tmp_path / "out"
    fedlight(["sweep", str(path), "--out", str(out)])
    main([str(out)])
    rows = list(csv.DictReader((out / "per_client_table.csv").open()))
    assert [(r["client"], r["seeds"]) for r in rows] == [("0", "2"), ("1", "2"), ("2", "2"),
                                                         ("", "2")]
    assert "wrote" in capsys.readouterr().out
