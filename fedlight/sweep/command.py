"""The ``fedlight sweep`` command line."""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import fedlight.sweep
from fedlight.parsing.parser import CommandParser
from fedlight.sweep.execute import run_cells
from fedlight.sweep.plan import Planned, plan_sweep
from fedlight.sweep.results import write_results
from fedlight.sweep.runner import cpu_seconds
from fedlight.sweep.spec import SELECT_MODES, Sweep, load_sweep
from fedlight.sweep.sweep_file_error import SweepError


def parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="fedlight sweep",
                           description=(fedlight.sweep.__doc__ or "").replace("``", ""),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", nargs="?", help="a sweep file (YAML)")
    parser.add_argument("--config", "-c", help="base fit config (replaces the file's base)")
    parser.add_argument("--methods", nargs="+", help="method labels of the file or class names")
    parser.add_argument("--settings", nargs="+", help="run only these settings of the file")
    parser.add_argument("--seeds", nargs="+", type=int, help="seeds (replace the file's)")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="a config entry for every run, e.g. trainer.rounds=5 (repeatable)")
    parser.add_argument("--grid", action="append", metavar="KEY=V1,V2",
                        help="values of one grid axis, e.g. model.init_args.lr=0.01,0.005")
    parser.add_argument("--select", choices=SELECT_MODES, help="choose grid points on validation")
    parser.add_argument("--trials", type=int, help="a search's trials per study (replaces its "
                        "n_trials; a finished search given more goes on)")
    parser.add_argument("--name", help="the sweep's name (default: the file's name)")
    parser.add_argument("--out", help="output folder (default: sweeps/<name>)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (processes with "
                        "one torch thread each; default 1)")
    parser.add_argument("--dry-run", action="store_true",
                        help="resolve and list the runs (cached or not) without running")
    parser.add_argument("--report-only", action="store_true",
                        help="write the tables of the runs that have finished and run nothing "
                        "(a sweep still running in another process, or stopped)")
    return parser


def main(argv: list[str]) -> None:
    options = parser().parse_args(argv)
    if options.jobs < 1:
        raise SweepError(f"--jobs must be at least 1, got {options.jobs}")
    sweep = load_sweep(options.sweep, options)
    out = Path(options.out or Path("sweeps") / sweep.name)
    command = "fedlight sweep " + " ".join(argv)
    resume = shlex.join(["fedlight", "sweep", *argv])
    if sweep.search is not None:
        if options.report_only:
            raise SweepError("--report-only applies to grids; a search writes its tables "
                             "whenever it is resumed")
        with saying_how_to_resume(resume, "finished trials are kept"):
            run_search_command(sweep, out, options.jobs, options.dry_run, command, resume)
        return
    started, cpu_started = time.perf_counter(), cpu_seconds()
    planned = plan_sweep(sweep, out)
    if options.dry_run:
        for item in planned:
            state = "cached" if item.record.is_file() else "to run"
            print(f"{item.cell.label}: {item.name} ({state})")
        return
    sections: list[str] = []
    if options.report_only:
        planned, sections = ended_runs(planned, out)
    else:
        out.mkdir(parents=True, exist_ok=True)
        with saying_how_to_resume(resume, "finished runs are kept"):
            run_cells(planned, options.jobs, resume_hint(resume))
    path = write_results(sweep, planned, out, command, time.perf_counter() - started,
                         cpu_seconds() - cpu_started, sections=sections)
    print(f"wrote {path}, {out / 'results.csv'} and {out / 'runs.csv'}", file=sys.stderr)


def resume_hint(command: str) -> str:
    """What a run of the sweep stopped part-way says resumes it: the same sweep command."""
    return f"{command} (the same sweep command; it resumes this run from its checkpoint)"


@contextlib.contextmanager
def saying_how_to_resume(command: str, kept: str) -> Iterator[None]:
    """On Ctrl-C (or SIGTERM) during a sweep, one line on stderr: how to resume it."""
    try:
        yield
    except KeyboardInterrupt:
        print(f"sweep: stopped; {kept} and stopped runs resume from their last checkpoint; "
              f"resume with the same command: {command}", file=sys.stderr, flush=True)
        raise


def ended_runs(planned: list[Planned], out: Path) -> tuple[list[Planned], list[str]]:
    """The planned runs that have ended (a record: finished or failed) and, where some have
    not, the line that says how many of the sweep's they are; one line error when none has."""
    ended = [item for item in planned if item.record.is_file()]
    if not ended:
        raise SweepError(f"--report-only: none of the sweep's {len(planned)} runs has "
                         f"finished in {str(out)!r}")
    if len(ended) == len(planned):
        return ended, []
    return ended, [f"{len(ended)} of the sweep's {len(planned)} runs have ended (finished or "
                   "failed); the rest have not started or are still running.", ""]


def run_search_command(sweep: Sweep, out: Path, jobs: int, dry_run: bool, command: str,
                       resume: str | None = None) -> None:
    """Run (or resume) the sweep's search and write its tables; with ``dry_run``, check it
    and list its studies."""
    from fedlight.sweep import search  # Optuna is imported by searches only

    started, cpu_started = time.perf_counter(), cpu_seconds()
    if dry_run:
        search.check_search(sweep, out)
        for method, setting in search.studies(sweep):
            print(f"study {search.study_name(sweep, method, setting)}: "
                  f"{sweep.search.n_trials} trials over {', '.join(sweep.search.space)}")
        return
    search.run_search(sweep, out, jobs, resume_hint(resume or command))
    sections = search.write_trials_csv(sweep, out)
    planned, trials = search.finished_runs(sweep, out)
    path = write_results(sweep, planned, out, command, time.perf_counter() - started,
                         cpu_seconds() - cpu_started, trials, sections)
    print(f"wrote {path} and {out / 'trials.csv'}", file=sys.stderr)
