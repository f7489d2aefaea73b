"""Interrupt safety, exact resumes and refused resumes of changed configurations."""

from __future__ import annotations

import csv
import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from fedlight.cli import main
from fedlight.clients import FedAvg
from fedlight.core import files
from fedlight.federation.outputs.checkpoints import load_checkpoint
from tests.conftest import make_client, tiny_data, tiny_trainer

ROOT = Path(__file__).resolve().parents[1]
TINY = {
    "model": {"class_path": "FedAvg", "init_args": {"backbone": "mlp", "lr": 0.1}},
    "data": {"source": {"class_path": "Synthetic",
                        "init_args": {"samples": 240, "shape": [1, 8, 8], "classes": 4}},
             "num_clients": 4, "partition": {"class_path": "IID"}},
    "trainer": {"rounds": 12, "batch_size": 16, "accelerator": "cpu", "checkpoint_every": 100,
                "devices": 1,
                "logger": "csv", "seed": 0, "progress_bar": False},
}


def tiny_config(tmp_path: Path, root: Path, **trainer: object) -> str:
    config = {**TINY, "trainer": {**TINY["trainer"], "default_root_dir": str(root), **trainer}}
    path = tmp_path / f"tiny-{len(list(tmp_path.glob('tiny-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def wait_for_rows(path: Path, count: int, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if path.is_file() and len(path.read_text().splitlines()) > count:
            return
        time.sleep(0.01)
    raise AssertionError(f"{path} never reached {count} rows (exit code {process.poll()})")


def test_sigint_keeps_the_run_and_resume_matches_an_uninterrupted_run(tmp_path):
    runs = tmp_path / "runs"
    config = tiny_config(tmp_path, runs)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "fedlight.cli", "fit", "-c", config],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    run_dir = runs / "fedavg-synthetic-iid-s0"
    wait_for_rows(run_dir / "metrics.csv", 2, process, timeout=120)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    kept = rows(run_dir)
    assert 2 <= len(kept) < 12
    checkpoint = load_checkpoint(run_dir / "checkpoints" / "last.ckpt")
    assert checkpoint["rounds_done"] == len(kept)  # the state after the last completed round
    assert f"stopped after round {len(kept)}" in stderr
    assert "--ckpt_path last" in stderr and config in stderr
    assert len(stderr.strip().splitlines()) <= 2

    main(["fit", "-c", config, "--ckpt_path", "last"])
    reference = tmp_path / "reference"
    main(["fit", "-c", config, "--trainer.default_root_dir", str(reference)])
    resumed, uninterrupted = rows(run_dir), rows(reference / run_dir.name)
    assert len(resumed) == len(uninterrupted) == 12
    for a, b in zip(resumed, uninterrupted, strict=True):
        for column in ("personalized_accuracy", "global_accuracy", "train_loss"):
            assert float(a[column]) == pytest.approx(float(b[column]), rel=1e-6), column


@pytest.mark.parametrize("signum, to_group", [(signal.SIGINT, False), (signal.SIGTERM, True)],
                         ids=["sigint-to-the-command", "sigterm-to-its-process-group"])
def test_a_signal_stops_a_forked_two_process_run_with_exit_130_and_a_checkpoint(
        tmp_path, signum, to_group):
    """SIGINT or SIGTERM on ``--trainer.devices 2 --trainer.strategy ddp_fork``, sent to the
    command (as ``kill`` does) or to its whole process group (as a terminal's Ctrl-C or a
    service manager does): the ranks finish the round, rank 0 writes the checkpoint and the
    command exits 130 within seconds, instead of dying at once or training on unseen."""
    runs = tmp_path / "runs"
    config = tiny_config(tmp_path, runs, rounds=100_000, threads=1)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "fedlight.cli", "fit", "-c", config, "--trainer.devices", "2",
         "--trainer.strategy", "ddp_fork"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True)  # its own process group, as a terminal's foreground job
    run_dir = runs / "fedavg-synthetic-iid-s0"
    try:
        wait_for_rows(run_dir / "metrics.csv", 2, process, timeout=120)
        (os.killpg if to_group else os.kill)(process.pid, signum)
        sent = time.monotonic()
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, stderr
    assert time.monotonic() - sent < 30
    assert "Traceback" not in stderr
    kept = rows(run_dir)
    assert 2 <= len(kept) < 100_000
    checkpoint = load_checkpoint(run_dir / "checkpoints" / "last.ckpt")
    assert checkpoint["rounds_done"] == len(kept)
    assert f"stopped after round {len(kept)}" in stderr and "--ckpt_path last" in stderr


