"""Every number published in README.md, docs/ and benchmarks/ comes from a raw file in the
repository: what the prose says must be what the data say.

Three rules, checked in every Markdown file (code blocks are commands and script output, and
are not checked themselves):

1. **Values.** Every decimal number equals, at its printed precision, a value of the file's
   records, or is computed by one of the file's claims, or is listed for the file in
   ``QUOTED`` (numbers from the papers, hardware specifications, thresholds: what no run of
   ours produced) or ``UNRECORDED`` (our measurements whose raw output is not in the
   repository). A file's records: the raw files it links or names (``runs.csv``,
   ``results.csv``, ``*.jsonl``, ``*.csv``, ``*.txt``; fractions also count as percentages,
   and the mean and sample std over seeds of every group of runs count too), the configs and
   sweep files of the repository (settings), the script output in its code blocks, its
   tables (for its prose), and what the Markdown files it links vouch for (their raw files,
   or every number they print where their tables are records). A table's cells must come
   from the raw files, not from each other, except in the files of ``TABLES_ARE_RECORDS``,
   whose tables are the printed output of the script named there.
2. **Derived values.** A gap ("1.09 points", "a 3.72-point lead") or a ratio ("1.99x") is a
   computation, where a wrong number hides easily among right ones: every one is computed by a
   claim of the file (or quoted), or, for a ratio, printed as such by a script.
3. **Claims.** A ``Claim`` is a piece of the file's text with ``{}`` fields and a function
   that computes the fields from the raw files; the text, so filled in, must appear in the
   file. A ``ColumnClaim`` checks a table column computed from the row's other cells (a
   difference, a ratio, a mean over seeds).

Files written before this check keep their untraced numbers in ``NOT_YET_TRACED`` and their
unchecked gaps and ratios counted in ``UNCHECKED_DERIVED``: both may only shrink.

To publish a new result: write it with a generator of benchmarks/tables.py (or its own script
with a ``render()``): tests/test_results_generated.py then compares the whole page with the
program's output, which is stricter than these rules, and such pages are left out here. The
summaries of those pages in README.md and docs/ are claims here whose values are the
generators' own fields.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
_spec = importlib.util.spec_from_file_location("tables", ROOT / "benchmarks" / "tables.py")
_tables = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_tables)
GENERATED_RESULTS = set(_tables.generated_names())


# ----------------------------------------------------------------------------- the raw files
def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


@cache
def runs(name: str) -> list[dict]:
    """``benchmarks/results/<name>/runs.csv``: one row per run, numbers as floats."""
    with open(RESULTS / name / "runs.csv") as handle:
        return [{k: (_number(v) if _number(v) is not None else v) for k, v in row.items()}
                for row in csv.DictReader(handle)]


def results(name: str, method: str, column: str, setting: str | None = None) -> float:
    """The mean of ``column`` over seeds for ``method`` (in ``setting`` where given) in
    ``<name>/results.csv``, in %."""
    with open(RESULTS / name / "results.csv") as handle:
        row = next(r for r in csv.DictReader(handle) if r["method"] == method
                   and setting in (None, r["setting"]))
    return 100 * float(row[f"{column} mean"])


def per_seed(name: str, method: str, column: str) -> list[float]:
    return [r[column] for r in runs(name) if r["method"] == method]


def table(path: Path, headers: str) -> list[dict[str, str]]:
    """The first Markdown table of ``path`` whose header row starts with ``| headers``."""
    return table_of(path.read_text(), headers)


def table_of(text: str, headers: str) -> list[dict[str, str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {headers}"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, (c.strip().strip("*") for c in line.strip("|").split("|")),
                             strict=True)))
    return rows


def cell(text: str, index: int = 0) -> float:
    """A number of a table cell ("82.05 ± 0.35" -> 82.05 (index 0) or 0.35 (index 1),
    "263,245" -> 263245, "+2.00" -> 2.0, "-0.42" -> -0.42)."""
    found = re.findall(r"[-+]?\d[\d,]*(?:\.\d+)?", text)[index]
    return float(found.replace(",", ""))


# ----------------------------------------------------------------------------- claims
@dataclass(frozen=True)
class Claim:
    """``text`` with its ``{}`` fields filled by ``values()`` appears in the file."""

    text: str
    values: Callable[[], tuple]

    def rendered(self) -> str:
        return self.text.format(*self.values())


@dataclass(frozen=True)
class ColumnClaim:
    """Every row of the table whose header row starts with ``headers``: the number in
    ``column`` equals ``value(row)`` (computed from the row's other cells) within
    ``tolerance`` (what the rounding of the cells it is computed from allows)."""

    headers: str
    column: str
    value: Callable[[dict[str, str]], float]
    tolerance: float
    index: int = 0  # which number of the cell ("77.02 ± 0.51": 0 the mean, 1 the std)

    def problems(self, path: Path, text: str) -> list[str]:
        found = []
        for row in table_of(text, self.headers):
            if not re.search(r"\d", row[self.column]):
                continue
            expected = self.value(row)
            if abs(cell(row[self.column], self.index) - expected) > self.tolerance:
                found.append(f"{row[self.column]} in column {self.column!r} of the row "
                             f"{list(row.values())[0]!r}: the row's cells give {expected:.3f}")
        return found

    def numbers(self, path: Path) -> set[str]:
        return {DECIMAL.findall(row[self.column])[self.index]
                for row in table_of(path.read_text(), self.headers)
                if len(DECIMAL.findall(row[self.column])) > self.index}


GPFL_C10 = "cifar10_gpfl_table1"
GPU = RESULTS / "gpu.md"


def _gpfl_c10_gaps() -> tuple:
    best = {m: results(GPFL_C10, m, "best personalized") for m in
            ("GPFL", "FedProto", "FedRep", "FedPer")}
    return (best["GPFL"] - best["FedProto"],)


GPFL_C100 = "cifar100_gpfl_table1"


def _c100_gap(first: str, second: str, setting: str) -> float:
    """Best personalized accuracy of ``first`` minus ``second`` in one setting, points."""
    return (results(GPFL_C100, first, "best personalized", setting)
            - results(GPFL_C100, second, "best personalized", setting))


def _gpu_floor_ratios() -> tuple:
    floor = next(r for r in table(GPU, "backbone") if r["input"] == "3x32x32"
                 and r["backbone"] == "cnn")
    seconds = 9000 / cell(floor["samples/s"])
    return 2.085 / seconds, 2.537 / seconds, seconds


def _gpu_precision_spread() -> tuple:
    rows = table(GPU, "precision")
    return (max(max(cell(r[c]) for r in rows) - min(cell(r[c]) for r in rows)
                for c in ("best pers. acc %", "last pers. acc %")),)


def _gpu_workers(workers: int) -> tuple:
    ups = [cell(r["speed-up"]) for r in table(GPU, "method | workers")
           if r["workers"] == str(workers)]
    return min(ups), max(ups)


CLAIMS: dict[str, list[Claim | ColumnClaim]] = {
    "benchmarks/results/gpu.md": [
        Claim("took 2.085 s and 2.537 s on two of the machines: {:.0f}-{:.0f}x the floor of "
              "the table above ({:.3f} s", _gpu_floor_ratios),
        Claim("4 workers give {:.2f}-{:.2f}x", lambda: _gpu_workers(4)),
        Claim("8 give {:.2f}-{:.2f}x", lambda: _gpu_workers(8)),
        Claim("recover {:.2f}-{:.2f}x of that",
              lambda: (_gpu_workers(4)[0], _gpu_workers(8)[1])),
        Claim("1 worker {:.2f}x slower than the same `workers.py` invocation without it "
              "(1.282 against 0.948", lambda: (1.282 / 0.948,)),
        Claim("Same accuracy within {:.2f} point after 10 rounds", _gpu_precision_spread),
    ],
}

def _vs_pfllib(library: str, method: str, column: str = "best_personalized_accuracy",
               form: str = "") -> float:
    with open(RESULTS / "cifar10_vs_pfllib" / "runs.csv") as handle:
        return next(float(r[column]) for r in csv.DictReader(handle) if r["library"] == library
                    and r["method"] == method and r["seed"] in ("0", "none")
                    and (not form or r["form"] == form))


def _vs_pfllib_largest_gap() -> tuple:
    return (max(abs(_vs_pfllib("fedlight", m) - _vs_pfllib("PFLlib", m))
                for m in ("FedPer", "FedRep", "FedRoD", "Ditto")),)


BENCHMARKS_README = ROOT / "benchmarks" / "README.md"
SCALE = RESULTS / "scale.md"
CPU_SPEED = RESULTS / "cpu_speed.md"


def _per_round_processes() -> tuple:
    """benchmarks/processes.py's fitted seconds per round, 1 process against 2."""
    line = re.search(r"1 process: [\d.]+ s start-up \+ ([\d.]+) s/round; 2 processes: [\d.]+ s "
                     r"\+ ([\d.]+) s/round", BENCHMARKS_README.read_text())
    one, two = float(line.group(1)), float(line.group(2))
    return two, one, one / two


def _second_thread() -> tuple:
    rows = table(SCALE, "clients")
    gains = [cell(r["1 process, 1 thread (s / round)"])
             / cell(r["1 process, 2 threads (s / round)"]) for r in rows]
    contention = re.search(r"FedAvg\s+auto\s+([\d.]+).*\n.*\n\s*FedAvg\s+2\s+([\d.]+)",
                           BENCHMARKS_README.read_text())
    gains.append(float(contention.group(1)) / float(contention.group(2)))
    return min(gains), max(gains)


def _channels_last() -> tuple:
    """Per-sample speed-ups of the backbones memory_format: auto puts in channels_last
    (resnet56: 3 steps only, left out)."""
    auto = {"cnn", "cnn_bn", "lenet", "tfcnn", "digit_cnn", "femnist_cnn", "vgg8", "vgg8_bn",
            "vgg11", "resnet20"}
    ups = [float(x) for r in table(CPU_SPEED, "backbone | input | batch")
           if r["backbone"] in auto for x in re.findall(r"\d+\.\d+", r["speed-up"])]
    return min(ups), max(ups)


FEDPICK_C10 = "cifar10_fedpick_domains"

CLAIMS.update({
    "docs/results.md": [
        Claim("GPFL first by {:.2f} points", _gpfl_c10_gaps),
        Claim("order with a {:.2f}-point lead", lambda: (
            results(FEDPICK_C10, "FedPick", "best personalized")
            - results(FEDPICK_C10, "FedBN", "best personalized"),)),
        Claim("within {:.2f} point on FedPer, FedRep, FedRoD and Ditto", _vs_pfllib_largest_gap),
    ],
    "docs/scale-out.md": [
        Claim("the quick-start run's rounds took {:.2f} s against {:.2f} s ({:.2f}x per round",
              _per_round_processes),
        Claim("gained {:.2f}-{:.2f}x from a second thread", _second_thread),
        Claim("{:.2f}-{:.2f}x per sample with one thread", _channels_last),
    ],
    "README.md": [
        Claim("within {:.2f} point on FedPer, FedRep, FedRoD, Ditto", _vs_pfllib_largest_gap),
    ],
    "benchmarks/results/cpu_speed.md": [
        Claim("PFLlib did {:.0f} % more training in each pair", lambda: (100 * (11 / 10 - 1),)),
        Claim("trained at 12.33 ms/sample against 1.31 ms/sample in fp32 ({:.1f}x slower)",
              lambda: (12.33 / 1.31,)),
    ],
})


def _std(name: str, method: str, column: str) -> float:
    return statistics.stdev(per_seed(name, method, column))


DISPLAY = {"PerFedAvg": "Per-FedAvg", "PFedMe": "pFedMe"}  # class name -> name in the prose


def baselines_list(setting: str) -> str:
    """"Method value, ..." of the mean last personalized accuracy over seeds in
    baselines_<setting>.jsonl, best first (methods whose runs all diverged left out)."""
    rows = [json.loads(line) for line in (RESULTS / f"baselines_{setting}.jsonl").read_text()
            .splitlines() if line.strip()]
    values: dict[str, list[float]] = {}
    for row in rows:
        if "last pers." in row["row"]:
            values.setdefault(row["method"], []).append(100 * row["row"]["last pers."])
    means = {DISPLAY.get(m, m): statistics.fmean(v) for m, v in values.items()
             if len(v) == 3}  # every seed finished
    ranked = sorted(means.items(), key=lambda item: -item[1])
    return ", ".join(f"{name} {value:.1f}" for name, value in ranked)


def ranked_results(name: str, column: str, methods: list[str]) -> str:
    """"Method mean ± std, ..." of ``methods`` from ``<name>/results.csv``, in %."""
    with open(RESULTS / name / "results.csv") as handle:
        rows = {r["method"]: r for r in csv.DictReader(handle)}
    return ", ".join(f"{m} {100 * float(rows[m][f'{column} mean']):.2f} ± "
                     f"{100 * float(rows[m][f'{column} std']):.2f}" for m in methods)


CLAIMS["docs/results.md"] += [
    Claim("is second, above the nine other methods of the table, {:.2f} points above",
          lambda: (_c100_gap("GPFL", "FedPer", "pathological"),)),
    Claim("{}", lambda: (baselines_list("dirichlet"),)),
    Claim("{}", lambda: (baselines_list("incomplete"),)),
    Claim("{}", lambda: (ranked_results(GPFL_C10, "best personalized", [
        "FedProto", "FedRep", "FedPer", "FedRoD", "Ditto", "FedAvg"]),)),
]
# Summaries of generated results files in README.md and docs/results.md: their numbers and
# orderings are the generators' own fields (benchmarks/tables.py), so they change together
OFFICE = _tables.office_caltech10_fedpick_table2
VS_PFLLIB = _tables.vs_pfllib_three_seeds
CLAIMS["README.md"] += [
    Claim("the paper's order but for {} ({} there)", lambda: (
        OFFICE()["moved_names"], OFFICE()["moved_paper_places"])),
    Claim("keeping its last batch closes {} % of each gap on the last ten shared states",
          lambda: (VS_PFLLIB()["perrep_share"],)),
    Claim("GPFL on CIFAR-10 {} on the last ten shared states, {} % of it closed", lambda: (
        VS_PFLLIB()["gpfl10_tail"], VS_PFLLIB()["gpfl10_share"])),
]
CLAIMS["docs/results.md"] += [
    Claim("order of the averages but for {} ({} in the paper)", lambda: (
        OFFICE()["moved_names"], OFFICE()["moved_paper_places"])),
    Claim("(on webcam {} FedBN, {}; the paper {} there)", lambda: (
        OFFICE()["webcam_lead"].removesuffix(" FedBN"), OFFICE()["webcam_std"],
        OFFICE()["webcam_paper_ties"])),
    Claim("keeping it closes {} % of each FedPer / FedRep gap", lambda: (
        VS_PFLLIB()["perrep_share"],)),
    Claim("GPFL's {} on CIFAR-10 (last ten shared states) is {} % closed", lambda: (
        VS_PFLLIB()["gpfl10_tail"], VS_PFLLIB()["gpfl10_share"])),
]
CLAIMS["docs/scale-out.md"].append(
    Claim("emulated there ({:.1f}x slower per sample", lambda: (12.33 / 1.31,)))


# Numbers no run of ours produced, by file: the papers' tables, hardware specifications.
QUOTED: dict[str, dict[str, str]] = {
    "README.md": {
        "an example of the progress line a run prints, not a measurement": (
            "0.8123 0.7410 0.5121 62.4"),
    },
    "benchmarks/results/gpu.md": {
        "NVIDIA H100 SXM datasheet: fp32 (non-tensor) peak, TFLOP/s": "67",
    },
}

# Numbers we measured whose raw output is not in the repository (a rerun of the named command
# would record it), by file. The list may only shrink.
UNRECORDED: dict[str, dict[str, str]] = {
    "benchmarks/results/baselines.md": {"the sweep's printed wall and CPU minutes": "33.1 8.5"},
    "benchmarks/results/gpu.md": {
        "workers.py --deterministic and floor.py's fedlight round, printed output":
            "1.282 0.948 2.085 2.537",
    },
}

# Numbers of files written before this check, not yet sorted into the above (a raw file, a
# claim, a quotation or an unrecorded measurement). The list may only shrink.
NOT_YET_TRACED: dict[str, dict[str, str]] = {
    "benchmarks/README.md": {"written before this check": (
        "1.029 1.005 1.699 1.707 1.049 1.056 1.041 1.671 1.766 1.057 1.686 1.016 1.024 "
        "3.16 3.728 3.846 1.032 3.461 3.452 0.997 2.956 2.185 6.887 14.576 11.26 11.04 "
        "13.07 11.81 1.734"),  # 1.734 passed before only as a coincident value of a jsonl file
    },
    "benchmarks/results/cpu_speed.md": {"written before this check": (
        "115.1 190.6 83.5 14.2 17.4 20.5 1.007 1.054 16.2 31.7 11.3 1.08 2.6 43.19 38.2 "
        "10.17 10.99 1.18 1.34 29.3 1.969 1.013 13.6"),
    },
    "benchmarks/results/fedpick.md": {"written before this check": (
        "44.7 44.5 34.1 33.8 10.6 10.5 18.2 89.6 82.9 98.5 85.6 78.2 8.6 4.5 3.4 3.8 "
        "36.2 32.2 21.7 21.6 20.6 20.5 53.9 58.3 55.9 60.8 3.5 0.49 0.65 6.05 0.28"),
    },
    "benchmarks/results/gpfl.md": {"written before this check": (
        "48.9 48.5 43.8 11.9 11.8 99.56 99.47 80.41 97.56 97.44 85.85 0.25 12.5 10.3 "
        "9.7 9.6 10.2 0.51"),
    },
    "benchmarks/results/map.md": {"written before this check": (
        "23.5 41.9 83.5 91.1"),
    },
    "benchmarks/results/privatize.md": {"written before this check": (
        "24.9 49.8 49.5 0.528 0.472 0.494 0.506 0.522 0.478 0.493 0.507 0.899 0.101 "
        "0.448 0.552 0.243 0.757 0.257 0.743 94.03 97.02 0.47 0.53 18.7 15.6 0.76 0.74"),
    },
    "benchmarks/results/scale.md": {"written before this check": (
        "1.98 1.03 1.06"),
    },
}

# Files whose tables are the printed output of the named script (no other raw file).
TABLES_ARE_RECORDS: dict[str, str] = {
    "benchmarks/README.md": "the scripts of benchmarks/, each named in its section",
    "benchmarks/results/baselines.md": "fedlight sweep (report.md of the run)",
    "benchmarks/results/cpu_speed.md": "benchmarks/vs_pfllib.py, floor.py, speed.py",
    "benchmarks/results/fedpick.md": "benchmarks/fedpick_table.py (as of commit c84b6b0)",
    "benchmarks/results/gpfl.md": "benchmarks/gpfl_table.py (before commit c563c7c)",
    "benchmarks/results/gpu.md": "benchmarks/gpu.py, benchmarks/floor.py",
    "benchmarks/results/map.md": "benchmarks/map_table.py (before commit c563c7c)",
    "benchmarks/results/privatize.md": "benchmarks/privatize_table.py (before commit c563c7c)",
    "benchmarks/results/scale.md": "benchmarks/scale.py",
}

# Gap and ratio statements not yet written as claims, per file (may only fall).
UNCHECKED_DERIVED: dict[str, int] = {
    "benchmarks/results/cpu_speed.md": 9,
    "benchmarks/results/fedpick.md": 6,
    "benchmarks/results/gpfl.md": 6,
    "benchmarks/results/privatize.md": 1,
    "benchmarks/results/scale.md": 3,
}


# ----------------------------------------------------------------------------- reading
CODE = re.compile(r"```.*?```", re.S)
DECIMAL = re.compile(r"(?<![\w.])(\d+\.\d+)(?![\w.]*\d)")
ANY_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?:e-?\d+)?")
# Not measurements: versions, paper ids, links, clock times, dates.
NOT_MEASURED = [r"\d+(?:\.\d+){2,}", r"arXiv:\s*\d+\.\d+", r"https?://\S+", r"\]\([^)]*\)",
                r"\d\d:\d\d", r"\d{4}-\d\d-\d\d",
                r"(?:torch|torchvision|python|Python|lightning|flwr|CUDA)\s+[<>=]*\d+\.\d+",
                # the papers' section, definition, figure and equation numbers ("Sec. 4.2-4.3")
                r"\b(?:Secs?|Defs?|Figs?|Eqs?)\.\s*\d+(?:\.\d+)*(?:\s*(?:-|/|and|,)\s*\d+(?:\.\d+)*)*"]
