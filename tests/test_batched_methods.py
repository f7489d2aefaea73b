"""Batched clients for the papers' own methods: each trains batched exactly as in the loop
for a few steps over two rounds: losses and logged values, the global model and every
client's private state. Clients take different numbers of steps and end on smaller batches
(a Dirichlet split); the second round reuses the first round's workspaces; the Gumbel noise
and dropout masks are each client's own.

The methods' comparisons run in float64 (modules and data): the loop and the batched step
sum in different orders, and in float32 BatchNorm over a few samples turns those last-bit
differences into ~1e-3 within a few steps (the loop itself, run in channels_last, drifts as
far); in float64 both agree to ~1e-15, so a tight tolerance tells a wrong step from
rounding. The float32 path (and the replayed steps) is checked on a few methods too."""

from __future__ import annotations

import csv

import pytest
import torch

from fedlight.clients import (
    GPFL,
    MAP,
    AutoCS,
    AutoHS,
    AutoSA,
    Ditto,
    FedAvg,
    FedBABU,
    FedBN,
    FedPHP,
    FedPick,
    FedProto,
    FedRep,
    FedRoD,
    FedRS,
    Privatize,
)
from fedlight.core.noise import Dropout
from fedlight.data.partitions.dirichlet import Dirichlet
from fedlight.federation import build, population
from fedlight.federation.engines import batched
from fedlight.federation.engines.batched import BatchedEngine
from fedlight.federation.engines.graphs import eager_capture
from fedlight.federation.engines.sequential import SequentialEngine
from fedlight.federation.engines.stacked_step import StackedOutputs, StackedStep
from fedlight.federation.runtime import ClientRuntime
from tests.conftest import make_client, tiny_data, tiny_trainer

DATA = dict(num_clients=5, partition=Dirichlet(beta=0.5, min_client_size=5), samples=300)
IMAGE_16 = dict(input_shape=(1, 16, 16))


@pytest.fixture
def float64(monkeypatch):
    """Modules built and data placed in float64 for the duration (module docstring)."""
    place = population.on_device

    def on_device(batch, device, memory_format=torch.contiguous_format):
        x, y = place(batch, device, memory_format)
        return (x.double() if x.is_floating_point() else x), y

    monkeypatch.setattr(population, "on_device", on_device)
    monkeypatch.setattr(build, "on_device", on_device)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def with_dropout():
    client = make_client(FedAvg)
    client.model.encoder.fc.append(Dropout(0.4))  # after the hidden ReLU
    return client


#: id -> (client factory, data options): every method batched execution covers
CASES = {
    "gpfl": (lambda: make_client(GPFL, mu=0.01, lr=0.05), {}),
    "map-kd": (lambda: make_client(MAP, lamda=0.3), {}),  # round 2: KD to the HPM
    "map-mmd": (lambda: make_client(MAP, kt="mmd", lamda=0.3, schedule="paper"),
                {"local_epochs": 2}),
    "fedrs": (lambda: make_client(FedRS, rs_alpha=0.5), {}),
    "fedphp": (lambda: make_client(FedPHP, lamda=0.5), {}),
    "fedpick": (lambda: make_client(FedPick, backbone="cnn_bn", lr=0.01, **IMAGE_16),
                {"shape": (1, 16, 16)}),
    "privatize-AaBb": (lambda: make_client(Privatize, way="AaBb"), {}),
    "privatize-AaB": (lambda: make_client(Privatize, way="AaB"), {}),
    "autosa": (lambda: make_client(AutoSA, shared_path_loss=True), {}),
    "autocs": (lambda: make_client(AutoCS), {}),
    "autohs": (lambda: make_client(AutoHS), {}),
    "autohs-soft": (lambda: make_client(AutoHS, hard=False), {}),
    "fedrep": (lambda: make_client(FedRep, head_epochs=2), {}),
    "fedrod": (lambda: make_client(FedRoD), {}),
    "ditto": (lambda: make_client(Ditto, lamda=0.5), {}),
    "fedproto": (lambda: make_client(FedProto, lamda=0.5), {}),
    "fedbn": (lambda: make_client(FedBN, backbone="cnn_bn", **IMAGE_16),
              {"shape": (1, 16, 16)}),
    "dropout": (with_dropout, {}),
    "digit-cnn": (lambda: make_client(FedBN, backbone="digit_cnn", lr=0.01,
                                      input_shape=(3, 16, 16)),
                    {"shape": (3, 16, 16), "num_clients": 3, "samples": 60}),
    "vgg8-bn": (lambda: make_client(FedAvg, backbone="vgg8_bn", lr=0.01,
                                    input_shape=(3, 32, 32)),
                {"shape": (3, 32, 32), "num_clients": 3, "samples": 60}),
    "alexnet-bn": (lambda: make_client(FedBN, backbone="alexnet_bn", lr=0.01,
                                       input_shape=(3, 64, 64),
                                       backbone_kwargs={"fc_dims": [32]}),
                   {"shape": (3, 64, 64), "num_clients": 3, "samples": 60}),
}


