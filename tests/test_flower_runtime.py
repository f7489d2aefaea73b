"""fedlight on Flower's real runtime, with the commands of docs/flower.md's deployment section
(read from the page): certificates and keys written by fedlight.flower.certificates, a
flower-superlink with TLS and SuperNode authentication and one registered flower-supernode per
client on the loopback address, the example app submitted with flwr run. The metrics equal
fedlight fit's for FedAvg and FedPer with the same seed; a SuperNode whose key is not
registered is refused (and the run goes on without it); a SuperNode without TLS never
connects; secure aggregation (SecAgg+) on the deployment gives fit's metrics within its
quantization; SuperNodes sending each kind of bad update (tests/flower_hostile/) are refused,
each recorded in refused.json; a SuperNode stopped while it holds a round's task
(tests/flower_stalling/) is counted as dropped and the run goes on; restarted, it reads back
its private state; a run stopped with flwr stop resumes with --ckpt_path last.

Every wait is bounded; every process is stopped at the end."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from tests.metric_rows import assert_same_rows  # noqa: E402

BINARIES = ("flwr", "flower-superlink", "flower-supernode")
missing = [b for b in BINARIES if shutil.which(b) is None]
# slow: deselected from the default run (setup.cfg); CI runs it with python -m pytest -m slow -n 0
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    bool(missing), reason=f"Flower's runtime binaries are not installed: {', '.join(missing)}")]

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "examples" / "flower"
DOC = ROOT / "docs" / "flower.md"
CONFIGS = ROOT / "configs"
CLIENTS = 3
COMMON = ["--data.num_clients", str(CLIENTS), "--trainer.join_ratio", "1.0",
          "--trainer.batch_size", "32", "--trainer.progress_bar", "false",
          "--trainer.verbose", "false", "--trainer.threads", "1", "--trainer.checkpoint_every",
          "1"]
# Seconds any one step may take (each message starts a ClientApp process); a slow machine
# may set FEDLIGHT_FLOWER_WAIT higher.
WAIT = float(os.environ.get("FEDLIGHT_FLOWER_WAIT", "120"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(condition, what: str, timeout: float = WAIT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(f"{what} did not happen within {timeout} s")


def doc_block(marker: str) -> str:
    """The fenced block that follows marker in docs/flower.md."""
    text = DOC.read_text()
    after = text[text.index(marker):]
    body = after[after.index("```"):]
    body = body[body.index("\n") + 1:]
    return body[:body.index("```")]


def doc_commands() -> dict[str, list[str]]:
    """The deployment block's commands by program (flwr by its subcommand): arguments as the
    shell splits them, continuation lines joined, comments left out."""
    lines = doc_block("deployment commands:").replace("\\\n", " ").splitlines()
    commands = [shlex.split(line) for line in lines if line.strip() and
                not line.lstrip().startswith("#")]
    return {" ".join(c[:2]) if c[0] in ("flwr", "python") else c[0]: c for c in commands}


def localized(command: list[str], **values: str) -> list[str]:
    """A documented command with the doc's example values replaced by the test's: the
    SuperLink's port 9091, the SuperNode's port 9100, SuperNode 0's key and partition, the
    state folder."""
    swaps = {"9091": values.get("port", "9091"), "9100": values.get("node_port", "9100"),
             "supernode-0.": f"supernode-{values.get('node', '0')}.",
             "partition-id=0": f"partition-id={values.get('partition', values.get('node', '0'))}",
             "/var/lib/fedlight": values.get("state", "/var/lib/fedlight")}
    out = []
    for argument in command:
        for old, new in swaps.items():
            argument = argument.replace(old, new)
        out.append(argument)
    return out


class Federation:
    """A SuperLink with TLS and SuperNode authentication and one registered SuperNode per
    client on 127.0.0.1, and flwr pointed at them, all started with the doc's commands."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.port = folder, free_port()
        self.commands = doc_commands()
        self.env = {**os.environ, "FLWR_HOME": str(folder / "flwr"),
                    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
                    "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                    "OMP_NUM_THREADS": "1"}
        self.run_command(self.commands["python -m"])  # the certificates and keys
        (folder / "flwr").mkdir(parents=True)
        (folder / "flwr" / "config.toml").write_text(
            doc_block("deployment config:").replace("9091", str(self.port)).replace(
                "/abs/path/certs", str(folder / "certs")))
        self.processes: dict[str, subprocess.Popen] = {}
        self.start("superlink", localized(self.commands["flower-superlink"],
                                          port=str(self.port)))
        wait_for(self.listening, "the SuperLink listening")
        for client in range(CLIENTS):
            self.flwr(*localized(self.commands["flwr supernode"], node=str(client))[1:])
            self.start_supernode(client)

    def run_command(self, command: list[str]) -> str:
        command = [sys.executable if command[0] == "python" else command[0], *command[1:]]
        done = subprocess.run(command, env=self.env, capture_output=True, text=True,
                              timeout=WAIT, cwd=self.folder)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def listening(self) -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", self.port)) == 0

    def start(self, name: str, command: list[str]) -> subprocess.Popen:
        log = (self.folder / f"{name}.log").open("a")
        # a session of its own: stopping it also stops what it started (a SuperNode's ClientApp)
        self.processes[name] = subprocess.Popen(command, env=self.env, stdout=log,
                                                stderr=subprocess.STDOUT, cwd=self.folder,
                                                start_new_session=True)
        return self.processes[name]

    def start_supernode(self, client: int, key: int | None = None,
                        name: str | None = None) -> subprocess.Popen:
        """SuperNode of client with key pair key (default: the client's own)."""
        node = str(client if key is None else key)
        return self.start(name or f"supernode-{client}", localized(
            self.commands["flower-supernode"], port=str(self.port), node=node,
            partition=str(client), node_port=str(free_port()), state=str(self.folder / "state")))

    def stop(self, name: str) -> None:
        """SIGTERM (a SuperNode then tells the SuperLink it left), then wait; whatever the
        process started and left behind is killed with it."""
        process = self.processes.pop(name)
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)

    def close(self) -> None:
        for name in [n for n in self.processes if n != "superlink"] + ["superlink"]:
            if name in self.processes:
                self.stop(name)

    def flwr(self, *args: str, timeout: float = WAIT) -> str:
        return self.run_command(["flwr", *args])

    def online_nodes(self) -> int:
        """SuperNodes the SuperLink lists as online."""
        listing = json.loads(self.flwr("supernode", "ls", "local", "--format", "json"))
        return sum(node["status"] == "online" for node in listing["nodes"])

    def submit(self, config: str, overrides: list[str], extra: str = "", app: Path = APP) -> int:
        """flwr run app (default: the example app) with this config and extra run config (the
        doc's command); the run's Flower id."""
        documented = self.commands["flwr run"]
        run_config = f"config='{CONFIGS / config}' overrides='{' '.join(overrides)}' {extra}"
        command = [str(app) if arg == "examples/flower" else arg
                   for arg in documented[:documented.index("--run-config") + 1]]
        out = self.run_command([*command, run_config])
        return int(re.search(r"started run (\d+)", out).group(1))


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    federation = Federation(tmp_path_factory.mktemp("federation"))
    yield federation
    federation.close()


