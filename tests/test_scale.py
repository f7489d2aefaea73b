"""Scale-out: several processes, precision, client-state storage, client dropout.

Multi-process runs use Fabric's multiprocessing launcher with the ``fork`` start method
(``strategy="ddp_fork"``, gloo on CPU): the same launcher as ``ddp_spawn`` without re-importing
torch in every worker, so a 2-process run costs about as much as a 1-process one.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from lightning.fabric import Fabric
from lightning.fabric.plugins import MixedPrecision

from fedlight.clients import FedAvg
from fedlight.core.rules import weighted_mean
from fedlight.core.seeding import drop_clients
from fedlight.data.partitions.dirichlet import Dirichlet
from fedlight.federation.processes import cpus
from fedlight.federation.processes.collectives import balanced_owners
from fedlight.federation.processes.cpus import resolve_auto_devices
from fedlight.federation.processes.fabric import FederatedDDPStrategy, make_fabric
from fedlight.federation.state.stores import DiskClientStore, MemoryClientStore, make_store
from fedlight.federation.trainer import FederatedTrainer
from fedlight.server import CoordinateMedian, FedAdam
from tests.conftest import tiny_data, tiny_trainer

TWO = {"devices": 2, "strategy": "ddp_fork"}


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    """Runs compared across process counts pin ``threads=1`` in every process: CPU kernels
    (oneDNN convolutions in particular) may round differently with another thread count."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def make_client(cls=FedAvg, **kwargs):
    torch.manual_seed(0)
    return cls(**{"backbone": "mlp", "num_classes": 4, "input_shape": (1, 8, 8), "lr": 0.1,
                  **kwargs})


def fedper(**kwargs):
    return make_client(extra_private=["model.head.*"], **kwargs)


def rows(summary):
    """metrics.csv without the wall-clock column."""
    with open(f"{summary['run_dir']}/metrics.csv") as handle:
        return [{k: v for k, v in r.items() if k != "seconds"} for r in csv.DictReader(handle)]


def checkpoint(summary):
    return torch.load(f"{summary['run_dir']}/checkpoints/last.ckpt", weights_only=False)


def assert_same_states(a, b):
    assert sorted(a) == sorted(b)
    for client_id, state in a.items():
        assert list(state) == list(b[client_id])
        for key, value in state.items():
            assert torch.equal(value, b[client_id][key]), (client_id, key)