DERIVED = re.compile(r"(?<![\w.])[-+]?(\d+(?:\.\d+)?)(?:\s*-\s*(\d+(?:\.\d+)?))?"
                     r"(?:x\b|\s+points?\b|-point\b)")


def _blank(text: str, pattern: str, flags: int = 0) -> str:
    return re.sub(pattern, lambda m: re.sub(r"[^\n]", " ", m.group()), text, flags=flags)


def prose_and_tables(text: str) -> str:
    """The text without code blocks and without what is not a measurement."""
    text = _blank(text, CODE.pattern, re.S)
    for pattern in NOT_MEASURED:
        text = _blank(text, pattern)
    return text


def numbers_in(text: str) -> list[float]:
    return [float(m.group().replace(",", "")) for m in ANY_NUMBER.finditer(text)]


def raw_numbers(path: Path) -> list[float]:
    if path.suffix == ".jsonl":
        found: list[float] = []

        def walk(value: object) -> None:
            if isinstance(value, bool):
                return
            if isinstance(value, int | float):
                found.append(float(value))
            elif isinstance(value, dict):
                for item in value.values():
                    walk(item)
            elif isinstance(value, list):
                for item in value:
                    walk(item)

        for line in path.read_text().splitlines():
            if line.strip():
                walk(json.loads(line))
        return found
    return numbers_in(path.read_text())


