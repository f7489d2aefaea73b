"""The README's Python path runs as written and is reproducible: executing its snippets twice
(at one round) gives the same metrics, because the trainer re-initializes the model from its
seed; and a module first trained by a plain lightning.Trainer still logs its train/* columns.
The fedlight commands of the README and of docs/ parse as written (fit / test / validate
resolve their configuration, sweeps plan their runs)."""

from __future__ import annotations

import csv
import re
import shlex
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
PAGES = [README, *sorted((README.parent / "docs").glob("*.md"))]


def shell_commands(page: Path) -> list[str]:
    """The ``fedlight ...`` lines of a page's bash blocks (continuations joined, comments
    dropped)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", page.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            for part in line.split(" ; "):
                if part.startswith("fedlight "):
                    commands.append(part)
    return commands


COMMANDS = sorted({command: page.name for page in reversed(PAGES)
                   for command in shell_commands(page)}.items(), key=lambda item: item[0])


def _check_command(argv: list[str]) -> list[str]:
    """The arguments that check ``argv`` without running it, or [] where none exists."""
    if argv[0] in ("fit", "test", "validate") and "--help" not in argv:
        return [*argv, "--print_config"]
    if argv[0] == "sweep":
        return [*argv, "--dry-run"]
    if argv[0] in ("fit", "test", "validate"):
        return argv
    return []


@pytest.mark.parametrize(("command", "page"), COMMANDS, ids=[c for c, _ in COMMANDS])
def test_the_documented_commands_parse(command, page, tmp_path, monkeypatch, capsys):
    from fedlight.cli import main

    argv = shlex.split(command)[1:]
    for path in (a for a in argv if a.endswith((".yaml", ".yml"))):
        assert (README.parent / path).is_file(), f"{page}: {command}: no {path}"
    checked = _check_command(argv)
    if not checked:
        pytest.skip(f"{argv[0]} needs runs or a Flower federation to check")
    monkeypatch.chdir(README.parent)
    monkeypatch.setenv("FEDLIGHT_CACHE", str(tmp_path / "cache"))
    try:
        main(checked + ([] if argv[0] != "sweep" else ["--out", str(tmp_path / "sweep")]))
    except SystemExit as stop:
        assert stop.code in (0, None), f"{page}: {command}: {capsys.readouterr().err[-500:]}"


def test_the_pages_hold_commands_to_check():
    assert len(COMMANDS) >= 10 and "README.md" in {page for _, page in COMMANDS}


def python_snippets() -> str:
    """The README's two Python blocks after 'Every client is a plain', shortened to 1 round."""
    text = README.read_text()
    start = text.index("Every client is a plain")
    blocks = re.findall(r"```python\n(.*?)```", text[start:], re.S)[:2]
    code = "\n".join(blocks)
    assert "FederatedTrainer(" in code and "L.Trainer(" in code
    code = re.sub(r"rounds=\d+", "rounds=1", code)
    code = re.sub(r"max_epochs=\d+", "max_epochs=1", code)
    return code.replace("FederatedTrainer(", "FederatedTrainer(progress_bar=False, verbose=False, ")


def test_readme_python_snippet_is_reproducible(tmp_path, monkeypatch):
    code = python_snippets()
    summaries = []
    for attempt in range(2):
        folder = tmp_path / str(attempt)
        folder.mkdir()
        monkeypatch.chdir(folder)
        namespace: dict = {}
        exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 - the README's own code
        summaries.append(namespace["summary"])
    first, second = summaries
    assert first["last_personalized_accuracy"] == second["last_personalized_accuracy"]
    rows = [list(csv.DictReader(open(Path(s["run_dir"]) / "metrics.csv"))) for s in summaries]
    assert rows[0][0]["train_loss"] == rows[1][0]["train_loss"]


def test_extending_guide_examples_run(tmp_path):
    """The server rule and probe written in docs/extending.md work in a run."""
    from fedlight.clients import FedAvg
    from tests.conftest import make_client, tiny_data, tiny_trainer

    guide = (Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text()
    namespace: dict = {}
    for block in re.findall(r"```python\n(.*?)```", guide, re.S):
        if "class Median" in block or "class HeadNorm" in block:
            exec(compile(block, "extending.md", "exec"), namespace)  # noqa: S102
    trainer = tiny_trainer(tmp_path, rounds=2, probes=[namespace["HeadNorm"]()])
    summary = trainer.fit(make_client(FedAvg), tiny_data(), server=namespace["Median"]())
    rows = list(csv.DictReader(open(Path(summary["run_dir"]) / "metrics.csv")))
    assert summary["server"] == "Median" and float(rows[-1]["head_norm"]) > 0


def test_the_readme_names_exactly_the_methods_dp_does_not_wrap():
    from fedlight.clients import CLIENTS
    from fedlight.federation.build import resolve_rule
    from fedlight.server import DPFedAvg
    from tests.conftest import make_client

    refused = []
    for name, cls in sorted(CLIENTS.items()):
        shape = {"backbone": "cnn_bn", "input_shape": (1, 16, 16)} if name == "FedBN" else {}
        try:
            resolve_rule(make_client(cls, **shape).configure_server(), DPFedAvg(clip_norm=1.0),
                         name)
        except ValueError:
            refused.append(name)
    row = next(line for line in README.read_text().splitlines() if "`server: DPFedAvg`" in line)
    listed = re.search(r"\(not ([^:]+):", row)
    assert listed is not None, row
    assert listed.group(1).split(", ") == refused


def test_docs_and_code_speak_of_the_project_not_of_how_it_was_made():
    root = README.parent
    pattern = re.compile(r"issue [0-9]|stop [0-9]|agent|session", re.I)
    files = [README, *(root / "docs").rglob("*"), *(root / "benchmarks").rglob("*"),
             *(root / "fedlight").rglob("*.py")]
    hits = [f"{path.relative_to(root)}: {line.strip()}" for path in files
            if path.is_file() and path.suffix in (".md", ".py", ".yaml", ".csv", ".jsonl")
            for line in path.read_text().splitlines() if pattern.search(line)]
    assert hits == []


def test_every_relative_link_of_the_pages_resolves():
    root = README.parent
    pages = [*PAGES, root / "benchmarks" / "README.md",
             *(root / "benchmarks" / "results").glob("*.md")]
    broken = [f"{page.relative_to(root)} -> {link}" for page in pages
              for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text())
              if not link.startswith("http") and not (page.parent / link).exists()]
    assert broken == []