# Six clients, three sampled per round, one of them dropped: some rounds leave a process with
# nobody to train or nobody reporting, and never-trained clients are scored too. Their sizes
# differ, so the balanced owners are not client % 2 (checked below).
SETTING = dict(rounds=4, join_ratio=0.5, drop_rate=0.25, threads=1)
SIX = dict(num_clients=6, partition=Dirichlet(beta=0.5, min_client_size=5))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The 1-process FedPer run everything multi-process is compared with."""
    root = tmp_path_factory.mktemp("reference")
    trainer = tiny_trainer(root, run_name="one", **SETTING)
    return trainer, trainer.fit(fedper(), tiny_data(**SIX))


# ===================================================================== several processes
def test_owners_balance_the_training_samples_and_every_rank_computes_the_same():
    assert balanced_owners([5, 1, 1, 1, 1, 1], 2) == [0, 1, 1, 1, 1, 1]  # 5 against 5
    assert balanced_owners([3, 3, 3, 3], 2) == [0, 1, 0, 1]  # equal sizes: i % world size
    assert balanced_owners([4, 9, 2], 1) == [0, 0, 0]
    data = tiny_data(**SIX)
    data.setup()
    sizes = [data.client_train_size(i) for i in range(data.num_clients)]
    owners = balanced_owners(sizes, 2)
    assert owners != [i % 2 for i in range(6)]  # the multi-process tests below use these
    busiest = max(sum(s for s, o in zip(sizes, owners, strict=True) if o == r) for r in (0, 1))
    assert busiest < max(sum(sizes[0::2]), sum(sizes[1::2]))


def test_two_process_fedavg_equals_one_process_bit_for_bit(tmp_path):
    one = tiny_trainer(tmp_path, rounds=3, run_name="one", threads=1)
    two = tiny_trainer(tmp_path, rounds=3, run_name="two", threads=1, **TWO)
    first = one.fit(make_client(), tiny_data())
    second = two.fit(make_client(), tiny_data())
    assert rows(first) == rows(second)
    assert second["run_dir"].endswith("two") and first["best_global_accuracy"] is not None
    for key, value in one.global_state.items():  # sent back by the forked rank 0
        assert torch.equal(value, two.global_state[key]), key
    assert [r["round"] for r in two.history] == [1, 2, 3]


def test_two_process_private_state_disk_store_and_dropout_equal_one_process(
        tmp_path, reference):
    ref_trainer, ref = reference
    two = tiny_trainer(tmp_path, run_name="two", client_state_storage="disk", **SETTING, **TWO)
    summary = two.fit(fedper(), tiny_data(**SIX))
    assert rows(summary) == rows(ref)
    assert {r["dropped"] for r in rows(ref)} == {"1"}
    ours, theirs = checkpoint(summary), checkpoint(ref)
    assert_same_states(ours["client_states"], theirs["client_states"])  # gathered to rank 0
    assert ours["participations"] == theirs["participations"]
    assert_same_states(dict(ref_trainer.client_states), theirs["client_states"])


def test_resume_with_two_processes_and_with_one(tmp_path, reference):
    _, ref = reference
    half = tiny_trainer(tmp_path, run_name="half", **{**SETTING, "rounds": 2}, **TWO)
    first = half.fit(fedper(), tiny_data(**SIX))
    copy = shutil.copytree(first["run_dir"], tmp_path / "copy")

    resumed_two = tiny_trainer(tmp_path, run_name="half", **SETTING, **TWO).fit(
        fedper(), tiny_data(**SIX), ckpt_path=f"{first['run_dir']}/checkpoints/last.ckpt")
    resumed_one = tiny_trainer(tmp_path, run_name="copy", **SETTING).fit(
        fedper(), tiny_data(**SIX), ckpt_path=str(copy / "checkpoints/last.ckpt"))
    assert rows(resumed_two) == rows(ref)
    assert rows(resumed_one) == rows(ref)
    assert_same_states(checkpoint(resumed_two)["client_states"],
                       checkpoint(ref)["client_states"])

    # and a 2-process evaluation of the checkpoint scores like a 1-process one
    evaluated = tiny_trainer(tmp_path, run_name="half", **TWO).test(
        fedper(), tiny_data(**SIX), ckpt_path=f"{first['run_dir']}/checkpoints/last.ckpt")
    assert evaluated["personalized_accuracy"] == float(rows(ref)[-1]["personalized_accuracy"])


def test_cli_with_two_devices_reruns_itself_per_rank_and_matches_one_process(tmp_path):
    """``fedlight fit ... --trainer.devices 2``: Fabric's ``ddp`` launcher re-runs the command
    for rank 1; the run equals a 1-process run of the same configuration."""
    args = ["--model", "FedAvg", "--model.init_args.backbone", "mlp",
            "--model.init_args.lr", "0.1", "--model.init_args.extra_private", "[model.head.*]",
            "--data.source", "Synthetic", "--data.num_clients", "4", "--data.partition", "IID",
            "--data.source.samples", "240", "--data.source.shape", "[1,8,8]",
            "--data.source.classes", "4",
            "--trainer.rounds", "2", "--trainer.batch_size", "16", "--trainer.threads", "1",
            "--trainer.accelerator", "cpu", "--trainer.progress_bar", "false",
            "--trainer.default_root_dir", str(tmp_path), "--trainer.run_name", "cli",
            "--trainer.devices", "2"]
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "fedlight", "fit", *args], env=env,
                          cwd=Path(__file__).resolve().parents[1], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank1" not in done.stderr  # no traceback from the second process
    one = tiny_trainer(tmp_path, rounds=2, run_name="one", threads=1).fit(fedper(), tiny_data())
    assert rows({"run_dir": tmp_path / "cli"}) == rows(one)
    assert not (tmp_path / "cli-v2").exists()  # rank 1 wrote no folder of its own


def test_the_multi_process_strategy_never_wraps_the_module_in_ddp():
    fabric = make_fabric("cpu", 2, 1, "32-true", "ddp_spawn")
    assert isinstance(fabric.strategy, FederatedDDPStrategy) and fabric.world_size == 2
    module = torch.nn.Linear(2, 2)
    assert fabric.strategy.setup_module(module) is module
    assert not isinstance(make_fabric("cpu", 1, 1, "32-true").strategy, FederatedDDPStrategy)


@pytest.mark.parametrize("cores, busy, strategy, platform, expected", [
    (3, 0.0, "auto", "linux", (3, "ddp_fork")),      # one forked process per idle core
    (3, 1.2, "auto", "linux", (2, "ddp_fork")),      # a busy core is left to its program
    (3, 2.7, "auto", "linux", (1, "auto")),          # one idle core: one process
    (3, 3.0, "auto", "linux", (1, "auto")),          # none idle: still one process
    (3, 0.0, "ddp_spawn", "linux", (3, "ddp_spawn")),  # an explicit launcher is kept
    (1, 0.0, "auto", "linux", (1, "auto")),          # one core: one process, no process group
    (3, 0.0, "auto", "darwin", (1, "auto")),         # no fork outside Linux: one process
    (3, 0.0, "ddp_spawn", "darwin", (3, "ddp_spawn")),
])
def test_devices_auto_on_cpu_is_one_process_per_idle_core(monkeypatch, cores, busy, strategy,
                                                          platform, expected):
    monkeypatch.setattr(cpus, "cpu_cores", lambda: cores)
    monkeypatch.setattr(cpus, "busy_cores", lambda window=0.25: busy)
    monkeypatch.setattr(cpus.sys, "platform", platform)
    assert resolve_auto_devices("cpu", strategy) == expected
    fabric = make_fabric("cpu", "auto", 1, "32-true", strategy)
    assert fabric.world_size == expected[0]
    assert isinstance(fabric.strategy, FederatedDDPStrategy) == (expected[0] > 1)


def test_the_default_is_devices_auto_and_uses_the_idle_cores(monkeypatch, tmp_path):
    monkeypatch.setattr(cpus, "cpu_cores", lambda: 2)
    monkeypatch.setattr(cpus, "busy_cores", lambda window=0.25: 0.1)
    trainer = tiny_trainer(tmp_path)
    assert trainer.devices == "auto" and trainer.fabric.world_size == 2
    assert tiny_trainer(tmp_path, devices=1).fabric.world_size == 1


def test_devices_auto_run_equals_one_process(tmp_path, monkeypatch):
    monkeypatch.setattr(cpus, "cpu_cores", lambda: 2)
    monkeypatch.setattr(cpus, "busy_cores", lambda window=0.25: 0.0)
    auto = tiny_trainer(tmp_path, rounds=2, run_name="auto", threads=1, devices="auto")
    assert auto.fabric.world_size == 2
    one = tiny_trainer(tmp_path, rounds=2, run_name="one", threads=1, devices=1)
    assert rows(auto.fit(make_client(), tiny_data())) == rows(one.fit(make_client(), tiny_data()))


# ===================================================================== precision
class DtypeSpy(FedAvg):
    """Records the dtype of the logits its training step computes."""

    seen: list[torch.dtype] = []

    def training_step(self, batch, batch_idx):
        DtypeSpy.seen.append(self(batch[0]).dtype)
        return super().training_step(batch, batch_idx)


def test_bf16_mixed_trains_under_autocast_and_its_loss_decreases(tmp_path):
    DtypeSpy.seen = []
    trainer = tiny_trainer(tmp_path, rounds=6, precision="bf16-mixed")
    summary = trainer.fit(make_client(DtypeSpy), tiny_data())
    assert set(DtypeSpy.seen) == {torch.bfloat16}
    losses = [r["train_loss"] for r in trainer.history]
    assert losses[-1] < losses[0] - 0.1
    assert summary["last_personalized_accuracy"] > 0.5


class ScaleSpy(FedAvg):
    """Records the fp16 loss scale each client starts its local training with."""

    starts: list[tuple[int, float]] = []

    def training_step(self, batch, batch_idx):
        if batch_idx == 0:
            scaler = self._fabric.strategy.precision.scaler
            ScaleSpy.starts.append((self.context.round, scaler.get_scale()))
        return super().training_step(batch, batch_idx)


def test_fp16_loss_scale_is_shared_by_the_clients_of_a_round_and_carried_over(tmp_path):
    ScaleSpy.starts = []
    trainer = tiny_trainer(tmp_path, rounds=3)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**40)  # overflows: the scale backs off
    trainer.fabric = Fabric(accelerator="cpu", devices=1,
                            plugins=MixedPrecision("16-mixed", "cpu", scaler=scaler))
    trainer.fit(make_client(ScaleSpy), tiny_data())
    by_round = {}
    for round_idx, scale in ScaleSpy.starts:
        by_round.setdefault(round_idx, set()).add(scale)
    assert all(len(scales) == 1 for scales in by_round.values())  # one scale per round
    firsts = [by_round[r].pop() for r in range(3)]
    assert firsts[0] == 2.0**40 and firsts[0] > firsts[1] > firsts[2] > trainer.grad_scale.value
    assert checkpoint({"run_dir": trainer.run_dir})["grad_scale"] == trainer.grad_scale.value


# ===================================================================== dropout
def test_dropped_clients_train_keep_their_state_but_are_not_aggregated(tmp_path):
    client = fedper()
    uploads = {}
    original_upload = client.upload

    def recording_upload():
        upload = original_upload()
        uploads[client.context.client_id] = upload
        return upload

    client.upload = recording_upload
    trainer = tiny_trainer(tmp_path, rounds=1, drop_rate=0.5, run_name="drop")
    summary = trainer.fit(client, tiny_data())
    dropped = drop_clients([0, 1, 2, 3], 0.5, 0, 0)
    survivors = [c for c in range(4) if c not in dropped]
    assert len(dropped) == 2 and rows(summary)[0]["dropped"] == "2"
    expected = weighted_mean([uploads[c].state for c in survivors],
                             [uploads[c].weight for c in survivors])
    everyone = weighted_mean([u.state for u in uploads.values()],
                             [u.weight for u in uploads.values()])
    key = "model.encoder.fc.0.weight"
    assert torch.equal(trainer.global_state[key], expected[key])
    assert not torch.equal(trainer.global_state[key], everyone[key])
    assert sorted(trainer.client_states) == [0, 1, 2, 3]  # dropped clients kept their update
    assert trainer.participations == [1, 1, 1, 1]

    again = tiny_trainer(tmp_path, rounds=1, drop_rate=0.5, run_name="again")
    assert rows(again.fit(fedper(), tiny_data())) == rows(summary)


def test_drop_clients_is_seeded_and_leaves_a_survivor():
    sampled = list(range(0, 40, 2))
    assert drop_clients(sampled, 0.5, 3, 7) == drop_clients(sampled, 0.5, 3, 7)
    assert drop_clients(sampled, 0.5, 3, 7) != drop_clients(sampled, 0.5, 3, 8)
    assert len(drop_clients(sampled, 0.5, 3, 7)) == 10
    assert set(drop_clients(sampled, 0.3, 0, 0)) <= set(sampled)
    assert len(drop_clients([5, 9], 0.99, 0, 0)) == 1
    assert drop_clients([5], 0.9, 0, 0) == [] and drop_clients(sampled, 0.0, 0, 0) == []


# ===================================================================== client-state storage
def test_disk_storage_gives_the_same_run_as_memory_storage(tmp_path):
    memory = tiny_trainer(tmp_path, run_name="memory", join_ratio=0.5)
    disk = tiny_trainer(tmp_path, run_name="disk", join_ratio=0.5,
                        client_state_storage="disk", client_state_dir=str(tmp_path / "store"))
    first = memory.fit(fedper(), tiny_data())
    second = disk.fit(fedper(), tiny_data())
    assert isinstance(disk.client_states, DiskClientStore)
    assert isinstance(memory.client_states, MemoryClientStore)
    assert rows(first) == rows(second)
    assert_same_states(dict(memory.client_states), dict(disk.client_states))
    assert_same_states(checkpoint(first)["client_states"], checkpoint(second)["client_states"])
    assert list((tmp_path / "store").iterdir()) == []  # the mapped file is already unlinked


def test_disk_store_keeps_only_clients_that_were_put(tmp_path):
    template = {"w": torch.zeros(3, 5), "n": torch.zeros((), dtype=torch.long),
                "h": torch.zeros(7, dtype=torch.bfloat16)}
    store = make_store("disk", template, 10_000, tmp_path)
    assert len(store) == 0 and store.get(42) is None
    state = {"w": torch.randn(3, 5), "n": torch.tensor(7), "h": torch.randn(7).bfloat16()}
    store[9_999] = state
    store.put(3, template)
    assert sorted(store) == [3, 9_999] and len(store) == 2
    got = store[9_999]
    assert all(torch.equal(got[k], state[k]) and got[k].dtype == state[k].dtype for k in state)
    got["w"].zero_()  # reads are copies
    assert torch.equal(store[9_999]["w"], state["w"])
    assert list(store.state()) == [3, 9_999]
    store.load({1: state})
    assert list(store) == [1]
    with pytest.raises(ValueError, match="keys"):
        store[0] = {"w": torch.zeros(3, 5)}
    with pytest.raises(ValueError, match="'w'"):
        store[0] = {**state, "w": torch.zeros(5, 3)}
    store.close()


# ===================================================================== bad input
@pytest.mark.parametrize(("option", "value", "message"), [
    ("strategy", "fsdp", "unknown strategy 'fsdp'; valid: auto, ddp"),
    ("drop_rate", 1.0, r"drop_rate must be in \[0, 1\), got 1.0"),
    ("drop_rate", -0.1, r"drop_rate must be in \[0, 1\)"),
    ("client_state_storage", "ssd", "unknown client_state_storage 'ssd'; valid: memory, disk"),
])
def test_bad_scale_options_are_refused(option, value, message):
    with pytest.raises(ValueError, match=message):
        FederatedTrainer(**{option: value})


@pytest.mark.parametrize("make_rule", [lambda: FedAdam(lr=0.05), CoordinateMedian],
                         ids=["fedadam-all-reduced", "median-gathered"])
def test_two_process_server_rules_equal_one_process(tmp_path, make_rule):
    one = tiny_trainer(tmp_path, rounds=2, run_name="one", threads=1)
    two = tiny_trainer(tmp_path, rounds=2, run_name="two", threads=1, **TWO)
    first = one.fit(make_client(), tiny_data(), server=make_rule())
    second = two.fit(make_client(), tiny_data(), server=make_rule())
    assert rows(first) == rows(second)
    for key, value in one.global_state.items():
        assert torch.equal(value, two.global_state[key]), key
