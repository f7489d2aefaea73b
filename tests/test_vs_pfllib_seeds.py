"""benchmarks/vs_pfllib_seeds.py: vs_pfllib.py's raw files summarized over seeds, each run's
difference paired on its own split, and bad input as one-line errors."""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "vs_pfllib_seeds.py"
sys.path.insert(0, str(SCRIPT.parent))  # as when run as a script: it imports vs_pfllib
spec = importlib.util.spec_from_file_location("vs_pfllib_seeds", SCRIPT)
seeds = importlib.util.module_from_spec(spec)
sys.modules["vs_pfllib_seeds"] = seeds
spec.loader.exec_module(seeds)

COLUMNS = ["method", "repeat", "library", "variant", "wall_s", "cpu_s", "best_accuracy"]


def raw(path: Path, rows: list[tuple]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        writer.writerows(rows)
    return path


def test_each_run_is_paired_on_its_own_split_and_summarized_over_seeds(tmp_path, capsys):
    files = [
        raw(tmp_path / "s0.csv", [("GPFL", 1, "fedlight", "one", 10, 9, "0.500"),
                                  ("GPFL", 1, "PFLlib", "", 30, 29, "0.480"),
                                  ("FedAvg", 1, "fedlight", "one", 5, 5, "0.200"),
                                  ("FedAvg", 1, "PFLlib", "", 15, 14, "0.210")]),
        raw(tmp_path / "s1.csv", [("GPFL", 1, "fedlight", "one", 12, 11, "0.520"),
                                  ("GPFL", 1, "PFLlib", "", 36, 35, "0.530"),
                                  ("GPFL", 2, "PFLlib", "", 34, 33, "0.550"),  # median 54
                                  ("FedAvg", 1, "fedlight", "one", 6, 6, "0.220"),
                                  ("FedAvg", 1, "PFLlib", "", 16, 16, "0.200")]),
    ]
    seeds.main([str(f) for f in files] + ["--out", str(tmp_path / "table.md")])
    lines = capsys.readouterr().out.splitlines()
    assert (tmp_path / "table.md").read_text().splitlines() == lines
    gpfl = [cell.strip() for cell in lines[2].strip("|").split("|")]
    assert gpfl == ["GPFL, one", "2", "51.00 ± 1.41", "51.00 ± 4.24", "+2.00 / -2.00",
                    "+0.00", "11.0", "32.5", "10.0", "31.5"]
    fedavg = [cell.strip() for cell in lines[3].strip("|").split("|")]
    assert fedavg[2:6] == ["21.00 ± 1.41", "20.50 ± 0.71", "-1.00 / +2.00", "+0.50"]


def test_a_missing_file_or_a_file_of_another_kind_is_a_one_line_error(tmp_path):
    with pytest.raises(SystemExit, match=r"none.csv: no such file"):
        seeds.main([str(tmp_path / "none.csv")])
    other = tmp_path / "other.csv"
    other.write_text("round,accuracy\n1,0.5\n")
    with pytest.raises(SystemExit, match=r"other.csv: not a vs_pfllib.py --raw file"):
        seeds.main([str(other)])


def rounds(raw_file: Path, rows: list[tuple]) -> None:
    with raw_file.with_suffix(".rounds.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["method", "repeat", "library", "variant", "trained_rounds", "accuracy"])
        writer.writerows(rows)


def test_the_same_states_table_compares_only_rounds_both_libraries_evaluated(tmp_path, capsys):
    files = []
    for seed, (late, theirs) in enumerate([(0.9, 0.40), (0.8, 0.30)]):
        files.append(raw(tmp_path / f"s{seed}.csv", [("FedAvg", 0, "fedlight", "", 1, 1, "0.90"),
                                                     ("FedAvg", 0, "PFLlib", "", 2, 2, "0.40")]))
        # fedlight evaluates after 1..3 trained rounds, PFLlib after 0..2: 1 and 2 are shared;
        # fedlight's best (round 3) is not among them
        rounds(files[-1], [("FedAvg", 0, "fedlight", "", 1, "0.20"),
                           ("FedAvg", 0, "fedlight", "", 2, "0.30"),
                           ("FedAvg", 0, "fedlight", "", 3, str(late)),
                           ("FedAvg", 0, "PFLlib", "", 0, "0.10"),
                           ("FedAvg", 0, "PFLlib", "", 1, "0.20"),
                           ("FedAvg", 0, "PFLlib", "", 2, str(theirs))])
    seeds.main([str(f) for f in files] + ["--last", "2"])
    lines = capsys.readouterr().out.split("\n\n")[1].splitlines()
    assert lines[0].startswith("| method | runs | fedlight best (%) | PFLlib best (%) |")
    cells = [cell.strip() for cell in lines[2].strip("|").split("|")]
    # best over rounds 1-2: fedlight 30 and 30, PFLlib 40 and 30; last 2: (25, 30), (25, 25)
    assert cells == ["FedAvg", "2", "30.00 ± 0.00", "35.00 ± 7.07", "-5.00", "25.00 ± 0.00",
                     "27.50 ± 3.54", "-5.00 / +0.00", "-2.50"]


def test_without_rounds_files_there_is_no_same_states_table(tmp_path, capsys):
    files = [raw(tmp_path / "s0.csv", [("FedAvg", 0, "fedlight", "", 1, 1, "0.90"),
                                       ("FedAvg", 0, "PFLlib", "", 2, 2, "0.40")])]
    seeds.main([str(f) for f in files])
    assert "\n\n" not in capsys.readouterr().out.strip()


def pfllib_log(path: Path, dataset: str, algorithm: str, accuracies: list[float]) -> Path:
    """PFLlib's printed output: its argument lines, then one evaluation per round."""
    lines = ["=" * 50, f"dataset = {dataset}", f"algorithm = {algorithm}", "=" * 50]
    for trained, accuracy in enumerate(accuracies):
        lines += [f"-------------Round number: {trained}-------------", "Evaluate performance",
                  "Averaged Train Loss: 1.0", f"Averaged Test Accuracy: {accuracy:.4f}"]
    path.write_text("\n".join(lines + ["Best accuracy.", str(max(accuracies))]) + "\n")
    return path


def changed_runs(tmp_path: Path) -> list[Path]:
    """Two splits (datasets D0, D1); fedlight evaluates after 1..3 trained rounds, PFLlib
    after 0..2."""
    files = []
    for seed, ours in enumerate([(0.20, 0.30, 0.90), (0.40, 0.50, 0.60)]):
        command = f"(cd system && python main.py -data D{seed} -m CNN -algo FedPer)"
        rows = [(*row, command) for row in [("FedPer", 0, "fedlight", "one", 1, 1, "0.9"),
                                            ("FedPer", 0, "PFLlib", "", 2, 2, "0.5")]]
        path = tmp_path / f"s{seed}.csv"
        with path.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow([*COLUMNS, "command"])
            writer.writerows(rows)
        rounds(path, [("FedPer", 0, "fedlight", "one", r + 1, str(a)) for r, a in enumerate(ours)]
               + [("FedPer", 0, "PFLlib", "", r, str(a)) for r, a in enumerate((0.1, 0.4, 0.6))])
        files.append(path)
    return files


def test_a_changed_pfllib_is_paired_with_its_split_by_the_dataset_its_log_names(
        tmp_path, capsys):
    files = changed_runs(tmp_path)
    logs = [pfllib_log(tmp_path / "d1.txt", "D1", "FedPer", [0.1, 0.5, 0.55]),  # D1 first
            pfllib_log(tmp_path / "d0.txt", "D0", "FedPer", [0.1, 0.3, 0.2])]
    seeds.main([str(f) for f in files] + ["--last", "2", "--changed", "keeps the last batch",
                                          *map(str, logs)])
    table = capsys.readouterr().out.split("\n\n")[2].splitlines()
    assert table[0].startswith("| method | change in PFLlib | runs | fedlight mean of last 2")
    cells = [cell.strip() for cell in table[2].strip("|").split("|")]
    # shared rounds 1, 2: fedlight (25, 45), PFLlib (50, 50), changed (25, 52.5)
    assert cells == ["FedPer", "keeps the last batch", "2", "35.00 ± 14.14", "50.00 ± 0.00",
                     "38.75 ± 19.45", "-25.00 / -5.00", "-15.00", "+0.00 / -7.50", "-3.75"]


def test_a_changed_log_of_an_unknown_split_or_a_missing_split_is_a_one_line_error(tmp_path):
    files = changed_runs(tmp_path)
    other = pfllib_log(tmp_path / "other.txt", "D7", "FedPer", [0.1, 0.2, 0.3])
    with pytest.raises(SystemExit, match=r"other.txt: dataset 'D7' is none of the raw files"):
        seeds.main([str(f) for f in files] + ["--changed", "x", str(other)])
    one = pfllib_log(tmp_path / "one.txt", "D0", "FedPer", [0.1, 0.2, 0.3])
    with pytest.raises(SystemExit, match=r"FedPer has logs for 1 of the 2 raw files"):
        seeds.main([str(f) for f in files] + ["--changed", "x", str(one)])
    (tmp_path / "empty.txt").write_text("no evaluations here\n")
    with pytest.raises(SystemExit, match=r"empty.txt: not PFLlib's printed output"):
        seeds.main([str(f) for f in files] + ["--changed", "x", str(tmp_path / "empty.txt")])


PUBLISHED = SCRIPT.parents[1] / "benchmarks" / "results" / "vs_pfllib_three_seeds.md"


#: the changes to PFLlib's code whose runs are published: name -> the logs' file name stem
PUBLISHED_CHANGES = {"training loader keeps the last batch": "no_drop_last",
                     "conditional inputs from the table received this round": "received_table"}


@pytest.mark.parametrize("dataset", ["cifar100_dirichlet", "cifar10_pathological"])
def test_the_published_tables_are_what_the_script_gives_on_the_published_raw_files(dataset):
    folder = PUBLISHED.parent / "vs_pfllib_three_seeds"
    files = sorted(folder.glob(f"{dataset}_seed?.csv"))
    assert len(files) == 3
    dataset_name = dataset.split("_")[0]
    changes = [[name, *sorted(map(str, folder.glob(f"pfllib_*_{stem}_{dataset_name}_seed?.txt")))]
               for name, stem in PUBLISHED_CHANGES.items()]
    changes = [entry for entry in changes if len(entry) > 1]
    assert changes
    text = PUBLISHED.read_text()
    lines = (seeds.summary(files)[2:] + seeds.same_states(files, 10)[2:]
             + seeds.changed_table(files, changes, 10)[2:])
    for line in lines:
        assert line in text, line