def test_two_processes_resuming_no_run_print_one_error_line(tmp_path):
    """``--trainer.devices 2 --ckpt_path last`` with no run: Fabric's ``ddp`` launcher re-runs
    the command for rank 1; rank 0 finds no checkpoint, every rank learns it and only rank 0
    prints the one line (no gloo traceback from rank 1)."""
    config = tiny_config(tmp_path, tmp_path / "runs", threads=1)
    done = run_two_processes(tmp_path, config, "--ckpt_path", "last")
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "no run named 'fedavg-synthetic-iid-s0'" in errors[0]
    assert "Traceback" not in done.stderr
    assert "Initializing distributed" not in done.stderr  # Fabric's set-up lines stay quiet
    assert_both_ranks_left_the_process_group(done.stderr)


def test_two_processes_leave_the_process_group_before_the_interpreter_exits(tmp_path):
    """A rank exiting with gloo's process group alive can die of SIGABRT while the interpreter
    tears down gloo's threads: every rank destroys it at exit, after a run as after an error."""
    config = tiny_config(tmp_path, tmp_path / "runs", threads=1, rounds=1)
    done = run_two_processes(tmp_path, config)
    assert done.returncode == 0, done.stderr
    assert_both_ranks_left_the_process_group(done.stderr)


#: Imported by every Python process of a test's command (PYTHONPATH's first folder): its
#: atexit handler is registered first, so it runs last and sees what the run left.
EXIT_PROBE = """import atexit, os, sys

def probe():
    distributed = sys.modules.get("torch.distributed")
    if distributed is not None and distributed.is_available():
        # one write: the two ranks share stderr, and a print is two writes
        os.write(2, f"process group at exit: {distributed.is_initialized()}\\n".encode())

atexit.register(probe)
"""


def run_two_processes(tmp_path: Path, config: str, *args: str) -> subprocess.CompletedProcess:
    """``fedlight fit -c config --trainer.devices 2 *args`` (Fabric's ``ddp`` launcher re-runs
    the command for rank 1), each process with :data:`EXIT_PROBE`."""
    probe = tmp_path / "probe"
    probe.mkdir(exist_ok=True)
    (probe / "sitecustomize.py").write_text(EXIT_PROBE)
    env = {**os.environ, "PYTHONPATH": f"{probe}{os.pathsep}{ROOT}", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "fedlight.cli", "fit", "-c", config,
                           "--trainer.devices", "2", *args],
                          env=env, capture_output=True, text=True, timeout=300)


def assert_both_ranks_left_the_process_group(stderr: str) -> None:
    assert re.findall(r"process group at exit: (\w+)", stderr) == ["False"] * 2, stderr


def test_a_forked_run_raises_a_ranks_error_as_it_was_raised(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FEDLIGHT_DEBUG", raising=False)
    config = tiny_config(tmp_path, tmp_path / "runs", threads=1)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "-c", config, "--trainer.devices", "2", "--trainer.strategy", "ddp_fork",
              "--ckpt_path", "last"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("error: ")] == [
        "error: ckpt_path='last' but no run named 'fedavg-synthetic-iid-s0' with "
        f"checkpoints/last.ckpt exists under '{tmp_path / 'runs'}'; pass a checkpoint path or "
        "run fit first"]
    assert "Traceback" not in err
    with pytest.raises(FileNotFoundError, match="no run named"):  # the rank's own exception
        tiny_trainer(tmp_path, devices=2, strategy="ddp_fork", threads=1).fit(
            make_client(FedAvg), tiny_data(), ckpt_path="last")


