"""Every results file of benchmarks/results/ is the output of its generator (benchmarks/tables.py),
so that no table cell, number, ordering word or paper number can be edited by hand.

A results file is written either by a generator of benchmarks/tables.py or by its own script
``benchmarks/NAME.py`` with a ``render()`` (benchmarks/same_start.py); both are picked up
without a change here. A results file that no program writes (its raw output was never kept)
is frozen by its hash in ``FROZEN`` and says so at its top; the few in ``NOT_YET_GENERATED``
are checked only the older, looser way by tests/test_published_numbers.py. Both lists may only
shrink, and a new results file fails here until a program writes it.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
spec = importlib.util.spec_from_file_location("tables", ROOT / "benchmarks" / "tables.py")
tables = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tables)

# Results files no program writes (each says why at its top): frozen, by the first 16 hex digits
# of their sha256, so that no table cell, number or word changes unseen; a deliberate change
# records the new hash here in the same commit. tests/test_published_numbers.py also checks
# their numbers against what raw files they have.
FROZEN = {
    "baselines": "24f953d88286c97b",
    "cpu_speed": "8928bcb700b0940a",
    "fedpick": "19318e851d602aa2",
    "gpfl": "45b41f58b6d98f10",
    "map": "39232bc0c6361ddd",
    "privatize": "29cb52c588d56aa9",
    "scale": "c5778da673c3740a",
}
# Neither generated nor frozen, while their measurements are being extended; only
# tests/test_published_numbers.py checks their numbers. The list may only shrink.
NOT_YET_GENERATED = {"gpu"}
GENERATED = tables.generated_names()
TEMPLATED = sorted(tables.GENERATORS)
CODE = re.compile(r"```.*?```", re.S)
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.]*\d)")


def test_every_results_file_is_generated_or_listed():
    names = {p.stem for p in RESULTS.glob("*.md")}
    listed = NOT_YET_GENERATED | set(FROZEN)
    unlisted = names - set(GENERATED) - listed
    assert not unlisted, f"write a generator in benchmarks/tables.py for {sorted(unlisted)}"
    assert not listed & set(GENERATED), "generated now: remove from FROZEN / NOT_YET_GENERATED"
    assert listed <= names, "no longer published: remove from FROZEN / NOT_YET_GENERATED"


@pytest.mark.parametrize("name", sorted(FROZEN))
def test_a_file_no_program_writes_is_unchanged(name):
    """A failure: the page was edited; if on purpose, record the new hash in FROZEN."""
    digest = hashlib.sha256((RESULTS / f"{name}.md").read_bytes()).hexdigest()[:16]
    assert digest == FROZEN[name]


@pytest.mark.parametrize("name", GENERATED)
def test_the_results_file_is_its_generators_output(name):
    """A failure: the file was edited by hand or a raw file changed; rerun
    ``python benchmarks/tables.py NAME`` (or ``python benchmarks/NAME.py`` for a file with its
    own script) and read the difference."""
    assert (RESULTS / f"{name}.md").read_text() == tables.output_of(name)


@pytest.mark.parametrize("name", TEMPLATED)
def test_the_template_prints_no_number_of_its_own(name):
    """Outside its code blocks a template's decimals are all fields; a setting written as
    ``{{setting:0.03}}`` is a value of the repository's configs or sweep files."""
    template = (tables.TEMPLATES / f"{name}.md").read_text()
    text = tables.FIELD.sub("", CODE.sub("", template))
    text = re.sub(r"\]\([^)]*\)|torch \S+|\d{4}-\d\d-\d\d|\d\d:\d\d|arXiv:\d+\.\d+", "", text)
    # the papers' section, definition and figure numbers ("Sec. 5.4", "Defs. 3.2 / 3.3")
    numbered = r"\d+(?:\.\d+)*"
    text = re.sub(rf"\b(?:Secs?|Defs?|Figs?|Eqs?)\.\s*{numbered}(?:\s*(?:/|and|,)\s*{numbered})*",
                  "", text)
    assert DECIMAL.findall(text) == []
    configs = [*(ROOT / "configs").rglob("*.yaml"),
               *(ROOT / "benchmarks" / "sweeps").glob("*.yaml")]
    values = {float(n) for f in configs for n in re.findall(r"\d+\.\d+", f.read_text())}
    assert [s for s in re.findall(r"\{\{setting:([\d.]+)\}\}", template)
            if float(s) not in values] == []


def test_each_paper_value_is_one_row_of_one_table():
    rows = list(csv.DictReader(tables.PAPER_VALUES.open()))
    keys = [(r["paper"], r["method"], r["setting"]) for r in rows]
    assert len(keys) == len(set(keys))
    assert all(r["table"] and r["row"] and r["column"] and float(r["value"]) >= 0 for r in rows)


PAPERS = ROOT.parent / "shared" / "papers"
PAPER_FILES = {"MAP": "003_463d726378aedddd.txt", "FedPick": "004_527cbce9d0f8fe85.txt",
               "GPFL": "001_eaa81f952e57a37c.txt"}