def seed_aggregates(rows: list[dict]) -> list[float]:
    """Mean and sample std over seeds of every numeric field, per group of rows that agree
    on everything but the seed and the run's name (what a results table prints)."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        key = tuple(sorted((k, str(v)) for k, v in row.items() if k not in ("seed", "run")
                           and not isinstance(v, float)))
        groups.setdefault(key, []).append(row)
    found = []
    for members in groups.values():
        for field in {k for row in members for k, v in row.items() if isinstance(v, float)}:
            values = [row[field] for row in members if isinstance(row.get(field), float)]
            found.append(statistics.fmean(values)) if values else None
            if len(values) > 1:
                found.append(statistics.stdev(values))
    return found


def _flat_record(record: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in record.items():
        if isinstance(value, dict):
            flat.update(_flat_record(value, f"{prefix}{key}."))
        elif isinstance(value, int | float) and not isinstance(value, bool) and key not in (
                "rounds", "eval_every"):
            flat[prefix + key] = float(value)
        else:
            flat[prefix + key] = value
    return flat


def table_rows(path: Path) -> list[dict]:
    """The rows of a runs.csv or jsonl file, numbers as floats."""
    if path.suffix == ".jsonl":
        return [_flat_record(json.loads(line)) for line in path.read_text().splitlines()
                if line.strip()]
    with open(path) as handle:
        return [{k: (_number(v) if _number(v) is not None else v) for k, v in row.items()}
                for row in csv.DictReader(handle)]


RAW_SUFFIXES = (".csv", ".jsonl", ".txt", ".json")


def linked(path: Path) -> list[Path]:
    """Repository files that ``path`` links or names."""
    text = path.read_text()
    names = re.findall(r"\]\(([^)#\s]+)\)", text) + re.findall(
        r"`([\w./-]+\.(?:csv|jsonl|txt|json|md))`", text)
    found = []
    for name in names:
        for base in (path.parent, ROOT):
            candidate = (base / name).resolve()
            if candidate.is_file() and candidate != path.resolve():
                found.append(candidate)
                break
    return found


@cache
def settings() -> tuple[float, ...]:
    """Every number in the repository's configs and sweep files."""
    files = [*(ROOT / "configs").rglob("*.yaml"), *(ROOT / "benchmarks" / "sweeps").glob("*.yaml")]
    return tuple(v for f in files for v in numbers_in(f.read_text()))