def fit(tmp_path, make, name, batched_clients, local_epochs=1, join_ratio=0.8, **data):
    trainer = tiny_trainer(tmp_path, rounds=2, join_ratio=join_ratio, batch_size=7, threads=1,
                           run_name=name, batched_clients=batched_clients,
                           local_epochs=local_epochs, memory_format="contiguous",
                           verbose=False)
    summary = trainer.fit(make(), tiny_data(**{**DATA, **data}))
    with open(f"{summary['run_dir']}/metrics.csv") as handle:
        rows = [{k: v for k, v in r.items() if k != "seconds"} for r in csv.DictReader(handle)]
    return trainer, rows


#: the group sizes of the stacked calls made since the test began: training steps and
#: scoring batches (count_stacked_calls)
STACKED: dict[str, list[int]] = {"train": [], "score": []}


@pytest.fixture(autouse=True)
def count_stacked_calls(monkeypatch):
    """Record the group size of every stacked training step and scoring call (a run that
    fell back to the loop makes none)."""
    for key, cls in (("train", StackedStep), ("score", StackedOutputs)):
        STACKED[key] = []

        def counted(self, state, inputs, *rest, _call=cls.__call__, _key=key):
            STACKED[_key].append(inputs.shape[0])
            return _call(self, state, inputs, *rest)

        monkeypatch.setattr(cls, "__call__", counted)


def assert_stacked(engine):
    """The batched engine trained (and, where it scores together, scored) groups of two or
    more clients as stacked calls."""
    assert max(STACKED["train"], default=0) >= 2
    if engine.scoring is not None:
        assert max(STACKED["score"], default=0) >= 2


def assert_same_run(loop, batched, loop_rows, batched_rows, atol=2e-5, rel=1e-4):
    assert isinstance(loop.engine, SequentialEngine) and isinstance(batched.engine, BatchedEngine)
    assert_stacked(batched.engine)
    assert len(loop_rows) == len(batched_rows) == 2
    for a, b in zip(loop_rows, batched_rows, strict=True):
        assert a.keys() == b.keys()
        for key, value in a.items():
            if value in ("", None) or key in ("round", "dropped"):
                assert value == b[key], key
            else:
                assert float(value) == pytest.approx(float(b[key]), rel=rel, abs=atol), key
    states = [(loop.global_state, batched.global_state)] + [
        (state, batched.client_states[client]) for client, state in loop.client_states.items()]
    for first, second in states:
        assert sorted(first) == sorted(second)
        for key, value in first.items():
            torch.testing.assert_close(second[key], value, rtol=rel, atol=atol,
                                       msg=lambda text, key=key: f"{key}: {text}")


#: methods that build float32 tensors of their own (GPFL's class shares, FedProto's
#: prototypes: fedlight trains float32 weights), compared in float32
FLOAT32 = {"gpfl", "fedproto"}


