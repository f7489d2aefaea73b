"""benchmarks/results/same_start.md, written whole from the raw files of
``benchmarks/results/same_start/``: fedlight against the authors' own code from the same start.

Each ``same_start/<name>.json`` is one comparison, written by the script its ``command`` names
(``benchmarks/map_vs_authors.py``, ``benchmarks/privatize_vs_authors.py``): ``method``,
``authors_repo``, ``authors_commit``, ``split``, ``rounds``, ``per_round`` (``round``,
``fedlight``, ``authors``: personalized accuracy in %, and optional ``fedlight_<x>`` /
``authors_<x>`` pairs such as the HPM's), ``max_param_diff`` (part -> largest absolute
difference after the last round), ``command`` and, for the learned privatizations, ``choices``.
A comparison whose script printed text instead (GPFL's, ``benchmarks/gpfl_rounds_vs_pfllib.py``)
has ``raw_output``, the path of that output beside the JSON file, and its rounds and parameter
differences are read from it.

    python benchmarks/same_start.py            # writes benchmarks/results/same_start.md
    python benchmarks/same_start.py --check    # exit 1 when the file differs from its output

Nothing here is typed by hand but the words: every number is rendered from the raw files (or
is :data:`THRESHOLD`, the agreement the comparisons are held to).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
RAW = RESULTS / "same_start"
OUTPUT = RESULTS / "same_start.md"
THRESHOLD = 0.5  # points of accuracy: "agree" means within this at every round
EXTRA = re.compile(r"^fedlight_(.+)$")
EXTRA_NAMES = {"hpm": "HPM", "global": "global model"}
AGGREGATION = "aggregation_as_fedlight"  # the folder of runs with fedlight's sum on both sides
GPFL_ROW = re.compile(r"^\s*(\d+)\s+([\d.]+)\s+([\d.]+)\s*$")
GPFL_GAPS = re.compile(r"largest \|fedlight - PFLlib\|: (.*)$")


# ----------------------------------------------------------------------------- raw files
def read_comparison(path: Path) -> dict[str, Any]:
    """One comparison; with ``raw_output`` its rounds and differences read from that text."""
    record = json.loads(path.read_text())
    if "raw_output" in record:
        record.update(read_gpfl_output((path.parent / record["raw_output"]).resolve()))
    return record


def read_gpfl_output(path: Path) -> dict[str, Any]:
    """``benchmarks/gpfl_rounds_vs_pfllib.py``'s printed table: per round PFLlib's and
    fedlight's accuracy, and the last line's largest parameter differences."""
    per_round, gaps = [], {}
    for line in path.read_text().splitlines():
        row = GPFL_ROW.match(line)
        if row:
            per_round.append({"round": int(row[1]), "authors": float(row[2]),
                              "fedlight": float(row[3])})
        found = GPFL_GAPS.search(line)
        if found:
            for part in found[1].split(", "):
                name, value = part.rsplit(" ", 1)
                gaps[name] = float(value)
    if not per_round or not gaps:
        raise ValueError(f"{path}: no per-round table or parameter differences")
    return {"per_round": per_round, "rounds": len(per_round), "max_param_diff": gaps}


def float_order_runs() -> list[tuple[str, dict[str, Any]]]:
    """The authors' code against itself, its clients in another order (``float_order/``)."""
    return [(path.name, json.loads(path.read_text()))
            for path in sorted((RAW / "float_order").glob("*.json"))]


def aggregation_runs() -> list[tuple[str, dict[str, Any]]]:
    """fedlight against the authors' code with its server's sum replaced by fedlight's
    (``aggregation_as_fedlight/``)."""
    return [(path.name, read_comparison(path))
            for path in sorted((RAW / AGGREGATION).glob("*.json"))]


def comparisons() -> list[tuple[str, dict[str, Any]]]:
    """Every comparison of the raw folder, by file name."""
    return [(path.name, read_comparison(path)) for path in sorted(RAW.glob("*.json"))]


# ----------------------------------------------------------------------------- numbers
def extras(record: dict[str, Any]) -> list[str]:
    """The extra accuracies the comparison records on both sides (``hpm``, ``global``)."""
    first = record["per_round"][0]
    return [m[1] for key in first if (m := EXTRA.match(key)) and f"authors_{m[1]}" in first]


