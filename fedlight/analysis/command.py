"""``fedlight analyze <analysis> RUN_DIR [--out DIR] [--checkpoint last] [--pdf] [options]``.

Each analysis's options are the keyword arguments of its ``analyze`` function (read by
jsonargparse, with their docstring as help): ``fedlight analyze tsne --help`` lists them.
"""

from __future__ import annotations

from collections.abc import Sequence

from fedlight.analysis import analyses, analysis, analyze
from fedlight.parsing.parser import FedlightParser
from fedlight.plotting import with_pdf

USAGE = ("fedlight analyze <analysis> RUN_DIR [--out DIR] [--checkpoint last|best|FILE] [--pdf] "
         "[options]")
#: The arguments every analysis takes; the rest are its own.
COMMON = ("run_dir", "out", "checkpoint", "pdf")


def overview() -> str:
    """The text of ``fedlight analyze --help``: every analysis in one line."""
    lines = [f"usage: {USAGE}", "", "analyses (the paper figure each reproduces):"]
    for name, module in analyses().items():
        lines.append(f"  {name:<14}{(module.__doc__ or '').strip().splitlines()[0]}")
    lines += ["", "fedlight analyze <analysis> --help   the options of an analysis"]
    return "\n".join(lines)


def parser_of(name: str) -> FedlightParser:
    """The parser of ``fedlight analyze <name>``: the common arguments and the keyword
    arguments of the analysis's ``analyze``."""
    module = analysis(name)
    parser = FedlightParser(prog=f"fedlight analyze {name}",
                            usage=f"fedlight analyze {name} RUN_DIR [options]",
                            description=module.__doc__)
    parser.add_argument("run_dir", help="a finished run folder (config.yaml, checkpoints/)")
    parser.add_argument("--out", default=None, help="output folder (default: the run folder)")
    parser.add_argument("--checkpoint", default="last",
                        help="last, best (the round chosen on validation) or a checkpoint file")
    parser.add_argument("--pdf", action="store_true",
                        help="write the figure as PDF (vector) beside the PNG")
    parser.add_function_arguments(module.analyze, skip={"run", "out", "formats"})
    return parser


def main(argv: Sequence[str]) -> None:
    """Run one analysis and print the files it wrote."""
    argv = list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(overview())
        return
    name, rest = argv[0], argv[1:]
    options = parser_of(name).parse_args(rest).as_dict()
    common = {key: options.pop(key) for key in COMMON}
    options.pop("config", None)
    for path in analyze(name, common["run_dir"], common["out"], common["checkpoint"],
                        formats=with_pdf(common["pdf"]), **options):
        print(f"wrote {path}")


__all__ = ["main", "overview", "parser_of"]