def rows(folder: Path) -> list[dict[str, str]]:
    path = folder / "metrics.csv"
    if not path.is_file():
        return []
    with path.open() as handle:
        return list(csv.DictReader(handle))


def finished(folder: Path) -> dict | None:
    summary = folder / "summary.json"
    return json.loads(summary.read_text()) if summary.is_file() else None


def fit_rows(config: str, overrides: list[str], root: Path) -> list[dict[str, str]]:
    from fedlight.cli import FedlightCLI

    FedlightCLI(args=["fit", "-c", str(CONFIGS / config), *overrides,
                      "--trainer.default_root_dir", str(root), "--trainer.run_name", "fit"])
    return rows(root / "fit")


def comparable(table: list[dict[str, str]]) -> list[dict[str, float]]:
    return [{k: float(v) for k, v in row.items() if k != "seconds" and v not in ("", None)}
            for row in table]


def run_folder(root: Path) -> Path:
    return wait_for(lambda: next(iter(root.glob("*")), None), "the run folder")


def exit_code(process: subprocess.Popen) -> int:
    return wait_for(lambda: process.poll() is not None, "the process ending") and process.poll()


def test_fedper_on_flower_with_a_supernode_stopped_and_restarted(federation, tmp_path):
    config = "fedper/mnist5k_dirichlet.yaml"
    overrides = [*COMMON, "--trainer.rounds", "3", "--trainer.eval_every", "1"]
    stalled = tmp_path / "stalled"  # written by client 2's ClientApp once it holds round 2
    federation.submit(config, [*overrides, "--trainer.default_root_dir", str(tmp_path / "runs")],
                      f"stall-client=2 stall-round=1 stall-marker='{stalled}'",
                      app=ROOT / "tests" / "flower_stalling")
    folder = run_folder(tmp_path / "runs")
    wait_for(stalled.is_file, "client 2 taking round 2's task", timeout=2 * WAIT)
    federation.stop("supernode-2")  # it holds round 2's task: client 2 drops out of round 2
    federation.start_supernode(2)  # found before round 3, which it trains from its state
    summary = wait_for(lambda: finished(folder), "the run finishing", timeout=2 * WAIT)
    got = rows(folder)
    assert [int(r["dropped"] or 0) for r in got] == [0, 1, 0] and summary["rounds"] == 3
    state = federation.folder / "state" / folder.name / "client-2"
    # it trained round 3 from its state after round 1 (round 2's was never written)
    assert not (state / "round-1.pt").exists() and (state / "round-2.pt").is_file()
    expected = comparable(fit_rows(config, overrides, tmp_path / "fit"))
    assert_same_rows(comparable(got[:1]), expected[:1], rel=1e-5)  # before the fault