class FailsInRoundTwo(FedAvg):
    def on_round_start(self, round, message):
        if round == 1:
            raise RuntimeError("disk full")
        super().on_round_start(round, message)


def test_a_failure_after_the_first_round_keeps_the_run_folder(tmp_path):
    with pytest.raises(RuntimeError, match="disk full"):
        tiny_trainer(tmp_path, rounds=3, run_name="late", checkpoint_every=10).fit(
            make_client(FailsInRoundTwo), tiny_data())
    assert len(rows(tmp_path / "late")) == 1


def test_a_resume_under_a_changed_configuration_is_refused_naming_the_keys(tmp_path):
    tiny_trainer(tmp_path, rounds=2, run_name="r").fit(make_client(FedAvg), tiny_data())
    before = rows(tmp_path / "r")
    changed = tiny_trainer(tmp_path, rounds=3, run_name="r", seed=1, join_ratio=0.5)
    with pytest.raises(ValueError) as error:
        changed.fit(make_client(FedAvg), tiny_data(train_fraction=0.5), ckpt_path="last")
    message = str(error.value)
    for key in ("data.train_fraction: 0.75 -> 0.5", "trainer.seed: 0 -> 1",
                "trainer.join_ratio: 1.0 -> 0.5"):
        assert key in message
    assert "trainer.rounds:" not in message  # extending a run is allowed
    assert rows(tmp_path / "r") == before
    with pytest.raises(ValueError, match=r"model.lr: 0.1 -> 0.2"):
        tiny_trainer(tmp_path, run_name="r").test(make_client(FedAvg, lr=0.2), tiny_data())


def test_extending_a_method_that_reads_the_planned_rounds_is_refused(tmp_path):
    from fedlight.clients import MAP

    tiny_trainer(tmp_path, rounds=1, run_name="m").fit(make_client(MAP), tiny_data())
    with pytest.raises(ValueError, match="MAP trains with trainer.rounds as the planned number "
                                         "of rounds, so resuming its 1-round run with "
                                         "trainer.rounds 2 would differ"):
        tiny_trainer(tmp_path, rounds=2, run_name="m").fit(make_client(MAP), tiny_data(),
                                                           ckpt_path="last")
    assert [row["round"] for row in rows(tmp_path / "m")] == ["1"]


def test_resuming_a_run_already_past_trainer_rounds_says_nothing_is_trained(tmp_path):
    tiny_trainer(tmp_path, rounds=2, run_name="r").fit(make_client(FedAvg), tiny_data())
    before = rows(tmp_path / "r")
    for rounds in (1, 2):
        with pytest.raises(ValueError, match=f"nothing to train: the run is at round 2 and "
                                             f"trainer.rounds is {rounds}"):
            tiny_trainer(tmp_path, rounds=rounds, run_name="r").fit(
                make_client(FedAvg), tiny_data(), ckpt_path="last")
    assert rows(tmp_path / "r") == before


def test_a_resume_with_other_threads_is_refused(tmp_path):
    tiny_trainer(tmp_path, rounds=1, run_name="t", threads=1).fit(make_client(FedAvg),
                                                                  tiny_data())
    with pytest.raises(ValueError, match=r"trainer.threads: 1 -> 2"):
        tiny_trainer(tmp_path, rounds=2, run_name="t", threads=2).fit(
            make_client(FedAvg), tiny_data(), ckpt_path="last")


def test_last_names_exactly_this_seeds_run_never_a_longer_seed(tmp_path):
    tiny_trainer(tmp_path, rounds=1, seed=10).fit(make_client(FedAvg), tiny_data())
    (seed_10,) = [p.name for p in tmp_path.iterdir()]
    assert seed_10.endswith("-s10")
    with pytest.raises(FileNotFoundError, match=f"no run named '{seed_10[:-1]}'"):
        tiny_trainer(tmp_path, rounds=2, seed=1).fit(make_client(FedAvg), tiny_data(),
                                                     ckpt_path="last")
    tiny_trainer(tmp_path, rounds=1, seed=1).fit(make_client(FedAvg), tiny_data())
    tiny_trainer(tmp_path, rounds=1, seed=1).fit(make_client(FedAvg), tiny_data())  # -v2
    resumed = tiny_trainer(tmp_path, rounds=2, seed=1)
    resumed.fit(make_client(FedAvg), tiny_data(), ckpt_path="last")
    assert resumed.run_dir.name == seed_10[:-1] + "-v2"  # the newest run of seed 1
    assert [row["round"] for row in rows(tmp_path / seed_10)] == ["1"]


