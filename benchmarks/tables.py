"""The results files of ``benchmarks/results/``, each written whole from the raw files in its
folder and the papers' numbers in ``benchmarks/results/paper_values.csv``.

    python benchmarks/tables.py map_distillation     # writes benchmarks/results/map_distillation.md
    python benchmarks/tables.py --check              # exit 1, naming each file that differs
    python benchmarks/tables.py NAME --from-sweep sweeps/NAME   # copy a sweep's tables first

A results file ``NAME.md`` is its template ``benchmarks/templates/NAME.md`` with every
``{{field}}`` filled in by ``NAME``'s generator below: the tables and every number, ordering
word ("above", "in every seed", "within one seed std") and paper number of the prose are
fields, each computed from the raw files; the template itself prints no decimal number but a
setting of the runs, written ``{{setting:0.03}}`` (a value of the sweep or config files).
tests/test_results_generated.py checks the template and that each file equals its output. What
cannot be computed (a cause, an interpretation) is written as a reading, with no number of its
own.

Paper numbers are looked up by (paper, method, setting) in ``paper_values.csv``, where each
row also names the paper's table, row and column it is copied from: a number cannot move to
another method's row without the file changing.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TEMPLATES = ROOT / "benchmarks" / "templates"
PAPER_VALUES = RESULTS / "paper_values.csv"
FIELD = re.compile(r"\{\{(.+?)\}\}")
SETTING = re.compile(r"\{\{setting:([\d.]+)\}\}")  # a setting of the run, printed as written

Fields = dict[str, str]


# ----------------------------------------------------------------------------- raw files
def read_csv(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV file of the results folder."""
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def number(text: str) -> float | None:
    """A CSV cell as a number (``None`` for an empty cell)."""
    return float(text) if text not in ("", "None") else None


def paper(name: str, method: str, setting: str) -> float:
    """The paper ``name``'s number for ``method`` in ``setting`` (paper_values.csv)."""
    found = [row for row in read_csv(PAPER_VALUES) if (row["paper"], row["method"],
                                                         row["setting"]) == (name, method, setting)]
    if len(found) != 1:
        raise KeyError(f"paper_values.csv has {len(found)} rows for {name} / {method} / {setting}")
    return float(found[0]["value"])


def paper_gap(name: str, first: str, second: str, setting: str, digits: int = 1) -> str:
    """``first``'s paper number minus ``second``'s, in points, to the paper's places."""
    return f"{paper(name, first, setting) - paper(name, second, setting):.{digits}f}"


def paper_digits(name: str, method: str, setting: str) -> str:
    """A paper's number as the paper prints it."""
    found = next(row for row in read_csv(PAPER_VALUES) if (row["paper"], row["method"],
                                                             row["setting"]) == (name, method,
                                                                                 setting))
    return found["value"]


# ----------------------------------------------------------------------------- formatting
def pct(value: float, digits: int = 2) -> str:
    """A fraction as a percentage, ``digits`` places."""
    return f"{100 * value:.{digits}f}"


def signed(points: float, digits: int = 2) -> str:
    """A difference in points with its sign (``+0.00`` for a zero)."""
    return f"{points:+.{digits}f}".replace("-0.00", "+0.00") if digits == 2 else \
        f"{points:+.{digits}f}"


def mean_std(values: Sequence[float], digits: int = 2) -> str:
    """``mean ± sample std`` of fractions in %, the value alone for one."""
    if len(values) == 1:
        return pct(values[0], digits)
    return f"{pct(statistics.fmean(values), digits)} ± {pct(statistics.stdev(values), digits)}"