def records(path: Path, text: str, own_tables: bool = True) -> list[float]:
    """The values a number of ``path`` (whose content is ``text``) may quote (rule 1); a
    table's cells may not vouch for each other unless ``own_tables``."""
    values = list(settings())
    values += numbers_in("\n".join(CODE.findall(text)))
    if own_tables:
        values += numbers_in("\n".join(line for line in prose_and_tables(text).splitlines()
                                       if line.startswith("|")))
    for other in linked(path):
        if other.suffix in RAW_SUFFIXES:
            values += raw_values(other)
        elif other.suffix == ".md":
            values += page_values(other)
    return values


def raw_values(path: Path) -> list[float]:
    values = raw_numbers(path)
    if path.suffix in (".csv", ".jsonl"):
        values += seed_aggregates(table_rows(path))
    return values


def page_values(path: Path) -> list[float]:
    """What another page vouches for: its raw files' values and its claims' and quotations'
    numbers where it has raw files (not its own rounded text: 92.05 rounded again is not
    92.048), else every number it prints."""
    raw = [other for other in linked(path) if other.suffix in RAW_SUFFIXES]
    if not raw or _key(path) in TABLES_ARE_RECORDS or generated(path):
        return numbers_in(prose_and_tables(path.read_text()))
    key = _key(path)
    return [v for other in raw for v in raw_values(other)] + [
        float(n) for n in claimed_numbers(key) | quoted_numbers(key)]