def test_extending_rounds_resumes_and_says_which_run(tmp_path, capsys):
    tiny_trainer(tmp_path, rounds=2, run_name="r").fit(make_client(FedAvg), tiny_data())
    tiny_trainer(tmp_path, rounds=3, run_name="r").fit(make_client(FedAvg), tiny_data(),
                                                       ckpt_path="last")
    assert f"resuming run {tmp_path / 'r'} at round 2" in capsys.readouterr().out
    assert [row["round"] for row in rows(tmp_path / "r")] == ["1", "2", "3"]
    tiny_trainer(tmp_path, run_name="r").validate(make_client(FedAvg), tiny_data())
    assert f"evaluating run {tmp_path / 'r'} at round 3" in capsys.readouterr().out


def test_without_a_terminal_each_evaluated_round_prints_one_plain_line(tmp_path, capsys):
    tiny_trainer(tmp_path, rounds=4, eval_every=2, progress_bar=True, verbose=False).fit(
        make_client(FedAvg), tiny_data())  # pytest's captured stdout is not a terminal
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("  ")[0] for line in lines] == ["round 2/4", "round 4/4"]
    assert all("pers 0." in line and "glob 0." in line for line in lines)


def test_best_checkpoint_is_chosen_on_validation_and_restores_the_reported_metrics(tmp_path):
    data = tiny_data(val_fraction=0.25)
    data.setup()
    for split in data.splits:  # validation is cut from training, disjoint from test
        assert len(split.val) and not set(split.val) & (set(split.train) | set(split.test))
    trainer = tiny_trainer(tmp_path, rounds=5, run_name="v", checkpoint_every=10)
    summary = trainer.fit(make_client(FedAvg, lr=0.3), data)
    history = rows(tmp_path / "v")
    val = [float(r["val_personalized_accuracy"]) for r in history]
    best_round = max(range(len(val)), key=lambda i: (val[i], i)) + 1
    assert summary["best_selected_on"] == "validation"
    assert summary["best_personalized_accuracy_round"] == best_round
    reported = float(history[best_round - 1]["personalized_accuracy"])
    assert summary["best_personalized_accuracy"] == pytest.approx(reported)
    best = tmp_path / "v" / "checkpoints" / "best.ckpt"
    assert load_checkpoint(best)["rounds_done"] == best_round
    metrics = tiny_trainer(tmp_path, run_name="v").test(make_client(FedAvg, lr=0.3),
                                                        tiny_data(val_fraction=0.25), "best")
    assert metrics["personalized_accuracy"] == pytest.approx(reported)
    assert metrics["val_personalized_accuracy"] == pytest.approx(val[best_round - 1])


def test_without_validation_the_protocol_is_unchanged(tmp_path):
    summary = tiny_trainer(tmp_path, rounds=2, run_name="t").fit(make_client(FedAvg),
                                                                 tiny_data())
    assert summary["best_selected_on"] == "test"
    assert "val_personalized_accuracy" not in rows(tmp_path / "t")[0]
    assert not (tmp_path / "t" / "checkpoints" / "best.ckpt").exists()