@pytest.mark.parametrize("case", list(CASES))
def test_every_method_trains_batched_as_in_the_loop(tmp_path, request, case):
    if case not in FLOAT32:
        request.getfixturevalue("float64")
    make, options = CASES[case]
    loop, loop_rows = fit(tmp_path, make, "loop", 1, **options)
    batched_run, batched_rows = fit(tmp_path, make, "batched", 4, **options)
    states = [*loop.global_state.values(),
              *(value for state in loop.client_states.values() for value in state.values())]
    assert any(value.dtype == torch.float64 for value in states) != (case in FLOAT32)
    # float64: BatchNorm over a last batch of 2 still turns rounding into ~1e-10; the rows'
    # losses and logged values are summed in float32 by both engines
    tolerance = dict(atol=2e-5, rel=1e-4) if case in FLOAT32 else dict(atol=1e-9, rel=1e-6)
    assert_same_run(loop, batched_run, loop_rows, batched_rows, **tolerance)
    # the models moved: steps that did nothing would match a loop that did nothing
    assert loop_rows[0]["train_loss"] != loop_rows[1]["train_loss"]


def test_the_logged_terms_of_a_method_are_each_clients_own_means(tmp_path):
    make, options = CASES["gpfl"]
    loop, loop_rows = fit(tmp_path, make, "loop", 1, **options)
    batched_run, batched_rows = fit(tmp_path, make, "batched", 4, **options)
    assert_stacked(batched_run.engine)
    for name in ("train/loss_p", "train/loss_alg", "train/loss_mlg"):
        assert float(batched_rows[-1][name]) == pytest.approx(float(loop_rows[-1][name]),
                                                              rel=1e-5)


def test_clients_with_and_without_an_hpm_train_in_separate_groups(tmp_path, float64):
    # round 2 trains clients 1 (new: plain CE), 3 and 4 (KD to their HPMs) in one chunk
    make = CASES["map-kd"][0]
    loop, loop_rows = fit(tmp_path, make, "loop", 1, join_ratio=0.6)
    batched_run, batched_rows = fit(tmp_path, make, "batched", 3, join_ratio=0.6)
    assert loop.history[1]["train/kt_loss"] > 0
    assert_same_run(loop, batched_run, loop_rows, batched_rows, atol=1e-9, rel=1e-6)


def test_clients_draw_different_noise_and_the_same_as_in_the_loop(tmp_path):
    # FedPick's masks differ across clients (each its own key), yet equal the loop's, in
    # float32 (at weights of 1 and a small learning rate, which float32 follows closely)
    def make():
        return make_client(FedPick, backbone="cnn_bn", lr=0.005, lambda_lce=1.0,
                           lambda_dis=1.0, **IMAGE_16)

    options = CASES["fedpick"][1]
    loop, loop_rows = fit(tmp_path, make, "loop", 1, **options)
    batched_run, batched_rows = fit(tmp_path, make, "batched", 5, **options)
    assert_same_run(loop, batched_run, loop_rows, batched_rows)
    ratios = {float(r["train/keep_ratio"]) for r in loop_rows}
    assert len(ratios) == 2


def test_steps_replayed_from_a_capture_train_as_the_loop(tmp_path, monkeypatch):
    # the CUDA-graph path's plumbing (fixed-address workspaces reused across rounds, inputs
    # copied in, optimizer state zeroed in place, sums on the device) with an eager replay
    captured = []

    def capture(step):
        captured.append(step)
        return eager_capture(step)

    monkeypatch.setattr(batched.engine, "step_capture", lambda fabric, graphs: capture)
    for make in (lambda: make_client(FedAvg, momentum=0.9, weight_decay=1e-3),
                 lambda: make_client(GPFL, optimizer="adam", lr=0.01)):
        loop, loop_rows = fit(tmp_path, make, "loop", 1)
        replayed, replayed_rows = fit(tmp_path, make, "replayed", 4)
        assert_same_run(loop, replayed, loop_rows, replayed_rows, atol=1e-3)
        assert all(w.full.captured for w in replayed.engine.workspaces.values())
    assert captured  # full steps of every workspace were captured once, then replayed