def largest_gap(record: dict[str, Any], name: str | None = None) -> tuple[float, int] | None:
    """The largest |fedlight - authors| over the rounds and its round (None: not recorded)."""
    ours, theirs = (f"fedlight_{name}", f"authors_{name}") if name else ("fedlight", "authors")
    gaps = [(abs(row[ours] - row[theirs]), row["round"]) for row in record["per_round"]
            if row.get(ours) is not None and row.get(theirs) is not None]
    return max(gaps, key=lambda gap: (gap[0], -gap[1])) if gaps else None


def agrees(record: dict[str, Any]) -> bool:
    """Within :data:`THRESHOLD` every round, every accuracy recorded on both sides."""
    names: list[str | None] = [None, *extras(record)]
    return all((gap := largest_gap(record, name)) is None or round(gap[0], 4) <= THRESHOLD
               for name in names)


def agrees_through(record: dict[str, Any]) -> int:
    """The last round up to which every round is within :data:`THRESHOLD` (0: not the first)."""
    names: list[str | None] = [None, *extras(record)]
    through = 0
    for row in record["per_round"]:
        single = {**record, "per_round": [row]}
        if not all((gap := largest_gap(single, name)) is None or round(gap[0], 4) <= THRESHOLD
                   for name in names):
            break
        through = row["round"]
    return through


def same_choices(record: dict[str, Any]) -> bool | None:
    """Whether both sides prefer the same side of every block (None: nothing learned)."""
    if "choices" not in record:
        return None
    return bool(prefers(record["choices"]["fedlight"]) == prefers(record["choices"]["authors"]))


def prefers(chosen: dict[str, Any]) -> str:
    return "; ".join(f"{block}: {'/'.join(c['prefers'])}" for block, c in chosen.items())


# ----------------------------------------------------------------------------- rendering
def split_text(split: str | dict[str, Any]) -> str:
    """The split as its raw file describes it (a sentence, or a dict of settings)."""
    if isinstance(split, dict):
        return ", ".join(f"{key} {value}" for key, value in split.items())
    return split


def points(gap: tuple[float, int] | None) -> str:
    if gap is None:
        return "-"
    if round(gap[0], 4) == 0:  # float noise of the means (1e-14) names no round
        return "0.00 (every round)"
    return f"{gap[0]:.2f} (round {gap[1]})"


def summary_table(records: list[tuple[str, dict[str, Any]]]) -> list[str]:
    lines = ["| method | authors' code | rounds | largest per-round difference, personalized "
             "(points) | other accuracies: largest per-round difference (points) | "
             f"within {THRESHOLD} every round | within {THRESHOLD} through round | largest "
             "parameter difference after the last round | split | raw file |",
             "| --- | --- | ---: | ---: | --- | --- | ---: | --- | --- | --- |"]
    for name, record in records:
        others = ", ".join(f"{EXTRA_NAMES.get(x, x)} {points(largest_gap(record, x))}"
                           for x in extras(record)) or "-"
        diffs = ", ".join(f"{part} {value:.1e}" for part, value in
                          record["max_param_diff"].items())
        commit = record["authors_commit"][:7]
        lines.append(f"| {record['method']} | {record['authors_repo']} @ {commit} | "
                     f"{record['rounds']} | {points(largest_gap(record))} | {others} | "
                     f"{'yes' if agrees(record) else 'no'} | {agrees_through(record)} | "
                     f"{diffs} | {split_text(record['split'])} | [{name}](same_start/{name}) |")
    return lines


def choices_table(records: list[tuple[str, dict[str, Any]]]) -> list[str]:
    learned = [(name, r) for name, r in records if "choices" in r]
    if not learned:
        return []
    lines = ["", "Blocks each side's learned coefficients prefer after the last round (per "
             "block, per fused output):", "",
             "| method | fedlight | authors' code | same |", "| --- | --- | --- | --- |"]
    for _, record in learned:
        lines.append(f"| {record['method']} | {prefers(record['choices']['fedlight'])} | "
                     f"{prefers(record['choices']['authors'])} | "
                     f"{'yes' if same_choices(record) else 'no'} |")
    return lines