TABLE_STARTS = {"Table I (aggregation)": "TABLE I:", "Table II (personalization)": "TABLE II:",
                "Table II": "TABLE II:", "Table 1": "Table 1. The test accuracy"}


@pytest.mark.skipif(not PAPERS.is_dir(), reason="the papers' text is in ../shared/papers")
def test_each_paper_value_is_printed_in_its_row_of_the_paper():
    """The paper's line that starts with the row's name prints the value (in the column's
    place for the tables read here: the values of a row are listed left to right)."""
    wrong = []
    for row in csv.DictReader(tables.PAPER_VALUES.open()):
        text = (PAPERS / PAPER_FILES[row["paper"]]).read_text().replace("\xa0", " ")
        section = text[text.index(TABLE_STARTS[row["table"]]):]
        line = next(x for x in section.splitlines() if re.match(re.escape(row["row"]) + r"\s", x))
        # a value and its spread: "71.8 (0.84%)", "89.60 (0.34)", "$61.86 {\pm} 0.31$", "25.98±0.13"
        numbers = re.findall(r"(\d+\.\d+)\s*(?:\(|±|\\pm|\{\\pm\})", line)
        position = column_position(row)
        if numbers[position] != row["value"]:
            wrong.append(f"{row['paper']} {row['row']} {row['column']}: {row['value']} "
                         f"(the paper: {numbers[position]})")
    assert wrong == []


def column_position(row: dict[str, str]) -> int:
    """Where the column's value stands in the paper's row."""
    if row["paper"] == "MAP":  # MLPNet LeNet TFCNN VGG8 VGG8-BN VGG11 ResNet20 ResNet56
        return ["MLPNet", "LeNet", "TFCNN", "VGG8", "VGG8-BN", "VGG11", "ResNet20",
                "ResNet56"].index(row["column"].split()[-1])
    if row["paper"] == "GPFL":  # FMNIST Cifar100 TINY pathological, FMNIST Cifar100 ... practical
        return 1 if row["column"].startswith("Pathological") else 4
    # FedPick's Table II: MM MT UP SY SV (Digits-Five), A C D W (Office-Caltech-10), then DomainNet
    return ["MM", "MT", "UP", "SY", "SV", "A", "C", "D", "W"].index(row["column"].split()[-1])


@pytest.mark.parametrize("name", GENERATED)
def test_a_planted_error_fails(name):
    """A changed table cell, a changed number in a sentence and a changed ordering word each
    make the file differ from its generator's output."""
    text = (RESULTS / f"{name}.md").read_text()
    rendered = tables.output_of(name)
    cell = re.search(r"^\|[^\n]*?(\d+\.\d\d)", text, re.M)
    prose = next(m for m in DECIMAL.finditer(CODE.sub(lambda c: " " * len(c.group()), text))
                 if not text[text.rfind("\n", 0, m.start()) + 1:].startswith("|"))
    word = re.search(r"\b(above|below|under|ahead|every|within|first)\b", text)
    plants = [changed_digit(text, prose.start())]
    if cell:
        plants.append(changed_digit(text, cell.start(1)))
    if word:
        plants.append(text[:word.start()] + "over" + text[word.end():])
    assert text == rendered
    assert all(planted != rendered for planted in plants)


def changed_digit(text: str, at: int) -> str:
    return text[:at] + ("1" if text[at] == "9" else "9") + text[at + 1:]


def test_a_paper_number_moved_to_another_row_fails(monkeypatch):
    """Swapping two methods' paper values changes the files that print them."""
    original = tables.read_csv
    moved = {("MAP", "FedRS", "cifar10/TFCNN/personalization"): "76.9",
             ("MAP", "MAP", "cifar10/TFCNN/personalization"): "72.9"}

    def swapped(path: Path) -> list[dict[str, str]]:
        rows = original(path)
        if path == tables.PAPER_VALUES:
            for row in rows:
                row["value"] = moved.get((row["paper"], row["method"], row["setting"]),
                                         row["value"])
        return rows

    before = tables.render("map_distillation")
    monkeypatch.setattr(tables, "read_csv", swapped)
    assert tables.render("map_distillation") != before


def test_an_unknown_name_is_a_one_line_error(capsys):
    with pytest.raises(SystemExit) as raised:
        tables.main(["no_such_file"])
    assert raised.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_from_sweep_copies_the_sweeps_tables_into_the_results_folder(tmp_path, monkeypatch):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    for name in ("runs.csv", "results.csv", "curves.png", "partition_cifar10.png", "config.yaml"):
        (sweep / name).write_text(name)
    monkeypatch.setattr(tables, "RESULTS", tmp_path / "results")
    (tmp_path / "results").mkdir()
    copied = tables.copy_sweep(sweep, "map_distillation")
    assert sorted(p.name for p in copied) == ["curves.png", "partition_cifar10.png",
                                              "results.csv", "runs.csv"]
    assert (tmp_path / "results" / "map_distillation" / "runs.csv").read_text() == "runs.csv"


def test_from_sweep_without_runs_is_a_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as raised:
        tables.main(["map_distillation", "--from-sweep", str(tmp_path)])
    assert raised.value.code == 2
    assert "no runs.csv" in capsys.readouterr().err
