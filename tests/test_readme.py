"""The README's Python path runs as written and is reproducible: executing its snippets twice
(at one round) gives the same metrics, because the trainer re-initializes the model from its
seed; and a module first trained by a plain lightning.Trainer still logs its train/* columns."""

from __future__ import annotations

import csv
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


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
    from fedlight.federation.server import resolve_rule
    from fedlight.privacy import DPFedAvg
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