def test_a_supernode_whose_key_is_not_registered_is_refused(federation):
    from fedlight.flower.certificates import supernode_key_pair

    private, public = supernode_key_pair()  # a key pair nobody registered
    (federation.folder / "certs" / "supernode-9.key").write_bytes(private)
    (federation.folder / "certs" / "supernode-9.pub").write_bytes(public)
    # it claims client 1: let in, it would take client 1's tasks (the runs below would differ)
    intruder = federation.start_supernode(1, key=9, name="unregistered")
    assert exit_code(intruder) != 0
    log = (federation.folder / "unregistered.log").read_text()
    assert "Exit Code: 305" in log and "Failed to activate SuperNode" in log
    assert federation.online_nodes() == CLIENTS


def test_a_supernode_without_tls_cannot_connect(federation):
    command = federation.commands["flower-supernode"]
    plain = ["--insecure" if a == "--root-certificates" else a for a in command
             if a != "certs/ca.crt"]
    plain = [*plain[:plain.index("--auth-supernode-private-key")],
             *plain[plain.index("--superlink"):], "--max-retries", "2"]
    process = federation.start("plain", localized(plain, port=str(federation.port),
                                                  node_port=str(free_port()),
                                                  state=str(federation.folder / "plain")))
    assert exit_code(process) != 0
    assert "Connection attempt failed" in (federation.folder / "plain.log").read_text()
    assert federation.online_nodes() == CLIENTS


def test_fedavg_on_flower_stopped_and_resumed_gives_the_metrics_of_fit(federation, tmp_path):
    config = "fedavg/mnist5k_dirichlet.yaml"
    overrides = [*COMMON, "--trainer.rounds", "2", "--trainer.eval_every", "1"]
    flower = [*overrides, "--trainer.default_root_dir", str(tmp_path / "runs")]
    run_id = federation.submit(config, flower)
    folder = run_folder(tmp_path / "runs")
    wait_for(lambda: len(rows(folder)) >= 1, "round 1", timeout=2 * WAIT)
    federation.flwr("stop", str(run_id), "local")  # round 2 is under way
    wait_for(lambda: (folder / "checkpoints" / "last.ckpt").is_file(), "the checkpoint")
    federation.submit(config, [*flower, "--ckpt_path", "last"])
    summary = wait_for(lambda: finished(folder), "the resumed run finishing", timeout=2 * WAIT)
    assert summary["engine"] == "flower" and summary["rounds"] == 2
    expected = comparable(fit_rows(config, overrides, tmp_path / "fit"))
    assert_same_rows(comparable(rows(folder)), expected, rel=1e-5)


def test_fedavg_with_secure_aggregation_on_the_deployment_matches_fit(federation, tmp_path):
    config = "fedavg/mnist5k_dirichlet.yaml"
    overrides = [*COMMON, "--trainer.rounds", "1"]
    run_id = federation.submit(
        config, [*overrides, "--trainer.default_root_dir", str(tmp_path / "runs")],
        "secure-aggregation=true secagg-shares=3 secagg-threshold=2")
    folder = run_folder(tmp_path / "runs")
    summary = wait_for(lambda: finished(folder), "the run finishing", timeout=3 * WAIT)
    assert summary["rounds"] == 1
    (got,) = comparable(rows(folder))
    (expected,) = comparable(fit_rows(config, overrides, tmp_path / "fit"))
    # within SecAgg+'s quantization (tests/test_flower_secure.py bounds the states)
    for column in ("global_accuracy", "personalized_accuracy"):
        assert got[column] == pytest.approx(expected[column], abs=0.01), column
    assert "Secure aggregation completed" in federation.flwr("log", str(run_id), "local",
                                                             "--show")


def test_each_kind_of_bad_update_from_a_supernode_is_refused(federation, tmp_path):
    from tests.flower_hostile.hostile import FAULTS, SCHEDULE

    overrides = [*COMMON, "--trainer.rounds", "3", "--trainer.eval_every", "3",
                 "--trainer.default_root_dir", str(tmp_path / "runs")]
    federation.submit("fedavg/mnist5k_dirichlet.yaml", overrides,
                      app=ROOT / "tests" / "flower_hostile")
    folder = run_folder(tmp_path / "runs")
    summary = wait_for(lambda: finished(folder), "the run finishing", timeout=3 * WAIT)
    assert summary["rounds"] == 3 and [int(r["refused"]) for r in rows(folder)] == [2]
    refused = json.loads((folder / "refused.json").read_text())
    expected = [(r + 1, c, FAULTS[f][2]) for r, faults in SCHEDULE.items()
                for c, f in sorted(faults.items())]
    assert len(refused) == len(expected) == len(FAULTS)
    for entry, (round_number, client, cause) in zip(refused, expected, strict=True):
        assert (entry["round"], entry["client"]) == (round_number, client)
        assert re.match(cause, entry["cause"]), entry


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