def per_round_section(name: str, record: dict[str, Any], title: str = "") -> list[str]:
    names = extras(record)
    header = ["round", "authors (%)", "fedlight (%)", "difference"]
    for x in names:
        label = EXTRA_NAMES.get(x, x)
        header += [f"authors {label} (%)", f"fedlight {label} (%)", "difference"]
    lines = ["", f"### {record['method']}{title}", "", "```bash", record["command"], "```", "",
             "| " + " | ".join(header) + " |", "| " + " | ".join(["---:"] * len(header)) + " |"]
    for row in record["per_round"]:
        cells = [str(row["round"])]
        for ours, theirs in [("fedlight", "authors"),
                             *((f"fedlight_{x}", f"authors_{x}") for x in names)]:
            a, b = row.get(theirs), row.get(ours)
            cells += ["-" if a is None else f"{a:.2f}", "-" if b is None else f"{b:.2f}",
                      "-" if a is None or b is None else f"{b - a:+.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def float_order_section(records: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The authors' code against itself beside fedlight against the authors' code, over the
    rounds both ran."""
    runs = float_order_runs()
    if not runs:
        return []
    by_method = {r["method"]: r for _, r in records}
    lines = ["", "## Float rounding alone", "",
             "The authors' code run twice on the same split from the same weights and batches, "
             "the second time with numpy's seed of its client order changed (every client "
             "joins each round, so only the order in which the uploads are summed differs), "
             "beside fedlight against the authors' code over the same rounds "
             "(`--against-itself`, files in [same_start/float_order/](same_start/float_order/)):",
             "", "| method | rounds | authors against itself: largest difference (points) | "
             f"within {THRESHOLD} through round | fedlight against the authors: largest "
             f"difference over those rounds (points) | within {THRESHOLD} through round | "
             "raw file |", "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    readings = []
    for name, run in runs:
        itself = reordered(run)
        ours = by_method.get(run["method"])
        if ours is not None:
            ours = {**ours, "per_round": ours["per_round"][:run["rounds"]]}
        itself_gap, gap = largest_gap(itself), None if ours is None else largest_gap(ours)
        lines.append(f"| {run['method']} | {run['rounds']} | {points(itself_gap)} | "
                     f"{agrees_through(itself)} | "
                     f"{'-' if ours is None else points(gap)} | "
                     f"{'-' if ours is None else agrees_through(ours)} | "
                     f"[{name}](same_start/float_order/{name}) |")
        if ours is None or itself_gap is None:
            continue
        closer = gap is not None and round(gap[0], 4) <= round(itself_gap[0], 4)
        readings += ["", f"Over those rounds fedlight's {run['method']} is "
                     f"{'no farther from' if closer else 'farther from'} the authors' code than "
                     "the authors' code is from itself with its uploads summed in another order."]
    return lines + readings


def aggregation_section(records: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """fedlight against the authors' code summing the uploads as fedlight does, beside the
    comparison with the code's own sum, and what the runs show."""
    runs = aggregation_runs()
    if not runs:
        return []
    by_method = {r["method"]: r for _, r in records}
    lines = ["", "## The authors' aggregation made fedlight's", "",
             "The same comparisons with the authors' server summing the uploads as fedlight "
             "does, changed from outside (`--authors-aggregation fedlight`: their "
             "`update_global` replaced by fedlight's `weighted_mean`, a float64 running sum "
             "over the clients in id order, each weighted by its training samples, divided "
             "once and cast back to float32; everything else the authors' code as it is), "
             "beside the comparisons with the code's own float32 sum in its random client "
             f"order (files in [same_start/{AGGREGATION}/](same_start/{AGGREGATION}/)):", "",
             f"| method | rounds | authors' sum: within {THRESHOLD} through round | authors' "
             f"sum: largest difference (points) | fedlight's sum: within {THRESHOLD} through "
             "round | fedlight's sum: largest difference (points) | fedlight's sum: largest "
             "parameter difference after the last round | raw file |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for name, run in runs:
        before = by_method.get(run["method"])
        diffs = ", ".join(f"{part} {value:.1e}" for part, value in run["max_param_diff"].items())
        lines.append(f"| {aggregation_label(run)} | {run['rounds']} | "
                     f"{'-' if before is None else agrees_through(before)} | "
                     f"{'-' if before is None else points(largest_gap(before))} | "
                     f"{agrees_through(run)} | {points(largest_gap(run))} | {diffs} | "
                     f"[{name}](same_start/{AGGREGATION}/{name}) |")
    lines.append("")
    for hpm_too, changed in ((False, "aggregation"), (True, "aggregation and HPM update")):
        kind = [r for _, r in runs if bool(r.get("authors_hpm_update") == "fedlight") == hpm_too]
        within = [r["method"] for r in kind if agrees(r)]
        beyond = [r["method"] for r in kind if not agrees(r)]
        both = " and fedlight's HPM update" if hpm_too else ""
        if within:
            lines.append(f"{', '.join(within)}: with fedlight's sum{both} on both sides, within "
                         f"{THRESHOLD} points at every round, every accuracy: the drift of the "
                         f"comparison above is isolated to float rounding in the authors' "
                         f"{changed}.")
        for method in beyond:
            explained = [r for _, r in runs if r["method"] == method and agrees(r)
                         and r.get("authors_hpm_update") == "fedlight"]
            lines.append(f"{method}: with fedlight's sum{both} on both sides, still beyond "
                         f"{THRESHOLD} points in some round (the table says from which round "
                         f"and how far): the authors' {changed} is not the whole drift; "
                         + ("the rest is the float rounding of the authors' HPM update (the "
                            "row with fedlight's HPM update as well)." if explained
                            else "its cause is still open."))
    return lines


def aggregation_label(run: dict[str, Any]) -> str:
    """The method, and whether the authors' HPM update was made fedlight's too."""
    hpm = run.get("authors_hpm_update") == "fedlight"
    return run["method"] + (" (and fedlight's HPM update)" if hpm else "")


def reordered(run: dict[str, Any]) -> dict[str, Any]:
    """The authors' code against itself as a comparison (the reordered run in fedlight's
    place)."""
    return {**run, "per_round": [
        {"round": r["round"], "fedlight": r["authors_reordered"], "authors": r["authors"]}
        for r in run["per_round"]]}


def verdict(records: list[tuple[str, dict[str, Any]]]) -> str:
    within = [r["method"] for _, r in records if agrees(r)]
    beyond = [r["method"] for _, r in records if not agrees(r)]
    text = (f"Within {THRESHOLD} points at every round: {', '.join(within) or 'none'}; "
            f"beyond it in some round: {', '.join(beyond) or 'none'}.")
    differ = [r["method"] for _, r in records if same_choices(r) is False]
    learned = [r["method"] for _, r in records if same_choices(r) is not None]
    if learned:
        text += (" Same preferred blocks on both sides: "
                 f"{', '.join(m for m in learned if m not in differ) or 'none'}; different: "
                 f"{', '.join(differ) or 'none'}.")
    return text


def render() -> str:
    """same_start.md as the raw files give it."""
    records = comparisons()
    lines = [
        "# Same start: fedlight against the authors' own code",
        "",
        "Each row: one method run by its authors' code and by fedlight from the same initial "
        "weights, on the same clients, with the same batches, round after round (each "
        "script's docstring says how; the authors' code is run as it is, from outside, its "
        "checkout given on the command line). The accuracy is each round's personalized "
        "accuracy after local training, in %: the mean over participants for MAP, FedRS, "
        "FedPHP and the privatizations, pooled over clients for GPFL (PFLlib's "
        "`test_metrics`). fedlight runs each method with the switches that give the "
        "authors' code's form where it differs from the paper's (the commands below; "
        "[docs/authors_code.md](../../docs/authors_code.md) lists them). Written by "
        "`python benchmarks/same_start.py` from the files in [same_start/](same_start/) "
        "(GPFL's from the printed output of `benchmarks/gpfl_rounds_vs_pfllib.py` that its "
        "JSON file names).",
        "",
        *summary_table(records),
        *choices_table(records),
        "",
        verdict(records),
        *float_order_section(records),
        *aggregation_section(records),
        "",
        "## Per round",
    ]
    for name, record in records:
        lines += per_round_section(name, record)
    for name, record in aggregation_runs():
        hpm = " and HPM update" if record.get("authors_hpm_update") == "fedlight" else ""
        lines += per_round_section(name, record, f", the authors' aggregation{hpm} made "
                                   "fedlight's")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when same_start.md differs from its output")
    options = parser.parse_args(argv)
    text = render()
    if options.check:
        if not OUTPUT.is_file() or OUTPUT.read_text() != text:
            print(f"{OUTPUT.relative_to(ROOT)} differs from `python benchmarks/same_start.py`'s "
                  "output", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