def test_export_partition_records_the_runs_partition_and_batch_size(tmp_path):
    config = tiny_config(tmp_path, tmp_path / "runs", rounds=1, verbose=False)
    main(["fit", "-c", config])
    run_dir = tmp_path / "runs" / "fedavg-synthetic-iid-s0"
    record = json.loads((run_dir / "partition.json").read_text())
    assert record["merge_test"] is False and record["test_split_merged"] is False
    for source, out in ((run_dir, "from_run"), (config, "from_config")):
        main(["export-partition", str(source), str(tmp_path / out)])
        exported = json.loads((tmp_path / out / "config.json").read_text())
        assert exported["partition"] == "iid" and exported["alpha"] is None
        assert exported["batch_size"] == 16  # trainer.batch_size of the config


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_a_damaged_checkpoint_is_one_line_naming_the_file_and_changes_nothing(
        tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FEDLIGHT_DEBUG", raising=False)
    config = tiny_config(tmp_path, tmp_path / "runs", rounds=2)
    main(["fit", "-c", config])
    (run,) = (tmp_path / "runs").iterdir()
    checkpoint = run / "checkpoints" / "last.ckpt"
    checkpoint.write_bytes(checkpoint.read_bytes()[:checkpoint.stat().st_size // 2])
    before = _files(run)
    capsys.readouterr()
    for argv in (["fit", "-c", config, "--trainer.rounds", "3", "--ckpt_path", "last"],
                 ["test", "-c", config]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
        assert str(checkpoint) in err and "damaged" in err and "--ckpt_path" in err
        assert _files(run) == before


class _FullDisk:
    """A file on a full disk: the first write stores a few bytes, then fails as the OS does."""

    def __init__(self, handle):
        self.handle = handle

    def write(self, data):
        self.handle.write(bytes(data)[:16])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()


def test_a_full_disk_while_checkpointing_is_one_line_and_keeps_the_previous_checkpoint(
        tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FEDLIGHT_DEBUG", raising=False)
    config = tiny_config(tmp_path, tmp_path / "runs", rounds=3, checkpoint_every=1)
    checkpoints = []

    def open_on_a_full_disk(file, mode="r", *args, **kwargs):
        handle = open(file, mode, *args, **kwargs)
        name = Path(file).name
        if name.startswith(".last.ckpt.") and name.endswith(".tmp"):
            checkpoints.append(file)
            if len(checkpoints) == 2:  # round 2's checkpoint finds the disk full
                return _FullDisk(handle)
        return handle

    monkeypatch.setattr(files, "open", open_on_a_full_disk, raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "-c", config])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    (run,) = (tmp_path / "runs").iterdir()
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert "full" in err and str(run / "checkpoints") in err
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["last.ckpt"]
    assert load_checkpoint(run / "checkpoints" / "last.ckpt")["rounds_done"] == 1


def test_a_run_never_shares_the_folder_another_run_claimed_at_the_same_instant(
        tmp_path, monkeypatch):
    """Another run creates the folder right after this run first looks at it (the window
    where check-then-create loses): this run must take the next version."""
    runs = tmp_path / "runs"
    taken = runs / "fedavg-synthetic-iid-s0"
    real_exists, real_mkdir = Path.exists, Path.mkdir
    claimed = []

    def other_run_claims():
        if not claimed:
            claimed.append(True)
            real_mkdir(taken, parents=True)
            (taken / "metrics.csv").write_text("the other run's rows\n")

    def exists(self, *args, **kwargs):
        found = real_exists(self, *args, **kwargs)
        if self == taken:
            other_run_claims()
        return found

    def mkdir(self, *args, **kwargs):
        if self == taken:
            other_run_claims()
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "exists", exists)
    monkeypatch.setattr(Path, "mkdir", mkdir)
    main(["fit", "-c", tiny_config(tmp_path, runs, rounds=1)])
    assert claimed
    assert (taken / "metrics.csv").read_text() == "the other run's rows\n"
    assert len(rows(runs / "fedavg-synthetic-iid-s0-v2")) == 1


def test_a_two_process_start_prints_no_banner_of_the_process_group(tmp_path):
    config = tiny_config(tmp_path, tmp_path / "runs", rounds=1, threads=1, verbose=False)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "fedlight.cli", "fit", "-c", config,
                           "--trainer.devices", "2", "--trainer.strategy", "ddp_fork"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for banner in ("distributed_backend=", "All distributed processes", "-" * 100):
        assert banner not in done.stdout + done.stderr
    assert len(rows(tmp_path / "runs" / "fedavg-synthetic-iid-s0")) == 1