def test_the_step_cap_and_the_augmentation_apply_batched_as_in_the_loop(tmp_path):
    def run(name, batched_clients):
        trainer = tiny_trainer(tmp_path, rounds=2, batch_size=5, threads=1, run_name=name,
                               batched_clients=batched_clients, local_epochs=2,
                               max_local_steps=7, verbose=False)
        data = tiny_data(**{**DATA, "shape": (1, 16, 16)},
                         augment={"hflip": True, "crop_padding": 2})
        summary = trainer.fit(make_client(FedRep, head_epochs=1, **IMAGE_16), data)
        with open(f"{summary['run_dir']}/metrics.csv") as handle:
            return trainer, [{k: v for k, v in r.items() if k != "seconds"}
                             for r in csv.DictReader(handle)]

    loop, loop_rows = run("loop", 1)
    batched_run, batched_rows = run("batched", 4)
    assert_same_run(loop, batched_run, loop_rows, batched_rows)


def test_a_group_that_runs_out_of_device_memory_trains_in_halves(tmp_path, monkeypatch):
    train = batched.Workspace.train

    def short_of_memory(self, batches):
        if self.size > 2:
            raise torch.OutOfMemoryError("no room for a group of more than 2")
        train(self, batches)

    monkeypatch.setattr(batched.Workspace, "train", short_of_memory)
    make = CASES["ditto"][0]
    loop, loop_rows = fit(tmp_path, make, "loop", 1)
    halved, halved_rows = fit(tmp_path, make, "halved", 4)
    assert halved.engine.group_size == 2
    assert_same_run(loop, halved, loop_rows, halved_rows)


def test_auto_trains_one_client_after_another_on_a_cpu_and_says_so(tmp_path, capsys):
    trainer = tiny_trainer(tmp_path, rounds=1)
    trainer.fit(make_client(FedAvg), tiny_data())
    assert type(trainer.engine) is SequentialEngine
    assert ("fedlight: clients train one after another (batched_clients: auto on cpu, where "
            "the loop is faster)") in capsys.readouterr().out
    assert trainer.run.hyperparameters(trainer)["trainer"]["batched_clients"] == 1


def test_a_batched_run_says_how_many_clients_train_at_once(tmp_path, capsys):
    trainer = tiny_trainer(tmp_path, rounds=1, batched_clients=3)
    trainer.fit(make_client(MAP), tiny_data())
    assert isinstance(trainer.engine, BatchedEngine)
    assert_stacked(trainer.engine)
    assert ("fedlight: clients train batched, up to 3 at once (steps run eagerly), scored "
            "together" in capsys.readouterr().out)


@pytest.mark.parametrize(("method", "steps"), [
    (FedAvg, "every step replayed from CUDA graphs, captured: all"),
    (FedProto, "steps replayed from CUDA graphs but those where a client has a smaller batch, "
               "which run eagerly: "),
])
def test_the_header_says_which_steps_cuda_graphs_capture(tmp_path, capsys, monkeypatch,
                                                         method, steps):
    """Where the device captures steps (stood in for on this CPU), a method whose loss weights
    samples has every step captured; another names why its smaller batches run eagerly."""
    monkeypatch.setattr(build, "step_capture", lambda fabric, graphs: eager_capture)
    trainer = tiny_trainer(tmp_path, rounds=1, batched_clients=3)
    trainer.fit(make_client(method), tiny_data())
    assert f"fedlight: clients train batched, up to 3 at once ({steps}" in capsys.readouterr().out


def test_a_subclass_overriding_the_step_without_declaring_it_trains_in_the_loop():
    class Changed(GPFL):
        def training_step(self, batch, batch_idx):
            return super().training_step(batch, batch_idx) * 2

    assert batched.batching_refusal(make_client(GPFL), "32-true", "fresh", None) is None
    assert batched.batching_refusal(make_client(Changed), "32-true", "fresh", None) == (
        "Changed overrides training_step (not declared batchable)")
    Changed.batchable = True
    assert batched.batching_refusal(make_client(Changed), "32-true", "fresh", None) is None


