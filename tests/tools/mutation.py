"""Mutation score of the flagship method files: the share of mutmut's mutants the tests kill.

mutmut (https://github.com/boxed/mutmut, version 3) rewrites every function of a file into
many one-token variants (an operator, a constant, an argument, a call dropped) and runs the
tests that cover the function against each; a mutant is *killed* when a test fails. A
surviving mutant is a change of the code that no test notices.

The script copies the repository into a temporary folder (mutmut writes a ``mutants/`` tree
and reads its settings from ``pyproject.toml``), adds a ``[tool.mutmut]`` section naming the
method files and their test files, runs ``mutmut run`` there and prints, per file, the
mutants killed, survived, timed out and not covered, and the score ``killed / (killed +
survived)`` (timeouts count as killed, as mutmut does; "no tests" mutants are in code no
selected test reaches). ``--by-function`` adds one line per function, ``--survivors`` lists
the surviving mutants' names (``mutmut show NAME`` in the kept folder prints the diff).

    python tests/tools/mutation.py                                 # the five files, ~1 hour
    python tests/tools/mutation.py --files map --by-function       # one file
    python tests/tools/mutation.py --files map --core              # its loss and update code
    python tests/tools/mutation.py --files fedpick --keep /tmp/mm  # keep the mutants folder

mutmut runs each original function under a new name (``xǁGPFLǁ__init____mutmut_orig``)
called through ``trampoline`` frames. The copy's ``fedlight/clients/base.py`` (never mutated)
is taught those names in ``_outermost_init_arguments``, the frame walk that lets the trainer
rebuild a client from its constructor arguments; without it every test of a federated run
with non-default arguments fails under mutmut.

It is test tooling, run by hand: not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: method file -> the test files that exercise it
TARGETS: dict[str, tuple[str, list[str]]] = {
    "gpfl": ("fedlight/clients/gpfl.py", ["tests/test_gpfl.py"]),
    "map": ("fedlight/clients/map.py", ["tests/test_map.py"]),
    "fedpick": ("fedlight/clients/fedpick.py", ["tests/test_fedpick.py"]),
    "privatize": ("fedlight/clients/privatize.py", ["tests/test_privatize.py"]),
    "auto_privatize": ("fedlight/clients/auto_privatize.py", ["tests/test_privatize.py"]),
}
#: the loss and update code of each file (``--core``)
CORE: dict[str, list[str]] = {
    "gpfl": ["ConditionalValve.forward", "GPFL.refresh_conditions", "GPFL.routes",
             "GPFL.alignment_logits", "GPFL.training_step"],
    "map": ["kd_loss", "mmd_loss", "hpm_momentum",
            "MAP.training_step", "MAP.on_round_end"],
    "fedpick": ["negative_entropy", "symmetric_kl", "gumbel_noise", "FedPick.select",
                "FedPick.outputs", "FedPick._predict", "FedPick.training_step"],
    "privatize": ["Privatize.path_outputs", "Privatize.combine_outputs",
                  "Privatize.training_step"],
    "auto_privatize": ["AutoSA.coefficients", "AutoSA.fused_logits", "AutoSA.training_step",
                       "_gumbel_like"],
}
KILLED = {"killed", "timeout", "segfault"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", nargs="+", choices=sorted(TARGETS), default=list(TARGETS),
                        help="which method files to mutate (default: all five)")
    parser.add_argument("--max-children", type=int, default=2,
                        help="mutants tested in parallel (default 2)")
    parser.add_argument("--core", action="store_true",
                        help="mutate only the loss and update functions (CORE in the script)")
    parser.add_argument("--by-function", action="store_true", help="a line per function")
    parser.add_argument("--survivors", action="store_true", help="list surviving mutants")
    parser.add_argument("--timeout", type=float, default=None,
                        help="stop mutmut after this many seconds and report the mutants "
                             "checked so far")
    parser.add_argument("--keep", type=Path, default=None,
                        help="run in this folder and keep it (default: a temporary folder)")
    return parser.parse_args(argv)


def mutmut_section(files: list[str], tests: list[str]) -> str:
    """The ``[tool.mutmut]`` settings: mutate ``files`` only, select ``tests``."""
    def toml_list(items: list[str]) -> str:
        return "[" + ", ".join(json.dumps(i) for i in items) + "]"

    return (
        "\n[tool.mutmut]\n"
        'source_paths = ["fedlight"]\n'
        f"only_mutate = {toml_list(files)}\n"
        f"pytest_add_cli_args_test_selection = {toml_list(tests)}\n"
        'pytest_add_cli_args = ["-q", "-x", "-p", "no:cacheprovider"]\n'
        "mutate_only_covered_lines = true\n"
        'process_isolation = "forkserver"\n'  # torch is not fork-safe once initialized
        "use_git_change_detection = false\n"
    )


#: (original, replacement) in the copy of fedlight/clients/base.py: see the module docstring
FRAME_WALK_PATCH = (
    ('frame.f_code.co_name == "__init__"',
     '(frame.f_code.co_name == "__init__" or "ǁ__init____mutmut_" in frame.f_code.co_name)'),
    ("elif outer is not None:",
     'elif outer is not None and frame.f_code.co_name not in ("trampoline", '
     '"_trampoline_wrapper"):'),
)


def prepare(workdir: Path, files: list[str], tests: list[str]) -> None:
    """Copy the package, the tests and the settings into ``workdir``."""
    for name in ("fedlight", "tests"):
        shutil.copytree(ROOT / name, workdir / name, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    base = workdir / "fedlight/clients/base.py"
    text = base.read_text()
    for old, new in FRAME_WALK_PATCH:
        if text.count(old) != 1:
            raise SystemExit(f"tests/tools/mutation.py: {old!r} not found once in base.py")
        text = text.replace(old, new)
    base.write_text(text)
    for name in ("setup.cfg", "ruff.toml"):
        shutil.copy2(ROOT / name, workdir / name)
    text = (ROOT / "pyproject.toml").read_text()
    (workdir / "pyproject.toml").write_text(text + mutmut_section(files, tests))
    shutil.rmtree(workdir / "mutants", ignore_errors=True)


def mutant_globs(function: str) -> str:
    """mutmut's mutant-name pattern of a function: ``kd_loss`` or ``MAP.training_step``."""
    return "*." + ("x" + "".join(f"ǁ{part}" for part in function.split("."))
                   if "." in function else f"x_{function}") + "__mutmut_*"