def joined(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def in_seeds(count: int, total: int) -> str:
    """``in every seed``, ``in no seed`` or ``in k of n seeds``."""
    if count == total:
        return "in every seed"
    return "in no seed" if count == 0 else f"in {count} of {total} seeds"


def compared(first: float, second: float, above: str = "above", below: str = "below") -> str:
    """The word that orders ``first`` against ``second``."""
    if first == second:
        return "equal to"
    return above if first > second else below


def within_std(gap: float, std: float) -> str:
    """Whether a gap (points) is inside one seed std (points)."""
    return "within one seed std" if abs(gap) <= std else "more than one seed std"


def ranked_text(items: Sequence[tuple[str, float]], digits: int = 2) -> str:
    """"A 3.00 > B 2.00 = C 2.00", highest first; "=" where the printed values are equal."""
    ordered = sorted(items, key=lambda item: -item[1])
    printed = [f"{value:.{digits}f}" for _, value in ordered]
    text = f"{ordered[0][0]} {printed[0]}"
    for index in range(1, len(ordered)):
        sign = "=" if printed[index] == printed[index - 1] else ">"
        text += f" {sign} {ordered[index][0]} {printed[index]}"
    return text


def table(header: Sequence[str], align: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table (``align``: ``l`` or ``r`` per column)."""
    if len(align) != len(header) or any(len(row) != len(header) for row in rows):
        raise ValueError(f"a table of {len(header)} columns: {len(align)} alignments")
    lines = ["| " + " | ".join(header) + " |",
             "| " + " | ".join("---:" if a == "r" else "---" for a in align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- rendering
def render(name: str) -> str:
    """The results file ``name`` as its generator writes it."""
    template = (TEMPLATES / f"{name}.md").read_text()
    fields = GENERATORS[name]()
    fields.update({f"setting:{value}": value for value in SETTING.findall(template)})
    for expression in set(FIELD.findall(template)) - fields.keys():
        if not LOOKUP.match(expression):
            raise KeyError(f"{name}: the template's field {{{{{expression}}}}} has no value")
        fields[expression] = lookup(lookup_rows(name), expression)
    return FIELD.sub(lambda m: fields[m.group(1)], template)


# A field that reads the results folder's runs.csv directly: KIND:ARGUMENTS[|DIGITS], where a
# method is written METHOD or METHOD@SETTING and a column is a runs.csv column; accuracies
# (fractions in the file) are printed in %, seconds as they are.
#   m:METHOD:COLUMN       the mean over its runs          pm:METHOD:COLUMN  mean ± sample std
#   std:METHOD:COLUMN     the sample std                  n:METHOD:COLUMN   the number of runs
#   d:A:B:COLUMN          A's mean minus B's              sd:A:B:COLUMN     the same, signed
#   cmp:A:B:COLUMN        "above", "below" or "equal to"  min:/max:COLUMN:A,B,...  the extreme
#   rank:COLUMN:A,B,...   "A x > B y > ..." in the data's order (">" for ties too: "=")
#   paper:PAPER:METHOD:SETTING   paper_values.csv's number, as the paper prints it
LOOKUP = re.compile(r"^(m|pm|std|n|d|sd|cmp|min|max|rank|paper):(.+?)(?:\|(\d))?$")
UNSCALED = ("wall s / run", "CPU s / run", "CV", "rounds", "seed", "s / round")


def lookup_rows(name: str) -> list[dict[str, str]]:
    """The per-run rows LOOKUP fields of ``name`` read: its folder's runs.csv, or for the
    baselines pages their .jsonl file (one line per method and seed)."""
    if name in BASELINE_PAGES:
        return baseline_runs(BASELINE_PAGES[name])
    return read_csv(RESULTS / name / "runs.csv")


def lookup(runs: list[dict[str, str]], expression: str) -> str:
    """The value of one LOOKUP field."""
    kind, arguments, digits = LOOKUP.match(expression).groups()
    places = int(digits) if digits else 2
    parts = arguments.split(":")
    if kind == "paper":
        return paper_digits(*parts)

    def values(method: str, column: str) -> list[float]:
        name, _, setting = method.partition("@")
        scale = 1 if column in UNSCALED else 100
        found = [scale * float(r[column]) for r in runs if r["method"] == name
                 and (not setting or r["setting"] == setting) and r[column] not in ("", "None")]
        if not found:
            raise KeyError(f"{{{{{expression}}}}}: no {column!r} of {method!r}")
        return found

    def mean(method: str, column: str) -> float:
        return statistics.fmean(values(method, column))

    if kind in ("m", "std", "n", "pm"):
        method, column = parts
        found = values(method, column)
        return {"m": lambda: f"{statistics.fmean(found):.{places}f}",
                "std": lambda: f"{statistics.stdev(found):.{places}f}",
                "n": lambda: str(len(found)),
                "pm": lambda: f"{statistics.fmean(found):.{places}f} ± "
                              f"{statistics.stdev(found):.{places}f}"}[kind]()
    if kind in ("d", "sd", "cmp"):
        first, second, column = parts
        gap = mean(first, column) - mean(second, column)
        if kind == "cmp":
            return compared(gap, 0)
        return f"{gap:+.{places}f}" if kind == "sd" else f"{gap:.{places}f}"
    column, methods = parts[0], parts[1].split(",")
    ordered = sorted(methods, key=lambda m: -mean(m, column))
    if kind == "rank":
        return ranked_text([(m.split("@")[0], mean(m, column)) for m in methods], places)
    extreme = ordered[0] if kind == "max" else ordered[-1]
    return f"{mean(extreme, column):.{places}f}"


def own_script(name: str) -> Path | None:
    """``benchmarks/NAME.py`` where it writes ``NAME.md`` itself: a ``render()`` that returns
    the file's text (as benchmarks/same_start.py does)."""
    script = ROOT / "benchmarks" / f"{name}.py"
    return script if script.is_file() and "\ndef render() -> str:" in script.read_text() else None


def generated_names() -> list[str]:
    """Every results file a program writes whole: a generator here or the file's own script."""
    return sorted(set(GENERATORS) | {p.stem for p in RESULTS.glob("*.md") if own_script(p.stem)})


def output_of(name: str) -> str:
    """The text the results file ``name``'s program writes."""
    if name in GENERATORS:
        return render(name)
    script = own_script(name)
    if script is None:
        raise KeyError(f"no program writes benchmarks/results/{name}.md")
    spec = importlib.util.spec_from_file_location(f"results_{name}", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.render()


def results_path(name: str) -> Path:
    return RESULTS / f"{name}.md"


#: What a sweep writes that a results folder publishes (``--from-sweep``), where present.
SWEEP_FILES = ("report.md", "runs.csv", "results.csv", "curves.csv", "curves.png",
               "partition*.png", "per_client_table.csv", "per_client_table.md", "selection.md")


def copy_sweep(sweep: Path, name: str) -> list[Path]:
    """Copy the tables and figures of the sweep folder ``sweep`` (``fedlight sweep``'s
    ``--out``, after ``python -m fedlight.analysis.per_client`` where a table needs it) and
    each run's ``summary.json`` (as ``summaries/<run>.json``) into
    ``benchmarks/results/<name>/``; the copied paths."""
    target = RESULTS / name
    target.mkdir(exist_ok=True)
    copied = []
    for pattern in SWEEP_FILES:
        for path in sorted(sweep.glob(pattern)):
            (target / path.name).write_bytes(path.read_bytes())
            copied.append(target / path.name)
    # each run's summary.json (what runs.csv leaves out, such as dp_epsilon)
    for path in sorted(sweep.glob("runs/*/summary.json")):
        (target / "summaries").mkdir(exist_ok=True)
        copy = target / "summaries" / f"{path.parent.name}.json"
        copy.write_bytes(path.read_bytes())
        copied.append(copy)
    return copied


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"results files to write: {', '.join(GENERATORS)}"
                        " (all when none)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming each file that differs from its output")
    parser.add_argument("--from-sweep", type=Path, metavar="FOLDER",
                        help="first copy this sweep folder's tables and figures into the results "
                             "folder of the one NAME given")
    options = parser.parse_args(argv)
    unknown = [n for n in options.names if n not in GENERATORS]
    if unknown:
        parser.exit(2, f"error: no generator for {', '.join(unknown)}; valid: "
                       f"{', '.join(GENERATORS)}\n")
    if options.from_sweep is not None:
        if len(options.names) != 1 or options.check:
            parser.exit(2, "error: --from-sweep takes one results NAME and no --check\n")
        if not (options.from_sweep / "runs.csv").is_file():
            parser.exit(2, f"error: {options.from_sweep}: no runs.csv (give the folder "
                           "fedlight sweep wrote)\n")
        for path in copy_sweep(options.from_sweep, options.names[0]):
            print(f"copied {path.relative_to(ROOT)}")
    stale = []
    for name in options.names or list(GENERATORS):
        text = render(name)
        if options.check:
            if not results_path(name).is_file() or results_path(name).read_text() != text:
                stale.append(name)
        else:
            results_path(name).write_text(text)
            print(f"wrote {results_path(name).relative_to(ROOT)}")
    if stale:
        parser.exit(1, f"differ from their generator's output: {', '.join(stale)}\n")


def runs_table(runs: list[dict[str, str]], rows: Sequence[tuple[str, str]],
               columns: Sequence[tuple[str, str, str]]) -> str:
    """A table of ``rows`` (label, METHOD or METHOD@SETTING of runs.csv) and ``columns``
    (title, runs.csv column, style: "pm" mean ± sample std in %, "m" the mean in %, "s" the
    mean in whole seconds, "n" the number of runs); "-" where no run has a value."""
    def values(method: str, column: str) -> list[float]:
        name, _, setting = method.partition("@")
        return [v for r in runs if r["method"] == name
                and (not setting or r["setting"] == setting)
                for v in [number(r[column])] if v is not None]

    def shown(method: str, column: str, style: str) -> str:
        found = values(method, column)
        if not found:
            return "-"
        return {"pm": lambda: mean_std(found), "m": lambda: pct(statistics.fmean(found)),
                "s": lambda: f"{statistics.fmean(found):.0f}",
                "n": lambda: str(len(found))}[style]()

    return table(["method", *(t for t, _, _ in columns)], "l" + "r" * len(columns),
                 [[label, *(shown(method, c, style) for _, c, style in columns)]
                  for label, method in rows])


# ----------------------------------------------------------------------------- map_distillation
MAP_PAPER = "MAP"


def map_distillation() -> Fields:
    folder = RESULTS / "map_distillation"
    runs = read_csv(folder / "runs.csv")
    curves = read_csv(folder / "curves.csv")
    seeds = sorted({r["seed"] for r in runs}, key=int)
    methods = ["FedRS", "MAP", "FedAvg", "FedPHP"]

    def values(method: str, setting: str, column: str) -> list[float]:
        return [v for r in runs if r["method"] == method and r["setting"] == setting
                for v in [number(r[column])] if v is not None]

    def last(method: str, setting: str, seed: str, column: str) -> float:
        return next(float(r[column]) for r in runs if (r["method"], r["setting"], r["seed"])
                    == (method, setting, seed))

    evaluations = sorted({int(r["round"]) for r in curves})
    columns = [("last global", "last global"), ("last personalized", "last personalized"),
               ("last personalized_accuracy_mean", "last personalized, mean over clients"),
               ("last hpm_accuracy_mean", "last HPM, mean over clients"),
               ("mean last-10 personalized",
                f"mean of all {len(evaluations)} evaluations (rounds {evaluations[0]}-"
                f"{evaluations[-1]}), personalized"),
               ("std (fairness)", "std over clients (fairness)"), ("CPU s / run", "CPU s / run")]
    fields: Fields = {}
    for setting in ("cifar10", "cifar100"):
        rows = []
        for method in methods:
            count = len(values(method, setting, "last global"))
            cells = [f"{method} ({setting})",
                     str(count) if count == len(seeds) else f"{count} of {len(seeds)}"]
            for column, _ in columns:
                found = values(method, setting, column)
                if not found:
                    cells.append("-")
                elif column == "CPU s / run":
                    cells.append(f"{statistics.fmean(found):.0f}")
                elif column == "std (fairness)":
                    cells.append(pct(statistics.fmean(found)))
                else:
                    cells.append(mean_std(found))
            rows.append(cells)
        fields[f"table_{setting}"] = table(["method", "seeds", *(t for _, t in columns)],
                                           ["l", "r", *("r" * len(columns))], rows)
    fields["evaluations"] = str(len(evaluations))

    def minus(first: str, second: str, setting: str, column: str = "last personalized"
              ) -> list[float]:
        return [100 * (last(first, setting, s, column) - last(second, setting, s, column))
                for s in seeds]

    fields["map_minus_fedrs_cifar10"] = joined([signed(g) for g in minus("MAP", "FedRS",
                                                                         "cifar10")])
    fields["map_minus_fedrs_cifar100"] = joined([signed(g) for g in minus("MAP", "FedRS",
                                                                          "cifar100")])
    personalization = "cifar10/TFCNN/personalization"
    aggregation = "cifar10/TFCNN/aggregation"
    fields["paper_map_over_fedrs"] = paper_gap(MAP_PAPER, "MAP", "FedRS", personalization)
    fields["fedphp_minus_fedavg_cifar10"] = joined([signed(g) for g in minus(
        "FedPHP", "FedAvg", "cifar10")])
    fields["paper_fedphp_over_fedavg"] = paper_gap(MAP_PAPER, "FedPHP", "FedAvg",
                                                   personalization)
    fields["paper_fedphp_over_fedavg_aggregation"] = paper_gap(MAP_PAPER, "FedPHP", "FedAvg",
                                                               aggregation)
    same = all(last("FedPHP", "cifar10", s, "last global") == last("FedAvg", "cifar10", s,
                                                                    "last global") for s in seeds)
    fields["fedphp_global_is_fedavg"] = (
        f"FedAvg's {in_seeds(len(seeds) if same else 0, len(seeds))} "
        f"({mean_std(values('FedPHP', 'cifar10', 'last global'))} both)" if same else
        "not FedAvg's")
    quoted = ("MAP", "FedRS", "FedPHP", "FedAvg")
    fields["paper_line"] = "; ".join(f"{m} {paper_digits(MAP_PAPER, m, aggregation)} / "
                                     f"{paper_digits(MAP_PAPER, m, personalization)}"
                                     for m in quoted)
    # the runs that stopped, from the sweep's report.md ("... in round N, phase 'P' ...")
    failed = re.findall(r"Failed: (\w+) / (\w+) / seed (\d+): .*? in round (\d+), phase '(\w+)'",
                        (folder / "report.md").read_text())
    fields["failed_methods"] = joined([m for m, _ in sorted({(m, "") for m, *_ in failed})])
    fields["failed_seeds"] = joined(sorted({seed for *_, seed, _, _ in failed}))
    failed_rounds = sorted(int(r) for *_, r, _ in failed)
    fields["failed_rounds"] = f"{failed_rounds[0]}-{failed_rounds[-1]}"
    fields["failed_phases"] = "; ".join(
        f"{m} in its {'distillation phase' if p == 'personalize' else 'local training'}"
        for m, p in sorted({(m, p) for m, _, _, _, p in failed}, reverse=True))
    finished_all = [m for m in methods if len(values(m, "cifar100", "last global")) == len(seeds)]
    fields["finished_all"] = joined(finished_all)
    seed0 = {m: 100 * last(m, "cifar100", seeds[0], "last personalized") for m in methods}
    ranked = sorted(seed0.items(), key=lambda item: -item[1])
    top = [m for m, v in ranked if v == ranked[0][1]]
    others = [v for m, v in seed0.items() if m not in finished_all]
    ahead = min(seed0[m] for m in finished_all) > max(others)
    fields["seed0_ahead"] = "also ahead" if ahead else "not both ahead"
    fields["seed0_ranking"] = ", ".join(
        [f"{joined(top)} {ranked[0][1]:.2f}"] + [f"{m} {v:.2f}" for m, v in ranked[len(top):]])
    # the inherited model against the personalized one, both as means over clients
    hpm = values("MAP", "cifar100", "last hpm_accuracy_mean")
    personal = values("MAP", "cifar100", "last personalized_accuracy_mean")
    gaps = [100 * (h - p) for h, p in zip(hpm, personal, strict=True)]
    fields["hpm_cifar100"] = mean_std(hpm)
    fields["personal_mean_cifar100"] = mean_std(personal)
    fields["hpm_above_in"] = in_seeds(sum(g > 0 for g in gaps), len(gaps))
    fields["hpm_gap_mean"] = f"{statistics.fmean(gaps):.2f}"
    fields["hpm_gaps"] = joined([signed(g) for g in gaps])
    fields["hpm_gap_std"] = within_std(statistics.fmean(gaps), 100 * statistics.stdev(hpm))
    fields["pooled_cifar100"] = mean_std(values("MAP", "cifar100", "last personalized"))
    return fields


# ----------------------------------------------------------------------------- office_caltech10
FEDPICK_PAPER = "FedPick"
DOMAINS = ("amazon", "caltech", "dslr", "webcam")


def office_caltech10_fedpick_table2() -> Fields:
    folder = RESULTS / "office_caltech10_fedpick_table2"
    rows = read_csv(folder / "per_client_table.csv")
    methods = list(dict.fromkeys(r["method"] for r in rows))
    ours = {(r["method"], r["name"]): (100 * float(r["mean"]), 100 * float(r["std"]),
                                       int(r["seeds"])) for r in rows}
    runs = read_csv(folder / "runs.csv")
    seeds = len({r["seed"] for r in runs})

    def cell(method: str, column: str) -> str:
        mean, std, _ = ours[method, column]
        return f"{mean:.2f} ± {std:.2f}"

    def theirs(method: str, domain: str) -> float:
        return paper(FEDPICK_PAPER, method, f"office_caltech10/{domain}")

    def paper_average(method: str) -> float:
        return statistics.fmean(theirs(method, d) for d in DOMAINS)

    fields: Fields = {}
    fields["table"] = table(
        ["method", *DOMAINS, "Avg", "seeds"], "lrrrrrr",
        [[m, *(cell(m, c) for c in (*DOMAINS, "Avg")), str(ours[m, "Avg"][2])] for m in methods])
    fields["paper_table"] = table(
        ["method", "A (amazon)", "C (caltech)", "D (dslr)", "W (webcam)",
         "mean of the four (computed)"], "lrrrrr",
        [[m, *(paper_digits(FEDPICK_PAPER, m, f"office_caltech10/{d}") for d in DOMAINS),
          f"{paper_average(m):.2f}"] for m in methods])
    fields["seeds"] = str(seeds)

    def mean(method: str, column: str) -> float:
        return ours[method, column][0]

    def first(column: str) -> str:
        return max(methods, key=lambda m: mean(m, column))

    first_on = [d for d in DOMAINS if first(d) == "FedPick"]
    fields["fedpick_first_on"] = joined(first_on)
    fields["fedpick_first_on_average"] = ("and on average" if first("Avg") == "FedPick"
                                          else "but not on average")
    top = sorted(methods, key=lambda m: -mean(m, "Avg"))[:3]
    fields["top_averages"] = (f"average {cell(top[0], 'Avg')}, then "
                              + joined([f"{m} {cell(m, 'Avg')}" for m in top[1:]]))
    others = [d for d in DOMAINS if d not in first_on]
    fields["not_first_on"] = joined(others)
    fields["above_fedpick_elsewhere"] = "; ".join(
        f"{first(d)} is above it on {d} ({cell(first(d), d)} against {cell('FedPick', d)}, "
        f"a gap of "
        f"{mean(first(d), d) - mean('FedPick', d):.2f}, "
        f"{within_std(mean(first(d), d) - mean('FedPick', d), ours['FedPick', d][1])} of "
        f"FedPick's)" for d in others)
    fields["paper_first_elsewhere"] = "; ".join(
        f"on {d} the paper has {paper_first(methods, d, theirs)}" for d in others)
    # webcam: the paper's tie and our margin
    fields["webcam_paper"] = paper_first(methods, "webcam", theirs)
    runner = sorted(methods, key=lambda m: -mean(m, "webcam"))[1]
    lead = mean("FedPick", "webcam") - mean(runner, "webcam")
    fields["webcam_lead"] = f"{lead:.2f} {compared(lead, 0)} {runner}"
    fields["webcam_std"] = within_std(lead, ours["FedPick", "webcam"][1])
    fields["webcam_paper_ties"] = ("ties the two" if "tied" in fields["webcam_paper"]
                                   else "does not tie them")
    fields["webcam_ours"] = (
        f"FedPick {cell('FedPick', 'webcam')} against {runner}'s {cell(runner, 'webcam')}, a lead "
        f"of {lead:.2f}, {within_std(lead, ours['FedPick', 'webcam'][1])} of FedPick's")
    # the order of the averages, ours and the paper's
    order = sorted(methods, key=lambda m: -mean(m, "Avg"))
    paper_order = sorted(methods, key=lambda m: -paper_average(m))
    fields["order_ours"] = " > ".join(f"{m} {mean(m, 'Avg'):.2f}" for m in order)
    fields["order_paper"] = " > ".join(f"{m} {paper_average(m):.2f}" for m in paper_order)
    same = [m for i, m in enumerate(order) if paper_order[i] == m]
    moved = [f"{m} ({ordinal(paper_order.index(m) + 1)} there, {ordinal(order.index(m) + 1)} "
             "here)"
             for m in order if m not in same]
    fields["order_same"] = joined(same)
    fields["order_moved"] = joined(moved) if moved else "none"
    # for the summaries in README.md and docs/results.md (tests/test_published_numbers.py)
    fields["moved_names"] = joined([m for m in order if m not in same])
    fields["moved_paper_places"] = joined([ordinal(paper_order.index(m) + 1) for m in order
                                           if m not in same])
    # FedProx against FedAvg, domain by domain, against FedAvg's seed std
    gaps = {d: mean("FedProx", d) - mean("FedAvg", d) for d in DOMAINS}
    inside = [d for d in DOMAINS if abs(gaps[d]) <= ours["FedAvg", d][1]]
    outside = [d for d in DOMAINS if d not in inside]
    fields["fedprox_average"] = f"{cell('FedProx', 'Avg')} against {cell('FedAvg', 'Avg')}"
    fields["fedprox_inside"] = joined(inside) if inside else "no domain"
    fields["fedprox_outside"] = "; ".join(
        f"not on {d} ({signed(gaps[d])} against FedAvg's std {ours['FedAvg', d][1]:.2f})"
        for d in outside) or "and on every other"
    fields["paper_fedprox_fedavg"] = (f"{paper_average('FedProx'):.2f} against "
                                      f"{paper_average('FedAvg'):.2f}")
    fedbn_above = [d for d in DOMAINS if mean("FedBN", d) > mean("FedAvg", d)]
    fields["fedbn_above_fedavg"] = ("on every domain" if len(fedbn_above) == len(DOMAINS)
                                    else "on " + joined(fedbn_above))
    four = ("FedPick", "FedBN", "FedAvg", "SingleSet")
    caltech = sorted(four, key=lambda m: -mean(m, "caltech"))
    paper_caltech = sorted(four, key=lambda m: -theirs(m, "caltech"))
    fields["caltech_order"] = " > ".join(caltech)
    fields["caltech_is_papers"] = ("the paper's" if caltech == paper_caltech else
                                   "not the paper's (" + " > ".join(paper_caltech) + ")")
    # dslr: the shared-encoder, private-head methods against SingleSet
    fields["dslr_ours"] = (f"{mean('FedPer', 'dslr'):.2f} and {mean('FedRep', 'dslr'):.2f} "
                           f"against {mean('SingleSet', 'dslr'):.2f}, "
                           f"{mean('SingleSet', 'dslr') - mean('FedPer', 'dslr'):.2f} and "
                           f"{mean('SingleSet', 'dslr') - mean('FedRep', 'dslr'):.2f} points")
    fields["dslr_paper"] = (f"{theirs('FedPer', 'dslr'):.2f} and {theirs('FedRep', 'dslr'):.2f} "
                            f"against {theirs('SingleSet', 'dslr'):.2f}, "
                            f"{theirs('SingleSet', 'dslr') - theirs('FedPer', 'dslr'):.2f} and "
                            f"{theirs('SingleSet', 'dslr') - theirs('FedRep', 'dslr'):.2f}")
    single = [d for d in DOMAINS if mean("SingleSet", d) > mean("FedAvg", d)]
    paper_single = [d for d in DOMAINS if theirs("SingleSet", d) > theirs("FedAvg", d)]
    fields["singleset_above_fedavg"] = joined(single)
    fields["paper_singleset_above_fedavg"] = joined(paper_single)
    return fields


def ordinal(place: int) -> str:
    """1st, 2nd, 3rd, 4th, ..."""
    return f"{place}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(place if place < 20 else place % 10, 'th')}"


def paper_first(methods: Sequence[str], domain: str, theirs: Callable[[str, str], float]) -> str:
    """Who the paper puts first on ``domain`` ("A and B tied at V" for a tie), with the value."""
    best = max(theirs(m, domain) for m in methods)
    top = [m for m in methods if theirs(m, domain) == best]
    runner = max(theirs(m, domain) for m in methods if m not in top)
    if len(top) > 1:
        return f"{joined(top)} tied first at {best:.2f}"
    return f"{top[0]} first ({best:.2f} against {runner:.2f})"


# ----------------------------------------------------------------------------- cifar100_privatize
WAYS = {"AB": "all shared (FedAvg)", "aB": "private encoder", "ab": "all private (Local)",
        "Ab": "private classifier (FedPer)", "AaB": "+ private encoder copy",
        "AaBb": "+ private model copy", "ABb": "+ private classifier copy",
        "AutoCS": "cross-stitch on AaBb", "AutoSA": "soft attention on AaBb",
        "AutoHS": "hard Gumbel selection on AaBb"}
# "Aggregate or Not?" (arXiv:2107.11954) Sec. 5.4: "we vary eta in {0.01, 0.03, 0.05}" for
# FeCifar10 and FeCifar100 and report the best by the mean of the last 5 recorded values
PRIVATIZE_PAPER_LR_GRID = "{0.01, 0.03, 0.05}"


def privatize_table(runs: list[dict[str, str]]) -> str:
    """The ways' table of a where-to-privatize sweep (accuracies in %, mean ± sample std)."""
    def values(way: str, column: str) -> list[float]:
        return [v for r in runs if r["method"] == way for v in [number(r[column])]
                if v is not None]

    columns = ["last global", "best global", "best personalized", "last personalized",
               "mean last-10 personalized"]
    return table(
        ["way", "meaning", "aggregation, last", "aggregation, best", "personalization, best",
         "personalization, last", "personalization, mean last-10", "CPU s / run"],
        "llrrrrrr",
        [[w, meaning, *(mean_std(values(w, c)) if values(w, c) else "-" for c in columns),
          f"{statistics.fmean(values(w, 'CPU s / run')):.0f}"] for w, meaning in WAYS.items()])


def cifar10_privatize() -> Fields:
    runs = read_csv(RESULTS / "cifar10_privatize" / "runs.csv")

    def values(way: str, column: str) -> list[float]:
        return [100 * v for r in runs if r["method"] == way for v in [number(r[column])]
                if v is not None]

    def mean(way: str, column: str) -> float:
        return statistics.fmean(values(way, column))

    best = "best personalized"
    private = ["ab", "aB"]
    shared = [w for w in WAYS if w not in private]
    ordered = sorted(WAYS, key=lambda w: mean(w, best))
    fields: Fields = {"table": privatize_table(runs), "runs": str(len(runs)),
                      "cpu_minutes": f"{sum(float(r['CPU s / run']) for r in runs) / 60:.1f}",
                      "paper_lr_grid": PRIVATIZE_PAPER_LR_GRID,
                      "seeds": str(len({r["seed"] for r in runs}))}
    fields["private_order"] = ('"ab" (Local) is last and "aB" next to it'
                               if ordered[:2] == private else
                               "the two private-encoder ways are not the last two")
    lowest_shared = min(shared, key=lambda w: mean(w, best))
    low = mean(lowest_shared, best) - max(mean(w, best) for w in private)
    high = max(mean(w, best) for w in shared) - min(mean(w, best) for w in private)
    fields["encoder_gap"] = f"{low:.1f}-{high:.1f}"
    fields["encoder_gap_low"] = f"{low:.1f} under the lowest of them, {lowest_shared}"
    last10 = "mean last-10 personalized"
    first = {max(WAYS, key=lambda w: mean(w, c)) for c in (best, last10)}
    fields["abb_first"] = "first" if first == {"ABb"} else "not first in both"
    autos = ["AutoCS", "AutoSA", "AutoHS"]
    lowest_auto = min(autos, key=lambda w: mean(w, best))
    fields["autohs_lowest"] = "the lowest" if lowest_auto == "AutoHS" else "not the lowest"
    complete = [w for w in WAYS if values(w, "last global")]

    def span(column: str) -> str:
        found = [mean(w, column) for w in complete]
        return f"{min(found):.1f}-{max(found):.1f}"

    fields["aggregation_last"] = span("last global")
    fields["aggregation_best"] = span("best global")
    stds = {w: statistics.stdev(values(w, "last global")) for w in complete}
    largest = max(statistics.stdev(values(w, c)) for w in complete
                  for c in ("last global", "best global"))
    fields["aggregation_std"] = f"{largest:.2f}"
    steadiest = min(stds, key=stds.get)
    fields["steadiest"] = (f'"{steadiest}" is the most stable '
                           f"({mean_std([v / 100 for v in values(steadiest, 'last global')])})")
    top = max(complete, key=lambda w: mean(w, "last global"))
    fields["steadiest_best"] = ("and the best" if steadiest == top else
                                f"but not the best ({top} {mean(top, 'last global'):.2f})")
    same = all(values("AaBb", c) == values("AB", c) for c in ("last global", "best global"))
    fields["aabb_equals_ab"] = "equals" if same else "differs from"
    gaps = {w: mean("ABb", best) - mean(w, best) for w in autos}
    ratios = [gaps[w] / max(statistics.stdev(values(w, best)),
                            statistics.stdev(values("ABb", best))) for w in autos]
    fields["auto_gap"] = f"{min(gaps.values()):.1f}-{max(gaps.values()):.1f}"
    fields["auto_ratio"] = f"{min(ratios):.1f}-{max(ratios):.1f}"
    return fields


def cifar100_privatize() -> Fields:
    folder = RESULTS / "cifar100_privatize"
    runs = read_csv(folder / "runs.csv")
    seeds = sorted({r["seed"] for r in runs}, key=int)

    def values(way: str, column: str) -> list[float]:
        return [v for r in runs if r["method"] == way for v in [number(r[column])]
                if v is not None]

    def mean(way: str, column: str) -> float:
        return 100 * statistics.fmean(values(way, column))

    def std(way: str, column: str) -> float:
        return 100 * statistics.stdev(values(way, column))

    def cell(way: str, column: str) -> str:
        return mean_std(values(way, column)) if values(way, column) else "-"

    fields: Fields = {"table": privatize_table(runs)}
    fields["seeds"] = str(len(seeds))
    fields["runs"] = str(len(runs))
    fields["cpu_minutes"] = f"{sum(float(r['CPU s / run']) for r in runs) / 60:.1f}"
    fields["paper_lr_grid"] = PRIVATIZE_PAPER_LR_GRID
    private, shared = ["aB", "ab"], [w for w in WAYS if w not in ("aB", "ab")]

    def span(ways: Sequence[str], column: str) -> str:
        found = sorted(mean(w, column) for w in ways)
        return f"{found[0]:.2f}-{found[-1]:.2f}"

    last10, best = "mean last-10 personalized", "best personalized"
    lowest = sorted(WAYS, key=lambda w: mean(w, last10))[:2]
    fields["private_last"] = ("last" if set(lowest) == set(private) else "not last")
    fields["private_last10"] = joined([f"{mean(w, last10):.2f}" for w in private])
    fields["shared_last10"] = span(shared, last10)
    fields["private_best"] = joined([f"{mean(w, best):.2f}" for w in private])
    fields["shared_best"] = span(shared, best)
    gap = mean("aB", last10) - mean("ab", last10)
    fields["aB_vs_ab"] = compared(mean("aB", last10), mean("ab", last10))
    fields["aB_vs_ab_std"] = within_std(gap, min(std("aB", last10), std("ab", last10)))
    fields["aB_ab_cells"] = f"{cell('aB', last10)} against {cell('ab', last10)}"
    top = {c: max(WAYS, key=lambda w: mean(w, c)) for c in (best, last10)}
    fields["abb_is_best"] = ("the highest of all ten rows in both" if set(top.values()) == {"ABb"}
                             else "not the highest in both")
    fields["abb_best"] = f"{mean('ABb', best):.2f}"
    fields["abb_last10"] = f"{mean('ABb', last10):.2f}"
    fields["abb_over"] = joined([f'"{w}" ({mean(w, best):.2f}, {mean(w, last10):.2f})'
                                 for w in ("AaBb", "AaB")])
    complete = [w for w in WAYS if values(w, "last global")]
    others = [w for w in complete if w != "AaB"]
    worst = min(complete, key=lambda w: mean(w, "last global"))
    fields["aab_worst"] = ("the worst" if worst == "AaB" and min(
        complete, key=lambda w: mean(w, "best global")) == "AaB" else "not the worst")
    fields["aab_aggregation"] = (f"last {mean('AaB', 'last global'):.2f}, best "
                                 f"{mean('AaB', 'best global'):.2f}, against "
                                 f"{span(others, 'last global')} and "
                                 f"{span(others, 'best global')}")
    fields["aab_vs_ab_personal"] = (
        f"{compared(mean('AaB', last10), mean('AB', last10), 'above', 'under')} \"AB\" in "
        f"personalization (mean last-10 {mean('AaB', last10):.2f} against "
        f"{mean('AB', last10):.2f})")
    fields["abb_vs_ab_aggregation"] = (
        f"{compared(mean('ABb', 'last global'), mean('AB', 'last global'))} \"AB\" in aggregation "
        f"({cell('ABb', 'last global')} against {cell('AB', 'last global')}, last)")
    ab_gap = mean("Ab", last10) - mean("AB", last10)
    fields["ab_vs_AB"] = (f"{within_std(ab_gap, std('AB', last10))} of \"AB\" in "
                          f"personalization (mean last-10 {mean('Ab', last10):.2f} against "
                          f"{mean('AB', last10):.2f})")
    same = all(a == b for a, b in zip(values("AaBb", "last global"), values("AB", "last global"),
                                      strict=True)) and all(
        a == b for a, b in zip(values("AaBb", "best global"), values("AB", "best global"),
                               strict=True))
    fields["aabb_equals_ab"] = ("equals" if same else "differs from")
    autos = ["AutoSA", "AutoCS", "AutoHS"]
    fields["auto_aggregation"] = ", ".join(f"{w} {mean(w, 'best global'):.2f}" for w in sorted(
        autos, key=lambda w: -mean(w, "best global")))
    fields["abb_best_global"] = f"{mean('ABb', 'best global'):.2f}"

    def place(way: str) -> str:
        value, low, high = mean(way, last10), mean("AB", last10), mean("ABb", last10)
        where = ("between them" if low < value < high else
                 "under both" if value < low else "above both" if value > high else "equal")
        return f"{way} {value:.2f} {where}"

    fields["auto_personal"] = "; ".join(place(w) for w in ("AutoCS", "AutoSA", "AutoHS"))
    fields["ab_abb_last10"] = f"{mean('AB', last10):.2f} and {mean('ABb', last10):.2f}"
    at_best = sum(r["best global"] == r["last global"] for r in runs if r["last global"])
    fields["global_at_best"] = f"{at_best} of {len(complete) * len(seeds)}"
    fields["fedavg_global"] = f"{mean('AB', 'last global'):.2f}"
    return fields


# ------------------------------------------------------------------------ vs_pfllib_three_seeds
VS_PFLLIB = RESULTS / "vs_pfllib_three_seeds"
# setting -> (the raw files' stem, the changed PFLlib runs: change -> the logs' glob)
VS_PFLLIB_SETTINGS = {
    "CIFAR-100": ("cifar100_dirichlet", {
        "training loader keeps the last batch": "pfllib_*_no_drop_last_cifar100_seed?.txt",
        "conditional inputs from the table received this round":
            "pfllib_gpfl_received_table_cifar100_seed?.txt"}),
    "CIFAR-10": ("cifar10_pathological", {
        "training loader keeps the last batch": "pfllib_*_no_drop_last_cifar10_seed?.txt",
        "conditional inputs from the table received this round":
            "pfllib_gpfl_received_table_cifar10_seed?.txt"}),
}
LAST = 10  # the shared evaluations averaged in the "last ten" columns


def vs_pfllib_script() -> object:
    """benchmarks/vs_pfllib_seeds.py as a module (it imports vs_pfllib beside it)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import vs_pfllib_seeds

    return vs_pfllib_seeds


def vs_pfllib_raw(setting: str) -> list[Path]:
    stem = VS_PFLLIB_SETTINGS[setting][0]
    return [VS_PFLLIB / f"{stem}_seed{seed}.csv" for seed in range(3)]


def vs_pfllib_changes(setting: str) -> list[list[str]]:
    """``--changed`` entries: the change's name and its logs, as the command gives them."""
    return [[change, *sorted(str(p) for p in VS_PFLLIB.glob(pattern))]
            for change, pattern in VS_PFLLIB_SETTINGS[setting][1].items()]


def vs_pfllib_numbers(setting: str) -> dict[str, dict[str, list]]:
    """Per method: "best" [(fedlight, PFLlib)] over each library's own rounds, "shared best"
    and "tail" [(fedlight, PFLlib)] over the shared rounds, per run; "cpu" the median CPU
    seconds (fedlight, PFLlib) over the runs; per change, [(fedlight, PFLlib, changed)]."""
    script = vs_pfllib_script()
    files = vs_pfllib_raw(setting)
    raws = [script.read_raw(path) for path in files]
    curves = [script.read_curves(path) for path in files]
    found: dict[str, dict[str, list]] = {}
    for raw, curve in zip(raws, curves, strict=True):
        accuracy = script.medians(raw, "best_accuracy", scale=100)
        cpu = script.medians(raw, "cpu_s")
        for (method, variant), ours in accuracy[0].items():
            entry = found.setdefault(method, {"best": [], "shared best": [], "tail": [],
                                              "cpu": []})
            entry["best"].append((ours, accuracy[1][method]))
            entry["cpu"].append((cpu[0][method, variant], cpu[1][method]))
            mine, theirs = curve[("fedlight", method, variant)], curve[("PFLlib", method, "")]
            shared = sorted(mine.keys() & theirs.keys())
            entry["shared best"].append((max(mine[r] for r in shared),
                                         max(theirs[r] for r in shared)))
            entry["tail"].append(script.tail_means((mine, theirs), LAST))
    datasets = [script.pfllib_dataset(raw, path) for raw, path in zip(raws, files, strict=True)]
    for change, *logs in vs_pfllib_changes(setting):
        for log in logs:
            index, method, changed = script.read_changed_log(Path(log), datasets)
            variant = next(v for lib, m, v in curves[index] if lib == "fedlight" and m == method)
            found[method].setdefault(change, [None] * len(files))[index] = script.tail_means(
                (curves[index][("fedlight", method, variant)],
                 curves[index][("PFLlib", method, "")], changed), LAST)
    return found


def differences(pairs: Sequence[tuple[float, ...]]) -> list[float]:
    return [pair[0] - pair[1] for pair in pairs]


def same_start(draw: int) -> dict[str, list[float]]:
    """The accuracy (%) of PFLlib and fedlight after rounds 1..30 from initial draw ``draw``
    on the seed-0 CIFAR-100 split (benchmarks/gpfl_rounds_vs_pfllib.py's output)."""
    suffix = "" if draw == 0 else "_fedlight_only"
    return same_start_rows(VS_PFLLIB / f"gpfl_same_start_cifar100_split0_init{draw}{suffix}.txt")


def same_start_rows(path: Path) -> dict[str, list[float]]:
    rows = [line.split() for line in path.read_text().splitlines() if re.match(r"\s+\d+\s", line)]
    return {"PFLlib": [float(r[1]) for r in rows], "fedlight": [float(r[2]) for r in rows]}


def last_ten_states(curve: list[float]) -> float:
    """The mean of the states after 20..29 trained rounds (the shared rounds' last ten)."""
    return statistics.fmean(curve[19:29])


def largest_differences(path: Path) -> dict[str, str]:
    """The "largest |fedlight - PFLlib|" per module of a gpfl_*_vs_pfllib.py output, as printed
    (to two significant digits)."""
    line = next(x for x in path.read_text().splitlines() if "largest |fedlight - PFLlib|:" in x)
    return {name: f"{float(value):.1e}" for name, value in
            re.findall(r"(\w+) (\d\.\d+e-\d+)", line.split(":", 1)[1])}


def local_round(path: Path) -> dict[str, dict[str, tuple[float, float]]]:
    """gpfl_local_round_vs_pfllib.py's output: per form ("authors", "paper"), per module,
    (largest change in the round, largest |fedlight - PFLlib| after it)."""
    found: dict[str, dict[str, tuple[float, float]]] = {}
    form = ""
    for line in path.read_text().splitlines():
        if line.startswith("fedlight with"):
            form = "authors" if "not divided" in line else "paper"
        match = re.match(r"\s+(\w+)\s+largest change in the round (\S+), .* after it (\S+)", line)
        if match:
            found.setdefault(form, {})[match.group(1)] = (float(match.group(2)),
                                                          float(match.group(3)))
    return found


def vs_pfllib_three_seeds() -> Fields:
    script = vs_pfllib_script()
    fields: Fields = {}
    numbers = {s: vs_pfllib_numbers(s) for s in VS_PFLLIB_SETTINGS}
    for setting, key in (("CIFAR-100", "c100"), ("CIFAR-10", "c10")):
        files = vs_pfllib_raw(setting)
        fields[f"table_{key}_best"] = "\n".join(script.summary(files))
        fields[f"table_{key}_shared"] = "\n".join(script.same_states(files, LAST))
        fields[f"table_{key}_changed"] = "\n".join(script.changed_table(
            files, vs_pfllib_changes(setting), LAST))

    def mean_gap(setting: str, method: str, kind: str) -> float:
        return statistics.fmean(differences(numbers[setting][method][kind]))

    # differences over one point, best or last ten shared states
    over = []
    for setting in VS_PFLLIB_SETTINGS:
        for method in numbers[setting]:
            gaps = {k: mean_gap(setting, method, k) for k in ("best", "tail")}
            if any(abs(g) > 1 for g in gaps.values()):
                sign = "lower" if min(gaps.values()) < 0 else "higher"
                over.append(f"{method} on {setting} (fedlight {sign}: best "
                            f"{signed(gaps['best'])}, last ten shared states "
                            f"{signed(gaps['tail'])})")
    fields["over_one_point"] = "; ".join(over)
    avg = {s: numbers[s]["FedAvg"] for s in VS_PFLLIB_SETTINGS}
    fields["fedavg_best"] = " and ".join(
        f"{signed(mean_gap(s, 'FedAvg', 'best'))} ({s})" for s in VS_PFLLIB_SETTINGS)
    fields["fedavg_tail"] = " and ".join(
        signed(mean_gap(s, "FedAvg", "tail")) for s in VS_PFLLIB_SETTINGS)
    singles = [g for s in avg for g in differences(avg[s]["best"])]
    fields["fedavg_largest"] = max((f"{abs(mean_gap(s, 'FedAvg', k)):.2f}" for s in avg
                                    for k in ("best", "tail")), key=float)
    fields["fedavg_singles"] = f"from {signed(min(singles))} to {signed(max(singles))}"
    fields["fedavg_sign"] = ("change sign from split to split" if min(singles) < 0 < max(singles)
                             else "keep one sign")
    # FedPer and FedRep: the gap, and what keeping PFLlib's last batch leaves of it
    pairs = [(s, m) for s in VS_PFLLIB_SETTINGS for m in ("FedPer", "FedRep")]
    best = [mean_gap(s, m, "best") for s, m in pairs]
    tail = [mean_gap(s, m, "tail") for s, m in pairs]
    fields["perrep_best"] = f"{signed(max(best))} to {signed(min(best))}"
    fields["perrep_tail"] = f"{signed(max(tail))} to {signed(min(tail))}"
    lower = sum(g < 0 for s, m in pairs for k in ("best", "tail")
                for g in differences(numbers[s][m][k]))
    fields["perrep_splits"] = ("in every split" if lower == 2 * len(pairs) * 3
                               else f"in {lower} of {2 * len(pairs) * 3} split comparisons")
    keep = "training loader keeps the last batch"
    closed = []
    for s, m in pairs:
        before = statistics.fmean(differences(numbers[s][m]["tail"]))
        after = statistics.fmean(t[0] - t[2] for t in numbers[s][m][keep])
        closed.append((s, m, before, after, 100 * (1 - after / before)))
    fields["perrep_closed"] = "; ".join(
        f"{m} {signed(b)} -> {signed(a)} on {s} ({share:.0f} % of the gap)"
        for s, m, b, a, share in closed)
    fields["perrep_share"] = f"{min(c[4] for c in closed):.0f}-{max(c[4] for c in closed):.0f}"
    left = max(abs(c[3]) for c in closed)
    fields["perrep_left"] = f"{'under' if left < 1 else 'over'} one point (at most {left:.2f})"
    # GPFL on CIFAR-10: the inputs' timing
    received = "conditional inputs from the table received this round"
    gpfl10 = numbers["CIFAR-10"]["GPFL"]
    before = statistics.fmean(differences(gpfl10["tail"]))
    after = statistics.fmean(t[0] - t[2] for t in gpfl10[received])
    fields["gpfl10_best"] = signed(mean_gap("CIFAR-10", "GPFL", "best"))
    fields["gpfl10_tail"] = signed(before)
    fields["gpfl10_splits"] = in_splits(differences(gpfl10["tail"]), higher=True)
    fields["gpfl10_after"] = signed(after)
    fields["gpfl10_share"] = f"{100 * (1 - after / before):.0f}"
    # GPFL on CIFAR-100
    gpfl100 = numbers["CIFAR-100"]["GPFL"]
    fields["gpfl100_best"] = signed(mean_gap("CIFAR-100", "GPFL", "best"))
    fields["gpfl100_tail"] = signed(mean_gap("CIFAR-100", "GPFL", "tail"))
    fields["gpfl100_splits"] = in_splits(differences(gpfl100["tail"]), higher=False)
    fields["gpfl100_keep"] = signed(statistics.fmean(t[0] - t[2] for t in gpfl100[keep]))
    fields["gpfl100_received"] = signed(statistics.fmean(t[0] - t[2] for t in gpfl100[received]))
    draws = range(5)
    tails = [last_ten_states(same_start(d)["fedlight"]) for d in draws]
    fields["same_start_pfllib"] = f"{last_ten_states(same_start(0)['PFLlib']):.2f}"
    fields["same_start_fedlight"] = f"{tails[0]:.2f}"
    fields["draws"] = joined([f"{t:.2f}" for t in tails])
    fields["draws_mean"] = f"{statistics.fmean(tails):.2f}"
    fields["draws_std"] = f"{statistics.stdev(tails):.2f}"
    fields["draws_span"] = f"{max(tails) - min(tails):.1f}"
    fields["draw0_place"] = ("the best" if tails[0] == max(tails) else
                             f"{ordinal(sorted(tails, reverse=True).index(tails[0]) + 1)}")
    own = [own_last_ten(seed) for seed in range(3)]
    median = statistics.median(tails)
    fields["own_runs"] = joined([f"{t:.2f}" for t in own])
    fields["own_vs_median"] = (f"all under the median of the five draws ({median:.2f})"
                               if max(own) < median else
                               f"not all under the median of the five draws ({median:.2f})")
    # evaluation timing
    moves = {(s, m): statistics.fmean(a for a, _ in numbers[s][m]["best"])
             - statistics.fmean(a for a, _ in numbers[s][m]["shared best"])
             for s in VS_PFLLIB_SETTINGS for m in numbers[s]}
    (big_setting, big_method), _ = max(moves.items(), key=lambda item: abs(item[1]))
    fields["timing_case"] = f"{big_method} on {big_setting}"
    entry = numbers[big_setting][big_method]
    fields["timing_own"] = f"{statistics.fmean(a for a, _ in entry['best']):.2f}"
    fields["timing_shared"] = f"{statistics.fmean(a for a, _ in entry['shared best']):.2f}"
    grown = [(s, m) for s in VS_PFLLIB_SETTINGS for m in numbers[s]
             if m != "FedAvg" and abs(mean_gap(s, m, "tail")) > abs(mean_gap(s, m, "best"))]
    held = all(mean_gap(s, m, "tail") * mean_gap(s, m, "best") > 0
               for s in VS_PFLLIB_SETTINGS for m in numbers[s] if m != "FedAvg")
    fields["timing_hold"] = (
        f"{'they keep their sign' if held else 'not all keep their sign'} on the shared "
        f"states and grow there in {len(grown)} of "
        f"{sum(m != 'FedAvg' for s in VS_PFLLIB_SETTINGS for m in numbers[s])} cases")
    cheaper = all(a < b for s in VS_PFLLIB_SETTINGS for m in numbers[s]
                  for a, b in [(statistics.median(x for x, _ in numbers[s][m]["cpu"]),
                                statistics.median(y for _, y in numbers[s][m]["cpu"]))])
    fields["cpu_word"] = ("less than PFLlib for every method in both settings" if cheaper
                          else "not less than PFLlib for every method")
    # one client's local round and whole rounds from the same start
    round_one = local_round(VS_PFLLIB / "gpfl_local_round.txt")
    authors, paper_form = round_one["authors"], round_one["paper"]
    fields["local_authors"] = joined([f"{d:.1e} ({name_of(m)})" for m, (_, d) in
                                      authors.items()])
    changes = [c for c, _ in authors.values()]
    fields["local_changes"] = f"{min(changes):.1e} to {max(changes):.1e}"
    paper_diffs = [d for _, d in paper_form.values()]
    fields["local_paper"] = f"{min(paper_diffs):.1e} to {max(paper_diffs):.1e}"
    random_same = same_start_rows(VS_PFLLIB / "gpfl_rounds_random_clients.txt")
    fields["random_same"] = ("the same accuracy every round" if random_same["PFLlib"]
                             == random_same["fedlight"] else "different accuracies")
    fields["random_largest"] = max(largest_differences(
        VS_PFLLIB / "gpfl_rounds_random_clients.txt").values(), key=float)
    authors_inputs = VS_PFLLIB / "gpfl_rounds_random_clients_authors_inputs.txt"
    first = same_start_rows(authors_inputs)
    fields["random_authors_round1"] = (f"{first['PFLlib'][0]:.2f} against "
                                       f"{first['fedlight'][0]:.2f}")
    fields["random_authors_cov"] = largest_differences(authors_inputs)["CoV"]
    rows = []
    for draw, library in [(0, "PFLlib"), (0, "fedlight"), *((d, "fedlight") for d in range(1, 5))]:
        curve = same_start(draw)[library]
        suffix = "" if draw == 0 else "_fedlight_only"
        link = ("same file" if (draw, library) == (0, "fedlight") else
                f"[init{draw}](vs_pfllib_three_seeds/gpfl_same_start_cifar100_split0_init{draw}"
                f"{suffix}.txt)")
        rows.append([f"`torch.manual_seed({draw})`" + (" (PFLlib's)" if draw == 0 else ""),
                     library, f"{last_ten_states(curve):.2f}", f"{max(curve):.2f}", link])
    fields["table_draws"] = table(
        ["initial draw", "library", "mean of the states after 20..29 rounds (%)",
         "best over rounds 1..30 (%)", "raw output"], "llrrl", rows)
    both = same_start(0)
    equal = next(i for i, (a, b) in enumerate(zip(*both.values(), strict=True)) if a != b)
    fields["equal_rounds"] = str(equal)
    fields["within_after"] = f"{max(abs(a - b) for a, b in zip(*both.values(), strict=True)):.2f}"
    fields["split0_heads"] = largest_differences(
        VS_PFLLIB / "gpfl_same_start_cifar100_split0_init0.txt")["heads"]
    fields["split0_tail_gap"] = f"{abs(tails[0] - last_ten_states(both['PFLlib'])):.2f}"
    return fields


def in_splits(gaps: Sequence[float], higher: bool) -> str:
    """"in every split" where every gap has the sign, else "in k of n splits"."""
    count = sum(g > 0 if higher else g < 0 for g in gaps)
    return "in every split" if count == len(gaps) else f"in {count} of {len(gaps)} splits"


def name_of(module: str) -> str:
    return {"encoder": "4-layer CNN"}.get(module, module)


def own_last_ten(seed: int) -> float:
    """fedlight's own GPFL run on split ``seed``: the mean of its states after 20..29 rounds."""
    rows = {int(r["trained_rounds"]): 100 * float(r["accuracy"])
            for r in read_csv(VS_PFLLIB / f"cifar100_dirichlet_seed{seed}.rounds.csv")
            if r["method"] == "GPFL" and r["library"] == "fedlight"}
    return statistics.fmean(rows[k] for k in range(20, 30))


# ----------------------------------------------------------------------------- cifar10_gpfl_table1
def cifar10_gpfl_table1() -> Fields:
    runs = read_csv(RESULTS / "cifar10_gpfl_table1" / "runs.csv")
    methods = ["GPFL", "FedProto", "FedRep", "FedPer", "FedRoD", "Ditto", "FedAvg"]
    labels = {"FedRep": "FedRep (1 head epoch)"}
    fields: Fields = {"table": runs_table(
        runs, [(labels.get(m, m), m) for m in methods],
        [("best personalized", "best personalized", "pm"),
         ("last", "last personalized", "pm"),
         ("mean last-10", "mean last-10 personalized", "pm"),
         ("best global", "best global", "pm"),
         ("std over clients (fairness)", "std (fairness)", "m"),
         ("wall s / run", "wall s / run", "s"), ("CPU s / run", "CPU s / run", "s")])}
    fields["runs"] = str(len(runs))
    fields["wall_minutes"] = f"{sum(float(r['wall s / run']) for r in runs) / 60:.1f}"
    fields["cpu_minutes"] = f"{sum(float(r['CPU s / run']) for r in runs) / 60:.1f}"
    fields["seeds"] = str(len({r["seed"] for r in runs}))

    def mean(method: str, column: str = "best personalized") -> float:
        return 100 * statistics.fmean(float(r[column]) for r in runs if r["method"] == method)

    def std(method: str) -> float:
        return 100 * statistics.stdev(float(r["best personalized"]) for r in runs
                                      if r["method"] == method)

    ranked = sorted(methods, key=lambda m: -mean(m))
    fields["first"] = ranked[0]
    fields["runner_up"] = ranked[1]
    gap = mean(ranked[0]) - mean(ranked[1])
    fields["gap"] = f"{gap:.2f}"
    stds = sorted((std(ranked[0]), std(ranked[1])))
    fields["gap_in_stds"] = f"{gap / stds[1]:.1f}-{gap / stds[0]:.1f}"
    order = ["GPFL", "Ditto", "FedProto", "FedRep", "FedRoD", "FedPer", "FedAvg"]
    setting = "cifar100/dirichlet"
    fields["paper_order"] = " > ".join(f"{m} {paper_digits('GPFL', m, setting)}" for m in sorted(
        order, key=lambda m: -paper("GPFL", m, setting)))
    fields["paper_gap"] = f"{paper('GPFL', 'GPFL', setting) - paper('GPFL', 'Ditto', setting):.2f}"
    fields["our_order"] = " > ".join(f"{m} {mean(m):.2f}" for m in ranked)
    paper_ranked = sorted(methods, key=lambda m: -paper("GPFL", m, setting))
    same = [m for i, m in enumerate(ranked) if paper_ranked[i] == m]
    fields["order_same"] = joined(same) if same else "none"
    fields["next_three"] = f"{mean(ranked[1]) - mean(ranked[3]):.2f}"
    fields["next_three_names"] = joined(ranked[1:4])
    gaps = [(100 * (float(r["best personalized"]) - float(r["last personalized"])), r)
            for r in runs]
    largest, row = max(gaps, key=lambda item: item[0])
    gpfl_gap, gpfl_row = max((g for g in gaps if g[1]["method"] == "GPFL"), key=lambda i: i[0])
    fields["last_within"] = f"{largest:.2f}"
    fields["last_within_run"] = f"{row['method']} seed {row['seed']}"
    fields["gpfl_last_within"] = f"{gpfl_gap:.2f}, seed {gpfl_row['seed']}"
    above = sum(float(r["last personalized"]) > float(r["mean last-10 personalized"]) for r in runs)
    fields["above_last10"] = f"{above} of the {len(runs)}"
    fair = sorted(methods, key=lambda m: mean(m, "std (fairness)"))
    fields["fairness"] = ", ".join(f"{m} {mean(m, 'std (fairness)'):.2f}" for m in fair)
    return fields


# ---------------------------------------------------------------------- cifar10_fedpick_domains
DIGITS = ("MM", "MT", "UP", "SY", "SV")


def cifar10_fedpick_domains() -> Fields:
    folder = RESULTS / "cifar10_fedpick_domains"
    runs = read_csv(folder / "runs.csv")
    methods = ["FedPick", "FedBN", "Local", "FedAvg"]
    fields: Fields = {"table": runs_table(
        runs, [(m, m) for m in methods],
        [("best personalized", "best personalized", "pm"),
         ("last (round 60)", "last personalized", "pm"),
         ("mean of the last 10 scored rounds (15-60)", "mean last-10 personalized", "pm"),
         ("std over clients (fairness)", "std (fairness)", "m"),
         ("wall s / run", "wall s / run", "s"), ("CPU s / run", "CPU s / run", "s")])}
    domains_rows = read_csv(folder / "per_domain_round60.csv")
    columns = list(dict.fromkeys(r["domain"] for r in domains_rows))
    domains = [d for d in columns if d != "mean"]
    cell = {(r["method"], r["domain"]): (float(r["mean"]), float(r["std"])) for r in domains_rows}
    fields["domain_table"] = table(
        ["method", *columns], "l" + "r" * len(columns),
        [[m, *(f"{cell[m, d][0]:.2f} ± {cell[m, d][1]:.2f}" for d in columns)] for m in methods])
    fields["runs"] = str(len(runs))
    fields["seeds"] = str(len({r["seed"] for r in runs}))
    cpu = [float(r["CPU s / run"]) for r in runs]
    fields["cpu_minutes"] = f"{sum(cpu) / 60:.1f}"
    fields["cpu_range"] = f"{min(cpu):.0f}-{max(cpu):.0f}"
    fields["wall_minutes"] = f"{sum(float(r['wall s / run']) for r in runs) / 60:.1f}"

    def mean(method: str, column: str = "best personalized") -> float:
        return 100 * statistics.fmean(float(r[column]) for r in runs if r["method"] == method)

    def std(method: str) -> float:
        return 100 * statistics.stdev(float(r["best personalized"]) for r in runs
                                      if r["method"] == method)

    def paper_mean(method: str) -> float:
        return statistics.fmean(paper(FEDPICK_PAPER, method, f"digits5/{d}") for d in DIGITS)

    quoted = ["FedPick", "FedBN", "FedAvg", "SingleSet"]
    fields["paper_order"] = " > ".join(
        f"{m}{' (= Local)' if m == 'SingleSet' else ''} {paper_mean(m):.2f}"
        for m in sorted(quoted, key=lambda m: -paper_mean(m)))
    fields["paper_domains"] = ", ".join(
        f"{m} {' / '.join(paper_digits(FEDPICK_PAPER, m, f'digits5/{d}') for d in DIGITS)}"
        for m in quoted)
    gap = mean("FedPick") - mean("FedBN")
    paper_gap_ = paper_mean("FedPick") - paper_mean("FedBN")
    fields["top"] = (f"FedPick {mean_std_points('FedPick', runs)} {compared(gap, 0)} FedBN "
                     f"{mean_std_points('FedBN', runs)}")
    fields["gap"] = f"{gap:.2f}"
    fields["gap_stds"] = f"{gap / std('FedPick'):.1f}"
    fields["paper_gap"] = f"{paper_gap_:.2f}"
    ours, theirs = gap / mean("FedBN"), paper_gap_ / paper_mean("FedBN")
    fields["relative"] = (f"{compared(ours, theirs, 'larger', 'smaller')} than the paper's "
                          f"{paper_gap_:.2f} points on Digits-Five in relative terms "
                          f"({100 * ours:.0f} % of FedBN's accuracy against {100 * theirs:.0f} %)")
    last10 = "mean last-10 personalized"
    holds = mean("FedPick", last10) > mean("FedBN", last10)
    fields["last10"] = (f"{'holds' if holds else 'does not hold'} on the mean of the last ten "
                        f"scored rounds ({mean('FedPick', last10):.2f} against "
                        f"{mean('FedBN', last10):.2f})")
    federated = ["FedPick", "FedBN", "FedAvg"]
    fair = sorted(federated, key=lambda m: mean(m, "std (fairness)"))
    fields["fairest"] = (f"{'also' if fair[0] == 'FedPick' else 'not'} the fairest federated "
                         "method (client std " + ", ".join(
                             f"{m} {mean(m, 'std (fairness)'):.1f}" for m in fair) + ")")
    first = {d: max(methods, key=lambda m: cell[m, d][0]) for d in domains}
    fedpick_first = [d for d in domains if first[d] == "FedPick"]
    fields["fedpick_first"] = (f"{len(fedpick_first)} of the {len(domains)} domains "
                               f"({joined(fedpick_first)})")
    others = sorted({first[d] for d in domains} - {"FedPick"})
    fields["others_first"] = "; ".join(
        f"{m} is first on {joined([d for d in domains if first[d] == m])}" for m in others)
    spread = {d: max(cell[m, d][0] for m in methods) - min(cell[m, d][0] for m in methods)
              for d in domains}
    widest = max(domains, key=spread.get)
    fields["widest"] = widest
    fields["widest_values"] = ", ".join(f"{m} {cell[m, widest][0]:.1f}" for m in sorted(
        methods, key=lambda m: cell[m, widest][0]))
    fields["recovers"] = f"{cell['FedPick', widest][0] - cell['FedBN', widest][0]:.2f}"
    local = mean("Local")
    fields["local_place"] = (
        f"Local ({local:.2f}) sits "
        + ("between FedBN" if mean("FedAvg") < local < mean("FedBN") else "outside FedBN")
        + f" ({mean('FedBN'):.2f}) and FedAvg ({mean('FedAvg'):.2f})")
    return fields


def mean_std_points(method: str, runs: list[dict[str, str]]) -> str:
    return mean_std([float(r["best personalized"]) for r in runs if r["method"] == method])


# ----------------------------------------------------------------------------- cifar10_map_table
MAP_C10_ROWS = [("MAP", "MAP"), ("FedRS", "FedRS"), ("FedPHP", "FedPHP"), ("FedAvg", "FedAvg"),
                ("FedRoD", "FedRoD"), ("Ditto (1 personal epoch)", "Ditto"),
                ("Ditto-E6 (6 personal epochs)", "Ditto-E6"), ("FedProx", "FedProx"),
                ("FedRep (10 head epochs)", "FedRep"), ("FedRep-H1 (1 head epoch)", "FedRep-H1")]
PAPER_NAME = {"Ditto-E6": "Ditto", "FedRep-H1": "FedRep"}  # our variants of a paper's row


def cifar10_map_table() -> Fields:
    runs = read_csv(RESULTS / "cifar10_map_table" / "runs.csv")
    aggregation, personalization = "cifar10/TFCNN/aggregation", "cifar10/TFCNN/personalization"

    def values(method: str, column: str) -> list[float]:
        return [100 * v for r in runs if r["method"] == method for v in [number(r[column])]
                if v is not None]

    def mean(method: str, column: str) -> float:
        return statistics.fmean(values(method, column))

    def std(method: str, column: str) -> float:
        return statistics.stdev(values(method, column))

    def per_seed(method: str, column: str) -> dict[str, float]:
        return {r["seed"]: 100 * float(r[column]) for r in runs if r["method"] == method}

    def paper_pair(method: str) -> str:
        name = PAPER_NAME.get(method, method)
        found = [row for row in read_csv(PAPER_VALUES) if row["paper"] == MAP_PAPER
                 and row["method"] == name]
        value = {row["setting"]: row["value"] for row in found}
        return f"{value.get(aggregation, '-')} / {value.get(personalization, '-')}"

    def shown(method: str, column: str) -> str:
        found = values(method, column)
        if not found:
            return "- (no global model)" if column == "last global" else "-"
        return f"{statistics.fmean(found):.2f} ± {statistics.stdev(found):.2f}"

    rows = [[label, str(len(values(m, "last personalized"))), shown(m, "last global"),
             shown(m, "last personalized"), shown(m, "mean last-10 personalized"),
             shown(m, "last hpm_accuracy_mean"), paper_pair(m),
             f"{statistics.fmean(float(r['CPU s / run']) for r in runs if r['method'] == m):.0f}"]
            for label, m in MAP_C10_ROWS]
    fields: Fields = {"table": table(
        ["method", "seeds", "aggregation, last", "personalization, last",
         "personalization, mean last-10", "HPM, last", "paper agg. / pers. (TFCNN)",
         "CPU s / run"], "lrrrrrrr", rows)}
    fields["runs"] = str(len(runs))
    fields["cpu_minutes"] = f"{sum(float(r['CPU s / run']) for r in runs) / 60:.1f}"
    fields["seeds"] = str(len({r["seed"] for r in runs}))
    with_global = [r for r in runs if number(r["best global"]) is not None]
    at_best = sum(r["best global"] == r["last global"] for r in with_global)
    fields["global_at_best"] = ("in every run" if at_best == len(with_global) else
                                f"in {at_best} of {len(with_global)} runs")
    fields["personal_before_last"] = (
        f"{sum(float(r['best personalized']) > float(r['last personalized']) for r in runs)} "
        f"of the {len(runs)}")
    last_g, last_p = "last global", "last personalized"
    # aggregation: the restricted softmax
    map_g, avg_g = per_seed("MAP", last_g), per_seed("FedAvg", last_g)
    fields["rs_every_seed"] = in_seeds(sum(map_g[s] > avg_g[s] for s in map_g), len(map_g))
    fields["rs_seeds"] = (" / ".join(f"{map_g[s]:.1f}" for s in sorted(map_g)) + " against "
                          + " / ".join(f"{avg_g[s]:.1f}" for s in sorted(avg_g)))
    fields["rs_gap"] = f"{mean('MAP', last_g) - mean('FedAvg', last_g):+.1f}"
    fields["paper_map_fedrs_agg"] = paper_gap(MAP_PAPER, "MAP", "FedRS", aggregation)
    # personalization
    four = ("MAP", "FedRS", "FedPHP", "FedAvg")
    stds = [std(m, last_p) for m in four]
    fields["p_stds"] = f"{min(stds):.1f}-{max(stds):.1f}"
    ratios = [(mean(m, last_p) - mean("FedAvg", last_p))
              / max(std(m, last_p), std("FedAvg", last_p)) for m in ("MAP", "FedPHP")]
    fields["p_ratios"] = f"{min(ratios):.1f}-{max(ratios):.1f}"
    last10 = "mean last-10 personalized"
    fields["p_last10"] = (f"{min(mean(m, last10) for m in four[:3]):.1f}-"
                          f"{max(mean(m, last10) for m in four[:3]):.1f} against "
                          f"{mean('FedAvg', last10):.1f}")
    same = per_seed("MAP", last_p) == per_seed("FedRS", last_p)
    fields["map_equals_fedrs"] = ("equals FedRS's in the last round of every seed" if same else
                                  "differs from FedRS's in the last round")
    fields["kd_moved"] = f"{abs(mean('MAP', last10) - mean('FedRS', last10)):.2f}"
    fedrs_holds = (paper(MAP_PAPER, "FedRS", personalization)
                   < paper(MAP_PAPER, "FedAvg", personalization)) == (
                       mean("FedRS", last_p) < mean("FedAvg", last_p))
    fields["fedrs_vs_fedavg"] = "holds" if fedrs_holds else "does not hold"
    fields["fedrs_vs_fedavg_ours"] = (f"{mean('FedRS', last_p):.2f} against "
                                      f"{mean('FedAvg', last_p):.2f}")
    # baselines, aggregation
    in_table_one = ["MAP", "FedRS", "FedProx", "Ditto", "FedAvg", "FedRoD"]
    fields["paper_agg_order"] = ranked_text(
        [(m, paper(MAP_PAPER, m, aggregation)) for m in in_table_one], 1)
    ditto_same = per_seed("Ditto", last_g) == per_seed("FedAvg", last_g)
    fields["ditto_global"] = ("is FedAvg's to the bit, every seed" if ditto_same else
                              "differs from FedAvg's")
    fields["paper_ditto_fedavg_agg"] = paper_gap(MAP_PAPER, "Ditto", "FedAvg", aggregation)
    rod, avg = per_seed("FedRoD", last_g), per_seed("FedAvg", last_g)
    leader = max((m for _, m in MAP_C10_ROWS if values(m, last_g)), key=lambda m: mean(m, last_g))
    fields["rod_leads"] = ("it leads" if leader == "FedRoD" else f"{leader} leads, not it")
    fields["rod_gap"] = (f"{mean('FedRoD', last_g) - mean('FedAvg', last_g):+.1f} over FedAvg, "
                         f"{in_seeds(sum(rod[s] > avg[s] for s in rod), len(rod))}")
    fields["paper_rod_under"] = paper_gap(MAP_PAPER, "FedAvg", "FedRoD", aggregation)
    fields["paper_rod_resnet"] = " / ".join(
        paper_gap(MAP_PAPER, "FedRoD", "FedAvg", f"cinic10/{net}/aggregation")
        for net in ("ResNet20", "ResNet56"))
    # baselines, personalization
    in_table_two = ["FedPHP", "MAP", "FedAvg", "FedRS", "FedProx", "FedRoD", "FedRep", "Ditto"]
    fields["paper_pers_order"] = ranked_text(
        [(m, paper(MAP_PAPER, m, personalization)) for m in in_table_two], 1)
    ours = [m for _, m in MAP_C10_ROWS]
    ranked = sorted(ours, key=lambda m: -mean(m, last_p))
    fields["our_pers_order"] = ranked_text([(m, mean(m, last_p)) for m in ours])

    def under(method: str) -> str:
        return f"{mean('FedAvg', last_p) - mean(method, last_p):.1f}"

    def paper_under(method: str) -> str:
        return paper_gap(MAP_PAPER, "FedAvg", method, personalization)

    fields["ditto_place"] = ("last" if ranked[-1] == "Ditto" else "not last")
    fields["ditto_under"] = (f"{under('Ditto')} points under FedAvg; the paper: "
                             f"{paper_under('Ditto')}")
    rod_gap = mean("FedAvg", last_p) - mean("FedRoD", last_p)
    fields["rod_under"] = (f"{'below' if rod_gap > 0 else 'above'} FedAvg ({abs(rod_gap):.1f} "
                           f"point, {within_std(rod_gap, std('FedRoD', last_p))}; the paper: "
                           f"{paper_under('FedRoD')} below)")
    fields["rep_under"] = (f"{under('FedRep')} points under FedAvg; the paper: "
                           f"{paper_under('FedRep')}")
    h1_gap = mean("FedAvg", last_p) - mean("FedRep-H1", last_p)
    fields["rep_h1"] = (f"{shown('FedRep-H1', last_p)} ({h1_gap:.1f} under FedAvg, "
                        f"{within_std(h1_gap, std('FedRep-H1', last_p))}, at equal work)")
    bottom = sorted(["FedRoD", "FedRep", "Ditto"], key=lambda m: -mean(m, last_p))
    bottom_h1 = sorted(["FedRoD", "FedRep-H1", "Ditto"], key=lambda m: -mean(m, last_p))
    fields["bottom_order"] = ("come in its order with either FedRep"
                              if bottom == ["FedRoD", "FedRep", "Ditto"]
                              and bottom_h1 == ["FedRoD", "FedRep-H1", "Ditto"]
                              else "do not come in its order")
    fields["e6_place"] = "first" if ranked[0] == "Ditto-E6" else "not first"
    fields["e6_gains"] = (f"{mean('Ditto-E6', last_p) - mean('FedAvg', last_p):+.1f} over FedAvg, "
                          f"{mean('Ditto-E6', last_p) - mean('Ditto', last_p):+.1f} over one epoch")
    cpu = {m: statistics.fmean(float(r["CPU s / run"]) for r in runs if r["method"] == m)
           for m in ("Ditto-E6", "FedAvg")}
    fields["e6_cpu"] = f"{cpu['Ditto-E6'] / cpu['FedAvg']:.2f}"
    quoted = {(r["method"], r["setting"]) for r in read_csv(PAPER_VALUES)}
    gaps = [paper(MAP_PAPER, m, setting) - mean(m, column) for _, m in MAP_C10_ROWS
            for setting, column in ((aggregation, last_g), (personalization, last_p))
            if (m, setting) in quoted and values(m, column)]
    fields["under_paper"] = f"{min(gaps):.0f}-{max(gaps):.0f}"
    return fields


# ------------------------------------------------------------------------- cifar100_gpfl_table1
GPFL_C100 = RESULTS / "cifar100_gpfl_table1"
GPFL_CODE_FORM = "GPFL (p_k without / U)"
# The seed whose run was not resumed (its CPU seconds cover the whole run): pFedMe's others
# were resumed from checkpoints (the file's "What ran")
WHOLE_SEED = {("pFedMe", "dirichlet"): "0", ("pFedMe", "pathological"): "2"}
PERSONAL = ["FedProto", "FedPer", "GPFL", "FedRoD", "FedRep", "FedPHP", GPFL_CODE_FORM, "Ditto"]
META = ["Per-FedAvg", "pFedMe"]
GLOBAL = ["FedAvg", "FedProx"]


def gpfl_c100_numbers() -> tuple[list[dict[str, str]], Callable[..., float],
                                 Callable[..., float]]:
    runs = read_csv(GPFL_C100 / "runs.csv")

    def values(method: str, setting: str, column: str = "best personalized") -> list[float]:
        return [100 * v for r in runs if r["method"] == method and r["setting"] == setting
                for v in [number(r[column])] if v is not None]

    def mean(method: str, setting: str, column: str = "best personalized") -> float:
        return statistics.fmean(values(method, setting, column))

    def std(method: str, setting: str, column: str = "best personalized") -> float:
        return statistics.stdev(values(method, setting, column))

    return runs, mean, std


def late_rise(method: str, setting: str) -> float:
    """Mean over seeds of (the mean accuracy of rounds 51-60) - (that of rounds 41-50)."""
    curves: dict[str, dict[int, float]] = {}
    for row in read_csv(GPFL_C100 / "curves.csv"):
        if row["method"] == method and row["setting"] == setting:
            curves.setdefault(row["seed"], {})[int(row["round"])] = float(
                row["personalized_accuracy"])
    return 100 * statistics.fmean(statistics.fmean(c[r] for r in range(51, 61))
                                  - statistics.fmean(c[r] for r in range(41, 51))
                                  for c in curves.values())


def paper_place(method: str, methods: Sequence[str], setting: str) -> str:
    """``method``'s place among ``methods`` in GPFL's Table 1 on CIFAR-100 in ``setting``."""
    ranked = sorted(methods, key=lambda name: -paper("GPFL", name, f"cifar100/{setting}"))
    return ordinal(ranked.index(method) + 1)


def cifar100_gpfl_table1() -> Fields:
    runs, mean, std = gpfl_c100_numbers()
    fields: Fields = {"seeds": str(len({r["seed"] for r in runs}))}
    labels = {"FedRep": "FedRep (1 head epoch)"}
    for setting in ("dirichlet", "pathological"):
        methods = sorted(dict.fromkeys(r["method"] for r in runs if r["setting"] == setting),
                         key=lambda m: -mean(m, setting))
        rows = []
        for m in methods:
            members = [r for r in runs if r["method"] == m and r["setting"] == setting]
            quoted = [row["value"] for row in read_csv(PAPER_VALUES) if row["paper"] == "GPFL"
                      and row["method"] == m and row["setting"] == f"cifar100/{setting}"]
            whole = WHOLE_SEED.get((m, setting))
            cpu = (f"{float(next(r for r in members if r['seed'] == whole)['CPU s / run']):.0f} "
                   f"(seed {whole})" if whole else
                   f"{statistics.fmean(float(r['CPU s / run']) for r in members):.0f}")
            cells = []
            for column in ("best personalized", "last personalized", "mean last-10 personalized",
                           "best global"):
                found = [number(r[column]) for r in members if number(r[column]) is not None]
                cells.append(mean_std(found) if found else "-")
            fairness = pct(statistics.fmean(float(r["std (fairness)"]) for r in members))
            rows.append([labels.get(m, m), str(len(members)), quoted[0] if quoted else "-",
                         *cells, fairness, cpu])
        fields[f"table_{setting}"] = table(
            ["method", "seeds", "paper, best personalized", "best personalized",
             "last personalized", "mean last-10 personalized", "best global",
             "std over clients (fairness)", "CPU s / run"], "lrrrrrrrr", rows)

        def tiers(s: str = setting) -> str:
            personal = [mean(m, s) for m in PERSONAL]
            meta = [mean(m, s) for m in META]
            single = [mean(m, s) for m in GLOBAL]
            return "Holds" if min(personal) > max(meta) and min(meta) > max(single) else \
                "Does not hold"

        fields[f"tiers_{setting}"] = tiers()
        gap = mean("FedAvg", setting) - mean("FedProx", setting)
        fields[f"global_equal_{setting}"] = within_std(gap, max(std("FedAvg", setting),
                                                              std("FedProx", setting)))
        leader = methods[0]
        fields[f"leader_{setting}"] = leader
        fields[f"gpfl_first_{setting}"] = "Holds" if leader == "GPFL" else "Does not hold"
        fields[f"leader_gap_{setting}"] = f"{mean(leader, setting) - mean('GPFL', setting):.2f}"
        fields[f"gpfl_lead_fedper_{setting}"] = (
            f"{mean('GPFL', setting) - mean('FedPer', setting):.2f}")
        fields[f"gpfl_place_{setting}"] = ordinal(methods.index("GPFL") + 1)

        named = [m for m in methods if m != GPFL_CODE_FORM]

        fields[f"ditto_place_{setting}"] = (f"{ordinal(named.index('Ditto') + 1)} "
                                            f"({mean('Ditto', setting):.2f}) where the paper "
                                            f"has it {paper_place('Ditto', named, setting)}")
        per, me = mean("Per-FedAvg", setting), mean("pFedMe", setting)
        paper_per = paper("GPFL", "Per-FedAvg", f"cifar100/{setting}")
        paper_me = paper("GPFL", "pFedMe", f"cifar100/{setting}")
        fields[f"per_vs_pfedme_{setting}"] = (
            f"Per-FedAvg is {compared(per, me)} pFedMe ({per:.2f} against {me:.2f}, "
            f"{within_std(per - me, std('pFedMe', setting))} of pFedMe's) where the paper has "
            f"it {compared(paper_per, paper_me)} ({paper_per:.2f} against {paper_me:.2f})")
        code_gap = mean("GPFL", setting) - mean(GPFL_CODE_FORM, setting)
        fields[f"code_form_{setting}"] = (
            f"{mean(GPFL_CODE_FORM, setting):.2f} ± {std(GPFL_CODE_FORM, setting):.2f}, "
            f"{code_gap:.2f} points {'under' if code_gap > 0 else 'over'} the paper's form")
        above = [m for m in methods if m not in ("GPFL", GPFL_CODE_FORM)
                 and mean(m, setting) > mean(GPFL_CODE_FORM, setting)]
        fields[f"code_form_under_{setting}"] = joined(above)
    # Dirichlet
    d, pa = "dirichlet", "pathological"
    fields["personal_span_dirichlet"] = (f"{max(mean(m, d) for m in PERSONAL):.2f} to "
                                         f"{min(mean(m, d) for m in PERSONAL):.2f}")
    gpfl_fedper = mean("GPFL", d) - mean("FedPer", d)
    fields["gpfl_fedper_dirichlet"] = within_std(gpfl_fedper, max(std("GPFL", d),
                                                                  std("FedPer", d)))
    fields["paper_gpfl_over_runner_up"] = paper_gap("GPFL", "GPFL", "Ditto",
                                                    "cifar100/dirichlet", 2)
    fields["late_dirichlet"] = ", ".join(f"{m} {late_rise(m, d):+.2f}"
                                         for m in ("FedProto", "FedPer", "GPFL", "FedRoD"))
    fairness = sorted(dict.fromkeys(r["method"] for r in runs if r["setting"] == d),
                      key=lambda m: mean(m, d, "std (fairness)"))
    fields["fairness_dirichlet"] = (
        f"{ordinal(fairness.index('GPFL') + 1)} lowest of {len(fairness)} (the lowest: "
        + ", ".join(f"{m} {mean(m, d, 'std (fairness)'):.2f}" for m in fairness[:3]) + ")")
    # pathological
    under_proto = ["FedPer", "FedRep", "FedRoD", "FedPHP", "Ditto", "Per-FedAvg", "pFedMe"]
    fields["gpfl_above_rest"] = ("Holds" if all(mean("GPFL", pa) > mean(m, pa)
                                                for m in under_proto) else "Does not hold")
    path = "cifar100/pathological"
    fields["paper_gpfl_fedper_pathological"] = paper_gap("GPFL", "GPFL", "FedPer", path, 2)
    lead = mean("FedProto", pa) - mean("GPFL", pa)
    fields["proto_lead_stds"] = f"{lead / std('GPFL', pa):.1f}"
    fields["paper_gpfl_over_proto"] = paper_gap("GPFL", "GPFL", "FedProto", path, 2)
    per_rep = mean("FedPer", pa) - mean("FedRep", pa)
    fields["fedper_vs_fedrep"] = (f"{compared(per_rep, 0)} FedRep "
                                  f"({within_std(per_rep, std('FedPer', pa))} of FedPer's)")
    fields["fedrod_vs_fedphp"] = compared(mean("FedRoD", pa), mean("FedPHP", pa))
    fields["paper_fedrep_over_fedper"] = paper_gap("GPFL", "FedRep", "FedPer", path, 2)
    fields["paper_fedphp_over_fedrod"] = paper_gap("GPFL", "FedPHP", "FedRoD", path, 2)
    methods = list(dict.fromkeys(r["method"] for r in runs if r["setting"] == pa))
    rising = sum(late_rise(m, pa) > 0 for m in methods)
    fields["late_every_pathological"] = ("every method's" if rising == len(methods) else
                                         f"{rising} of {len(methods)} methods'")
    fields["late_pathological"] = ", ".join(f"{m} {late_rise(m, pa):+.2f}"
                                            for m in ("GPFL", "FedProto", "FedPer", "FedRoD"))
    return fields


# ----------------------------------------------------------------------------- quickstart
def quickstart() -> Fields:
    folder = RESULTS / "quickstart"
    summary = json.loads((folder / "summary.json").read_text())
    rows = read_csv(folder / "metrics.csv")
    accuracy = {int(r["round"]): 100 * float(r["personalized_accuracy"]) for r in rows}
    best_round = summary["best_personalized_accuracy_round"]
    last = max(accuracy)
    runner_up = max((r for r in accuracy if r != best_round), key=accuracy.get)
    return {
        "best": f"{100 * summary['best_personalized_accuracy']:.2f}",
        "best_round": str(best_round),
        "is_last": " (the last" if best_round == last else " (not the last",
        "runner_up": f"{accuracy[runner_up]:.2f} at round {runner_up}",
        "mean_last": f"{100 * summary['mean_last_personalized_accuracy']:.2f}",
        "wall": f"{summary['seconds']:.0f}",
    }


# ----------------------------------------------------------------------------- cifar10_vs_pfllib
VS_PFLLIB_C10 = RESULTS / "cifar10_vs_pfllib"
EXPLAINED_ABOVE = 0.5  # points: the reading explains every seed-0 difference above this
# (method, form) -> the first table's row label
VS_C10_ROWS = {("GPFL", "p_k / U"): "GPFL, p_k / U (the paper's Eq. 7, fedlight's default)",
               ("GPFL", "p_k not / U"):
                   "GPFL, p_k not divided by U (the authors' code, as PFLlib)",
               ("FedPer", ""): "FedPer", ("FedRep", ""): "FedRep", ("FedRoD", ""): "FedRoD",
               ("Ditto", ""): "Ditto",
               ("FedProto", "head"): "FedProto, scored by its head (fedlight's default)",
               ("FedProto", "prototype"):
                   "FedProto, scored by the nearest prototype (as PFLlib)",
               ("FedAvg", ""): "FedAvg", ("FedProx", ""): "FedProx"}
# the window in which the two cores ran these processes (the file's "What ran"), minutes
VS_C10_BUSY_MINUTES = 35 + 60 + 20


def cifar10_vs_pfllib() -> Fields:
    runs = read_csv(VS_PFLLIB_C10 / "runs.csv")

    def ours(method: str, form: str = "", seed: str = "0") -> dict[str, str]:
        return next(r for r in runs if r["library"] == "fedlight" and r["method"] == method
                    and r["form"] == form and r["seed"] == seed)

    def theirs(method: str) -> dict[str, str]:
        return next(r for r in runs if r["library"] == "PFLlib" and r["method"] == method)

    def timed(row: dict[str, str]) -> float | None:
        return None if "rounds only" in row["whole_process_wall_s"] else float(
            row["whole_process_wall_s"])

    def gap(method: str, form: str = "") -> float:
        return (float(ours(method, form)["best_personalized_accuracy"])
                - float(theirs(method)["best_personalized_accuracy"]))

    rows = []
    for (method, form), label in VS_C10_ROWS.items():
        mine, other = ours(method, form), theirs(method)
        wall = timed(mine)
        rows.append([label, mine["best_personalized_accuracy"],
                     other["best_personalized_accuracy"], signed(gap(method, form)),
                     f"{wall:.1f}" if wall else "(not timed)",
                     other["whole_process_wall_s"] if wall else "",
                     f"{float(other['whole_process_wall_s']) / wall:.2f}x" if wall else ""])
    fields: Fields = {"table": table(
        ["method", "fedlight best (%)", "PFLlib best (%)", "difference (points)",
         "fedlight wall (s)", "PFLlib wall (s)", "PFLlib / fedlight wall"], "lrrrrrr", rows)}
    fields["threshold"] = f"{EXPLAINED_ABOVE}"
    seeded = {("GPFL", "p_k not / U"): "GPFL (authors' code form)", ("FedProx", ""): "FedProx",
              ("FedAvg", ""): "FedAvg"}

    def seeds_of(method: str, form: str) -> list[float]:
        return [float(ours(method, form, seed)["best_personalized_accuracy"])
                for seed in ("0", "1", "2")]

    seed_rows = []
    for (method, form), label in seeded.items():
        values = seeds_of(method, form)
        pfl = float(theirs(method)["best_personalized_accuracy"])
        seed_rows.append([label, *(f"{v:.2f}" for v in values),
                          f"{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f}",
                          f"{pfl:.2f}", signed(pfl - statistics.fmean(values))])
    fields["seed_table"] = table(["method", "seed 0", "seed 1", "seed 2", "mean ± std",
                                  "PFLlib", "PFLlib - mean"], "lrrrrrr", seed_rows)

    def mean_of(method: str, form: str = "") -> str:
        values = seeds_of(method, form)
        return f"{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f}"

    def below_mean(method: str, form: str = "") -> float:
        return (float(theirs(method)["best_personalized_accuracy"])
                - statistics.fmean(seeds_of(method, form)))

    fields["processes"] = str(len([r for r in runs if r["source"] == "vs_pfllib.py"])
                              + len([r for r in runs if r["source"] == "fedlight fit"]))
    fields["cpu_hours"] = f"{2 * VS_C10_BUSY_MINUTES / 60:.1f}"
    fields["gpfl_default"] = signed(gap("GPFL", "p_k / U"))
    fields["gpfl_code"] = signed(gap("GPFL", "p_k not / U"))
    fields["gpfl_code_mean"] = signed(below_mean("GPFL", "p_k not / U") * -1)
    fields["gpfl_code_seeds"] = mean_of("GPFL", "p_k not / U")
    fields["pfllib_gpfl"] = theirs("GPFL")["best_personalized_accuracy"]
    spread = statistics.stdev(seeds_of("GPFL", "p_k not / U"))
    fields["gpfl_code_inside"] = (
        f"{within_std(below_mean('GPFL', 'p_k not / U'), spread)} of fedlight's own seeds")
    forms = [float(ours("GPFL", form)["best_personalized_accuracy"])
             for form in ("p_k / U", "p_k not / U")]
    fields["gpfl_forms"] = f"{forms[0] - forms[1]:.2f}"
    fields["fedproto_gaps"] = (f"{signed(gap('FedProto', 'head'))} / "
                               f"{signed(gap('FedProto', 'prototype'))}")
    fields["fedproto_best"] = ours("FedProto", "prototype")["best_personalized_accuracy"]
    fields["fedavg_seed0"] = signed(gap("FedAvg"))
    fields["fedavg_below"] = (f"{abs(below_mean('FedAvg')):.2f} "
                              f"{compared(0, below_mean('FedAvg'), 'below', 'above')}")
    fields["fedavg_mean"] = mean_of("FedAvg")
    fields["fedprox_seed0"] = signed(gap("FedProx"))
    fields["fedprox_below"] = (f"{abs(below_mean('FedProx')):.2f} "
                               f"{compared(0, below_mean('FedProx'), 'below', 'above')}")
    fields["fedprox_mean"] = mean_of("FedProx")
    fields["fedavg_span"] = f"{max(seeds_of('FedAvg', '')) - min(seeds_of('FedAvg', '')):.1f}"
    # 225 training samples at batch 10: PFLlib 22 full batches an epoch, fedlight 23
    fields["more_updates"] = f"{100 * (23 / 22 - 1):.1f}"
    small = [(m, gap(m)) for m in ("FedPer", "FedRep", "FedRoD", "Ditto")]
    fields["within_threshold"] = ("Every other method is within" if all(
        abs(g) <= EXPLAINED_ABOVE for _, g in small) else "Not every other method is within")
    fields["small_gaps"] = ", ".join(f"{m} {signed(g)}" for m, g in small)
    fields["extra_round"] = f"{100 / 41:.1f}"
    ratios = {m: float(theirs(m)["whole_process_wall_s"]) / (timed(ours(m, f)) or 1)
              for (m, f) in VS_C10_ROWS if timed(ours(m, f))}
    faster = {m: r for m, r in ratios.items() if r > 1}
    fields["faster_span"] = f"{min(faster.values()):.2f}-{max(faster.values()):.2f}"
    fields["faster_count"] = f"{len(faster)} of the {len(ratios)}"
    fields["faster_list"] = ", ".join(f"{m} {r:.2f}x" for m, r in sorted(
        faster.items(), key=lambda item: -item[1]))
    slower = {m: r for m, r in ratios.items() if r <= 1}
    fields["slower"] = "; ".join(f"{m}'s pair is the exception ({r:.2f}x)"
                                 for m, r in slower.items())
    return fields


# ----------------------------------------------------------------------------- privacy
def privacy() -> Fields:
    import yaml

    dlg = {r["cell"]: float(r["mean"])
           for r in read_csv(RESULTS / "privacy_table" / "dlg_table.csv")}
    cells = ["Per-fe", "Rep-fe", "Avg-fe", "Avg", "GPFL-fe", "GPFL-sfe", "GPFL-sm",
             "guess: noise", "guess: black"]
    fields: Fields = {"dlg_table": table(cells, "r" * len(cells),
                                         [[f"{dlg[c]:.2f}" for c in cells]])}
    folder = RESULTS / "privacy"  # the DP sweep, copied by --from-sweep
    runs = read_csv(folder / "runs.csv")
    sweep = yaml.safe_load((ROOT / "benchmarks" / "sweeps" / "privacy_dp.yaml").read_text())
    epsilon = {}
    for path in sorted((folder / "summaries").glob("*.json")):
        summary = json.loads(path.read_text())
        epsilon[path.stem] = summary.get("dp_epsilon")
    rows = []
    for label, spec in sweep["methods"].items():
        run = next(r for r in runs if r["method"] == label)
        server = (spec.get("overrides", {}).get("server", {}).get("init_args", {})
                  if isinstance(spec, dict) else {})
        eps = epsilon.get(run["run"])
        base = label.split()[0]
        privacy_cell = (f"{eps:.3g}" if eps is not None else
                        "0 (nothing sent)" if base == "Local" else "∞ (no DP)")
        rows.append([base, str(server.get("clip_norm", "-")),
                     str(server.get("noise_multiplier", "-")), privacy_cell,
                     *(pct(float(run[c])) if number(run[c]) is not None else "-"
                       for c in ("best personalized", "last personalized", "last global"))])
    fields["dp_table"] = table(["method", "S", "z", "epsilon (delta 1e-5)", "best pers. acc.",
                                "last pers. acc.", "last global acc."], "llllrrr", rows)

    def run_of(label: str) -> dict[str, str]:
        return next(r for r in runs if r["method"] == label)

    def accuracy(label: str, column: str = "best personalized") -> float:
        return 100 * float(run_of(label)[column])

    fields["black"] = f"{dlg['guess: black']:.1f}"
    fields["avg_fe"] = f"{dlg['Avg-fe']:.1f}"
    fields["gpfl_fe"] = f"{dlg['GPFL-fe']:.1f}"
    fields["avg"] = f"{dlg['Avg']:.1f}"
    fields["per_rep"] = f"{dlg['Per-fe']:.1f}) and FedRep-fe ({dlg['Rep-fe']:.1f}"
    attacked = [c for c in cells if not c.startswith("guess")]
    lowest = sorted(attacked, key=dlg.get)[:2]
    fields["hardest"] = (f"GPFL's pseudo feature extractor and pseudo model "
                         f"({dlg['GPFL-sfe']:.1f} / {dlg['GPFL-sm']:.1f} dB) are "
                         + ("the hardest to invert" if set(lowest) == {"GPFL-sfe", "GPFL-sm"}
                            else "not the hardest to invert"))
    one = [r for r in rows if r[2] == "1.0"]
    fields["epsilon_z1"] = one[0][3] if one else "-"
    fedavg_cost = accuracy("FedAvg", "last global") - accuracy("FedAvg DP z=1.0", "last global")
    fields["fedavg_cost"] = f"{fedavg_cost:.0f}"
    gpfl_drop = accuracy("GPFL") - accuracy("GPFL DP z=1.0")
    fields["gpfl_drop"] = "does not drop" if gpfl_drop <= 0 else f"drops {gpfl_drop:.1f} points"
    local = accuracy("Local")
    below = all(accuracy(label) < local for label in sweep["methods"] if label != "Local")
    fields["local"] = (f"every federated method is still below Local ({local:.1f})" if below
                       else f"not every federated method is below Local ({local:.1f})")
    fields["dp_rounds"] = str(sweep["overrides"]["trainer.rounds"])
    return fields


# ----------------------------------------------------------------------------- baselines
BASELINE_PAGES = {"baselines_dirichlet": "dirichlet", "baselines_incomplete": "incomplete"}
BASELINE_COLUMNS = ("best pers.", "last pers.", "best global", "last global", "std @ best",
                    "std last", "s / round")


def baseline_runs(setting: str) -> list[dict[str, str]]:
    """baselines_<setting>.jsonl as rows: method, seed, error and every column as text."""
    rows = []
    for line in (RESULTS / f"baselines_{setting}.jsonl").read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            values = record["row"]
            rows.append({"method": record["method"], "seed": str(record["seed"]),
                         "setting": setting, "error": values.get("error", ""),
                         **{c: "" if values.get(c) is None else str(values[c])
                            for c in BASELINE_COLUMNS}})
    return rows


def baselines(setting: str) -> Fields:
    runs = baseline_runs(setting)
    methods = list(dict.fromkeys(r["method"] for r in runs))
    rows, failures = [], []
    for method in methods:
        members = [r for r in runs if r["method"] == method]
        failed = [r for r in members if r["error"]]
        label = method + (f" (diverged in {len(failed)} of {len(members)} seeds)" if failed
                          else "")
        cells = []
        for column in BASELINE_COLUMNS:
            found = [float(r[column]) for r in members if not r["error"] and r[column]]
            if not found:
                cells.append("-")
            elif column == "s / round":
                cells.append(f"{statistics.fmean(found):.1f}")
            else:
                cells.append(mean_std(found))
        rows.append([label, *cells])
        if failed:
            failures.append(f"{method}: {len(failed)} of {len(members)} runs stopped on a "
                            "non-finite loss; the row is over the others (\"-\" if none). First "
                            f"message: {failed[0]['error']}")
    fields: Fields = {"table": table(["Method", *BASELINE_COLUMNS], "l" + "r" * 7, rows),
                      "failures": "\n\n".join(failures), "runs": str(len(runs))}

    def mean(method: str, column: str) -> float:
        return 100 * statistics.fmean(float(r[column]) for r in runs
                                      if r["method"] == method and not r["error"] and r[column])

    def seeds(method: str, column: str) -> list[float]:
        return [100 * float(r[column]) for r in runs if r["method"] == method]

    best = "best pers."
    personal = ["DittoRS", "Local", "FedBABU", "FLDA", "APFL", "PFedMe", "PerFedAvg"]
    single = ["FedDyn", "SCAFFOLD", "FedAwS", "FedNova", "FedMMD", "FedAvg", "MOON", "FedProx"]
    if setting == "dirichlet":
        beats = min(mean(m, best) for m in personal) > max(mean(m, best) for m in single)
        fields["personal_vs_global"] = "beat" if beats else "do not all beat"
        pfl = [m for m in personal if m != "Local"]
        fields["pfl_over_local"] = f"{max(mean(m, best) for m in pfl) - mean('Local', best):.1f}"
        fedopt = ["FedAvgM", "FedAdam", "FedYogi", "FedAdagrad"]
        lifts = [mean(m, "last global") - mean("FedAvg", "last global") for m in fedopt]
        fields["fedopt_lift"] = f"{min(lifts):.0f}-{max(lifts):.0f}"
        same = all(seeds(m, "last global") == seeds("FedAvg", "last global")
                   for m in ("APFL", "FLDA"))
        fields["apfl_flda_global"] = "equals" if same else "differs from"
        fields["feddf_seeds"] = " / ".join(f"{v:.1f}" for v in seeds("FedDF", best))
        at_last = seeds("FedDF", best) == seeds("FedDF", "last pers.")
        fields["feddf_best_last"] = "=" if at_last else "!="
    if setting == "incomplete":
        fields.update(incomplete_fields(runs, mean))
    return fields


def incomplete_fields(runs: list[dict[str, str]], mean: Callable[[str, str], float]) -> Fields:
    """The reading of baselines_incomplete.md: divergences, and its Dirichlet comparisons."""
    fields: Fields = {}
    last = "last pers."
    blend = ["APFL", "FLDA", "PerFedAvg", "FedDyn", "FedAwS", "FedMMD", "FedNova", "MOON",
             "FedProx"]
    gaps = [abs(mean(m, last) - mean("FedAvg", last)) for m in blend]
    fields["within_point"] = ("each within a point of it" if max(gaps) < 1 else
                              f"up to {max(gaps):.1f} points from it")
    finished = {r["method"] for r in runs if not r["error"]}
    fairest = min(finished, key=lambda m: mean(m, "std last"))
    fields["apfl_fairest"] = "the fairest" if fairest == "APFL" else f"{fairest} is fairer"

    def rounds(methods: Sequence[str]) -> list[int]:
        return [int(re.search(r"in round (\d+)", r["error"]).group(1)) for r in runs
                if r["method"] in methods and r["error"]]

    full = rounds(["SCAFFOLD", "ScaRS"])
    every = all(r["error"] for r in runs if r["method"] in ("SCAFFOLD", "ScaRS"))
    fields["diverged_rounds"] = f"{min(full)}-{max(full)}" + ("" if every else " (not all)")
    no_momentum = rounds(["SCAFFOLD-m0", "ScaRS-m0"])
    fields["m0_rounds"] = f"{min(no_momentum)}-{max(no_momentum)}"
    fields["m0_counts"] = "; ".join(
        f"{sum(bool(r['error']) for r in runs if r['method'] == m)} of "
        f"{sum(r['method'] == m for r in runs)} {m.removesuffix('-m0')} seeds diverge"
        for m in ("SCAFFOLD-m0", "ScaRS-m0"))
    dirichlet = baseline_runs("dirichlet")

    def dirichlet_mean(method: str, column: str = last) -> str:
        found = [float(r[column]) for r in dirichlet if r["method"] == method]
        return f"{100 * statistics.fmean(found):.1f}"

    fields["local_dirichlet"] = dirichlet_mean("Local")
    fields["scaffold_dirichlet"] = dirichlet_mean("SCAFFOLD")
    fields["pfedme_dirichlet"] = dirichlet_mean("PFedMe")
    fields["feddf_dirichlet"] = dirichlet_mean("FedDF")
    fields["ditto_vs_global"] = compared(mean("DittoRS", last), mean("DittoRS", "last global"),
                                         "above", "lag")
    best_global, last_global = mean("PFedMe", "best global"), mean("PFedMe", "last global")
    fields["pfedme_fall"] = (f"falling from {best_global:.1f} at its best round"
                             if best_global > last_global else "not falling")
    return fields


GENERATORS: dict[str, Callable[[], Fields]] = {
    "map_distillation": map_distillation,
    "office_caltech10_fedpick_table2": office_caltech10_fedpick_table2,
    "cifar100_privatize": cifar100_privatize,
    "cifar10_privatize": cifar10_privatize,
    "cifar10_gpfl_table1": cifar10_gpfl_table1,
    "cifar10_fedpick_domains": cifar10_fedpick_domains,
    "cifar10_map_table": cifar10_map_table,
    "cifar100_gpfl_table1": cifar100_gpfl_table1,
    "quickstart": quickstart,
    "cifar10_vs_pfllib": cifar10_vs_pfllib,
    "privacy": privacy,
    "baselines_dirichlet": lambda: baselines("dirichlet"),
    "baselines_incomplete": lambda: baselines("incomplete"),
    "vs_pfllib_three_seeds": vs_pfllib_three_seeds,
}

if __name__ == "__main__":
    main(sys.argv[1:])