def test_the_group_size_follows_the_free_memory():
    client = make_client(FedAvg)
    x = torch.randn(10, 1, 8, 8)
    per_client = batched.client_bytes(client, x, data_bytes=1000)
    state = sum(p.numel() * 4 for p in client.parameters())
    assert per_client > 6 * state + 1000
    assert batched.group_size_for(per_client, 10 * 2 * per_client, 20) == 10
    assert batched.group_size_for(per_client, 100 * 2 * per_client, 20) == 20
    assert batched.group_size_for(per_client, per_client // 2, 20) == 1


def test_activation_bytes_count_every_leaf_output_and_leave_the_client_as_it_was():
    client = make_client(FedAvg)  # mlp: Flatten, (Linear(., 200), ReLU) x 2, Linear(200, 4)
    client.train()
    before = {k: v.clone() for k, v in client.state_dict().items()}
    assert batched.activation_bytes(client, torch.randn(10, 1, 8, 8)) == 4 * 10 * (
        64 + 4 * 200 + 4)
    assert client.training
    for key, value in client.state_dict().items():
        assert torch.equal(value, before[key])


def test_a_group_that_runs_out_of_device_memory_is_scored_in_halves(tmp_path, monkeypatch):
    score_together = ClientRuntime.score_together
    sizes = []

    def short_of_memory(self, client_ids, outputs_fn):
        sizes.append(len(client_ids))
        if len(client_ids) > 2:
            raise torch.OutOfMemoryError("no room to score more than 2")
        return score_together(self, client_ids, outputs_fn)

    monkeypatch.setattr(ClientRuntime, "score_together", short_of_memory)
    make = CASES["fedrod"][0]
    loop, loop_rows = fit(tmp_path, make, "loop", 1)
    halved, halved_rows = fit(tmp_path, make, "halved", 5)
    assert sizes[:3] == [5, 2, 3] and max(sizes) == 5
    assert_same_run(loop, halved, loop_rows, halved_rows)


def test_every_client_of_a_group_is_scored_in_one_call_per_evaluation_batch(tmp_path):
    trainer = tiny_trainer(tmp_path, rounds=1, batched_clients=5, eval_batch_size=8,
                           verbose=False)
    calls = []
    trainer.fit(make_client(GPFL), tiny_data(**DATA))
    engine = trainer.engine
    scoring = engine.scoring

    def counted(state, inputs):
        calls.append(tuple(inputs.shape[:2]))
        return scoring(state, inputs)

    engine.scoring = counted
    downloads = {client: trainer.run.rule.download(client)[0] for client in range(5)}
    together = engine.evaluate(1, downloads)
    tests = [len(trainer.run.population.test_data[client][1]) for client in range(5)]
    assert len(calls) == -(-max(tests) // 8) and all(k == 5 for k, _ in calls)
    one_by_one = SequentialEngine(engine.runtime).evaluate(1, downloads)
    assert together.keys() == one_by_one.keys() == set(range(5))
    for client, scores in one_by_one.items():
        assert together[client]["personalized"].correct == scores["personalized"].correct
        assert together[client]["personalized"].loss == pytest.approx(scores["personalized"].loss)


def test_a_method_that_fine_tunes_before_scoring_is_scored_one_client_after_another(
        tmp_path, capsys):
    trainer = tiny_trainer(tmp_path, rounds=1, batched_clients=3)
    trainer.fit(make_client(FedBABU), tiny_data())
    assert isinstance(trainer.engine, BatchedEngine) and trainer.engine.scoring is None
    assert_stacked(trainer.engine)
    assert ("scored one after another: FedBABU fine-tunes each client before scoring it"
            in capsys.readouterr().out)


def test_a_subclass_overriding_its_scores_without_declaring_it_is_scored_one_by_one():
    class Changed(FedAvg):
        def eval_outputs(self, x):
            return {"personalized": self(x) * 2}

    assert batched.scoring_refusal(make_client(FedAvg)) is None
    assert batched.scoring_refusal(make_client(Changed)) == (
        "Changed overrides eval_outputs (not declared batchable)")