def agrees(printed: str, values: list[float]) -> bool:
    """``printed`` is one of ``values`` (or of them as percentages) at its precision."""
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    x, tolerance = float(printed), 0.5 * 10 ** -decimals + 1e-9
    return any(abs(v - x) <= tolerance or abs(100 * v - x) <= tolerance for v in values)


def generated(path: Path) -> bool:
    """Whether a program writes ``path`` whole (tests/test_results_generated.py compares it
    with the program's output, which is stricter than the rules here)."""
    return path.parent == RESULTS and path.stem in GENERATED_RESULTS


def published() -> Iterator[Path]:
    yield ROOT / "README.md"
    yield from sorted((ROOT / "docs").glob("*.md"))
    yield ROOT / "benchmarks" / "README.md"
    yield from sorted(p for p in RESULTS.glob("*.md") if not generated(p))


def _key(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _flat(text: str) -> str:
    return " ".join(text.replace("**", "").split())


def claimed_numbers(key: str) -> set[str]:
    found = set()
    for claim in CLAIMS.get(key, ()):
        if isinstance(claim, ColumnClaim):
            found |= claim.numbers(ROOT / key)
        else:
            found |= {m.group() for m in re.finditer(r"\d+(?:\.\d+)?", claim.rendered())}
    return found


def quoted_numbers(key: str, traced_only: bool = False) -> set[str]:
    """QUOTED and UNRECORDED numbers of ``key``; an entry "table: HEADERS" names every number
    of the file's table whose header row starts with HEADERS."""
    found = set()
    for source in (QUOTED, UNRECORDED) if traced_only else (QUOTED, UNRECORDED, NOT_YET_TRACED):
        for numbers in source.get(key, {}).values():
            if numbers.startswith("table: "):
                rows = table(ROOT / key, numbers.removeprefix("table: "))
                numbers = " ".join(DECIMAL.findall(" ".join(" ".join(r.values()) for r in rows)))
            found.update(numbers.split())
    return found


# ----------------------------------------------------------------------------- the checks
def claim_problems(key: str, text: str) -> list[str]:
    flat, problems = _flat(text), []
    for claim in CLAIMS.get(key, ()):
        if isinstance(claim, ColumnClaim):
            problems += claim.problems(ROOT / key, text)
        elif _flat(claim.rendered()) not in flat:
            problems.append(f"does not say (computed from its raw files): {claim.rendered()}")
    return problems


def value_problems(key: str, path: Path, text: str) -> list[str]:
    allowed = claimed_numbers(key) | quoted_numbers(key)
    record_tables = key in TABLES_ARE_RECORDS
    for_prose = records(path, text)
    for_tables = for_prose if record_tables else records(path, text, own_tables=False)
    problems = []
    for number, line in _decimals(text):
        in_table = line.startswith("|")
        if in_table and record_tables or number in allowed:
            continue
        if not agrees(number, for_tables if in_table else for_prose):
            problems.append(f"{number} in no raw file, claim or quotation: {line.strip()[:90]}")
    return problems


def _decimals(text: str) -> Iterator[tuple[str, str]]:
    original = text.splitlines()
    for index, line in enumerate(prose_and_tables(text).splitlines()):
        for match in DECIMAL.finditer(line):
            yield match.group(1), original[index]


def derived_problems(key: str, path: Path, text: str) -> list[str]:
    allowed = claimed_numbers(key) | quoted_numbers(key, traced_only=True)
    printed = records(path, text)
    problems = []
    for line in prose_and_tables(text).splitlines():
        if line.lstrip().startswith("|"):
            continue
        for match in DERIVED.finditer(line):
            numbers = [n for n in match.groups() if n]
            ratio = match.group().endswith("x")
            if not all(n in allowed or (ratio and agrees(n, printed)) for n in numbers):
                problems.append(f"not computed by a claim: {match.group().strip()} in: "
                                f"{line.strip()[:90]}")
    return problems


PUBLISHED = list(published())


@pytest.mark.parametrize("path", PUBLISHED, ids=_key)
def test_every_claim_appears_with_the_numbers_its_data_give(path):
    assert claim_problems(_key(path), path.read_text()) == []


@pytest.mark.parametrize("path", PUBLISHED, ids=_key)
def test_every_value_is_in_a_record_a_claim_or_a_quotation(path):
    """To fix a failure: link the raw file, add a claim, or list a paper's number in QUOTED."""
    assert value_problems(_key(path), path, path.read_text()) == []


@pytest.mark.parametrize("path", PUBLISHED, ids=_key)
def test_every_gap_and_ratio_is_computed_by_a_claim(path):
    key = _key(path)
    unchecked = derived_problems(key, path, path.read_text())
    limit = UNCHECKED_DERIVED.get(key, 0)
    assert len(unchecked) <= limit, f"{key}: write a claim for each of\n" + "\n".join(unchecked)
    assert len(unchecked) == limit, (
        f"{key}: {len(unchecked)} unchecked gaps / ratios left: set UNCHECKED_DERIVED to it")


def test_every_claim_names_a_published_file():
    named = set(CLAIMS) | set(QUOTED) | set(UNRECORDED) | set(NOT_YET_TRACED) | set(
        TABLES_ARE_RECORDS)
    assert named | set(UNCHECKED_DERIVED) <= {
        _key(p) for p in PUBLISHED}


@pytest.mark.parametrize("printed, values, agrees_", [
    ("82.05", [0.82055], True), ("82.05", [0.8215], False), ("1.99", [1.987], True),
    ("0.6", [0.0127, 0.0080], False), ("92.1", [0.92048], False), ("92.0", [0.92048], True),
])
def test_a_value_agrees_only_at_its_printed_precision(printed, values, agrees_):
    assert agrees(printed, values) is agrees_


@pytest.mark.parametrize("right, wrong", [
    # the wrong numbers these files once printed, and a few more
    ("61-74x the floor", "54-64x the floor"),
    ("(1.85x per round", "(1.66x per round"),
    ("FedAdam 92.0", "FedAdam 92.1"),
    ("9.4x slower per sample", "9.5x slower per sample"),
])
def test_a_wrong_number_in_the_prose_fails_a_check(right, wrong):
    pattern = r"\s+".join(map(re.escape, right.split()))
    path = next(p for p in PUBLISHED if re.search(pattern, p.read_text()))
    key, text = _key(path), path.read_text()
    changed = re.sub(pattern, wrong, text)
    assert not claim_problems(key, text) and not value_problems(key, path, text)
    assert (claim_problems(key, changed) or value_problems(key, path, changed)
            or derived_problems(key, path, changed) != derived_problems(key, path, text))


def test_every_listed_number_is_still_printed_in_its_file():
    """A number listed as quoted, unrecorded or not yet traced that its file no longer prints
    is removed from the list (so the lists only shrink)."""
    stale = []
    for source in (QUOTED, UNRECORDED, NOT_YET_TRACED):
        for key, entries in source.items():
            printed = set(DECIMAL.findall(prose_and_tables((ROOT / key).read_text()))) | set(
                re.findall(r"\d+", (ROOT / key).read_text()))
            stale += [f"{key}: {n}" for numbers in entries.values()
                      if not numbers.startswith("table: ") for n in numbers.split()
                      if n not in printed]
    assert stale == []
