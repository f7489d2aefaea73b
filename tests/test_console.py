"""The ``fedlight`` command's entry point: it runs the command line with the collector on and
the imports' objects frozen, and ``python -m fedlight`` is the same command."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

import fedlight.cli
from fedlight import console


@pytest.fixture
def _restore_collector():
    yield
    gc.enable()


@pytest.mark.usefixtures("_restore_collector")
def test_the_command_imports_with_the_collector_off_then_runs_with_it_on(monkeypatch):
    events = []
    monkeypatch.setattr(console.gc, "freeze", lambda: events.append(("freeze", gc.isenabled())))

    def run_command() -> None:
        events.append(("run", gc.isenabled()))
        raise SystemExit(2)  # a user error still ends through the entry point's clean-up

    monkeypatch.setattr(fedlight.cli, "main", run_command)
    with pytest.raises(SystemExit):
        console.main()
    # frozen once after the imports (made with the collector off), once before the end
    assert events == [("freeze", False), ("run", True), ("freeze", True)]
    assert gc.isenabled()


def test_python_dash_m_fedlight_is_the_fedlight_command():
    done = subprocess.run([sys.executable, "-m", "fedlight", "fit", "--model", "FedAvg",
                           "--trainer.rounds", "0"], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["error: trainer.rounds must be at least 1, got 0"]