def statuses(workdir: Path, files: list[str]) -> dict[str, dict[str, str]]:
    """``{file: {mutant name: status}}`` from mutmut's ``.meta`` files (checked ones only)."""
    from mutmut.stats import status_by_exit_code

    result = {}
    for path in files:
        meta = json.loads((workdir / "mutants" / f"{path}.meta").read_text())
        result[path] = {name: status_by_exit_code[code]
                        for name, code in meta["exit_code_by_key"].items() if code is not None}
    return result


def score(counts: Counter) -> str:
    killed = sum(counts[s] for s in KILLED)
    tested = killed + counts["survived"]
    return f"{killed / tested:6.1%}" if tested else "   n/a"


def function_of(mutant: str) -> str:
    """``fedlight.clients.map.xǁMAPǁtraining_step__mutmut_3`` -> ``MAP.training_step``."""
    name = mutant.rsplit(".", 1)[-1].rsplit("__mutmut_", 1)[0]
    if "ǁ" in name:
        return ".".join(name.split("ǁ")[1:])
    return name.removeprefix("x_")


def report(results: dict[str, dict[str, str]], by_function: bool, survivors: bool) -> None:
    header = f"{'file':40s} {'mutants':>7s} {'killed':>6s} {'surv.':>5s} {'t/o':>4s} " \
             f"{'no test':>7s} {'score':>6s}"
    print(header)
    total: Counter = Counter()
    for path, by_name in results.items():
        counts = Counter(by_name.values())
        total += counts
        print(f"{path:40s} {len(by_name):7d} {counts['killed']:6d} {counts['survived']:5d} "
              f"{counts['timeout']:4d} {counts['no tests']:7d} {score(counts)}")
        if by_function:
            functions: dict[str, Counter] = defaultdict(Counter)
            for name, status in by_name.items():
                functions[function_of(name)][status] += 1
            for function, c in sorted(functions.items()):
                print(f"    {function:36s} {sum(c.values()):7d} {c['killed']:6d} "
                      f"{c['survived']:5d} {c['timeout']:4d} {c['no tests']:7d} {score(c)}")
        if survivors:
            for name, status in sorted(by_name.items()):
                if status == "survived":
                    print(f"    survived: {name}")
    print(f"{'all':40s} {sum(total.values()):7d} {total['killed']:6d} {total['survived']:5d} "
          f"{total['timeout']:4d} {total['no tests']:7d} {score(total)}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    files = [TARGETS[name][0] for name in args.files]
    tests = sorted({t for name in args.files for t in TARGETS[name][1]})
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="fedlight-mutmut-"))
    workdir.mkdir(parents=True, exist_ok=True)
    prepare(workdir, files, tests)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # import the mutants
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", WANDB_MODE="offline",
               WANDB_SILENT="true", MPLBACKEND="Agg")
    mutmut = [sys.executable, "-c", "from mutmut.__main__ import cli; cli()"]
    start_wall, start_cpu = time.time(), _children_cpu()
    selected = [mutant_globs(f) for name in args.files for f in CORE[name]] if args.core else []
    process = subprocess.Popen([*mutmut, "run", "--max-children", str(args.max_children),
                                *selected], cwd=workdir, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, preexec_fn=os.setsid)
    try:
        output, _ = process.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)  # mutmut and its workers
        output, _ = process.communicate()
        print(f"stopped after {args.timeout:.0f} s: partial results")
    wall, cpu = time.time() - start_wall, _children_cpu() - start_cpu
    if process.returncode not in (0, -signal.SIGTERM):
        print(output[-3000:])
        raise SystemExit(f"mutmut failed (exit code {process.returncode}); folder: {workdir}")
    report(statuses(workdir, files), args.by_function, args.survivors)
    print(f"wall {wall:.0f} s, CPU {cpu:.0f} s, {args.max_children} children; tests: "
          f"{' '.join(tests)}")
    if args.keep is None:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"mutants kept in {workdir}")


def _children_cpu() -> float:
    usage = os.times()
    return usage.children_user + usage.children_system


if __name__ == "__main__":
    main()
