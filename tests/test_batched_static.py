"""One static shape per group: a client's smaller last batch padded with samples of weight 0,
a finished client kept with its update put back, so that every step of a group is the same
step (the one a CUDA graph captures). Checked on a CPU with a stand-in capture
(graphs.eager_capture): the plumbing a GPU replays, in float64 against the loop and against
each client trained alone; capture failures, running out of memory in a capture, Adam's
capturable groups and cuDNN's autotuning."""

from __future__ import annotations

import pytest
import torch
from lightning.fabric import Fabric

from fedlight.clients import GPFL, MAP, Ditto, FedAvg, FedBN, FedPick, FedRoD, Privatize
from fedlight.core.client import Phase
from fedlight.federation.engines import graphs
from fedlight.federation.engines.batched import (
    BatchedEngine,
    autotuned_convolutions,
    padding_refusal,
    stacked_optimizer,
    steps_note,
    workspace,
)
from fedlight.federation.engines.batched import engine as engine_module
from fedlight.federation.engines.batched.planning import client_state, load_rows
from fedlight.federation.engines.graphs import ReplayedStep, eager_capture
from fedlight.federation.training_loop import TrainingLoop
from tests.conftest import make_client
from tests.test_batched_methods import (  # noqa: F401 (fixtures)
    assert_same_run,
    assert_stacked,
    count_stacked_calls,
    fit,
    float64,
)

IMAGE_16 = dict(input_shape=(1, 16, 16))


@pytest.fixture
def stand_in_capture(monkeypatch):
    """Captures made with graphs.eager_capture (on a CPU), counted; and the step counts of
    every phase a workspace trains, recorded."""
    made, counts = [], []

    def capture(step):
        made.append(step)
        return eager_capture(step)

    step_counts = workspace.step_counts

    def recorded(batches):
        counts.append(step_counts(batches))
        return counts[-1]

    monkeypatch.setattr(engine_module, "step_capture", lambda fabric, graphs: capture)
    monkeypatch.setattr(workspace, "step_counts", recorded)
    return made, counts


def padded_and_finished(counts, batch_size):
    """Whether some step had a client with a smaller batch beside a full one, and some step a
    finished client beside an active one, in groups of two or more."""
    rows = [row for phase in counts for row in phase if len(row) >= 2]
    padded = any(0 < n < batch_size for row in rows for n in row)
    finished = any(0 in row and any(row) for row in rows)
    return padded, finished


#: GPFL builds float32 tensors of its own (its class shares): compared in float32
@pytest.mark.parametrize("make, options", [
    (lambda: make_client(FedAvg, momentum=0.9, weight_decay=1e-3), {}),
    pytest.param(lambda: make_client(FedAvg, optimizer="adamw", lr=0.01, weight_decay=0.1),
                 {}, marks=pytest.mark.slow),
    (lambda: make_client(GPFL, optimizer="adam", lr=0.01), {"float32": True}),
    (lambda: make_client(MAP, lamda=0.3), {}),
    (lambda: make_client(MAP, kt="mmd", lamda=0.3), {}),
    (lambda: make_client(FedPick, backbone="cnn", lr=0.01, lambda_lce=1.0, lambda_dis=1.0,
                         lambda_ent=0.1, keep_budget=0.5, lambda_budget=0.1, **IMAGE_16),
     {"shape": (1, 16, 16)}),
    (lambda: make_client(Privatize, way="AaBb"), {}),
    pytest.param(lambda: make_client(Ditto, lamda=0.5), {}, marks=pytest.mark.slow),
    pytest.param(lambda: make_client(FedRoD), {}, marks=pytest.mark.slow),
], ids=["fedavg-momentum", "fedavg-adamw", "gpfl-adam", "map-kd", "map-mmd", "fedpick-cnn",
        "privatize", "ditto", "fedrod"])
def test_every_step_of_a_group_is_captured_and_equals_the_loop(tmp_path, request,
                                                               stand_in_capture, make, options):
    made, counts = stand_in_capture
    options = dict(options)
    exact = not options.pop("float32", False)
    if exact:
        request.getfixturevalue("float64")
    loop, loop_rows = fit(tmp_path, make, "loop", 1, **options)
    batched_run, batched_rows = fit(tmp_path, make, "batched", 4, **options)
    tolerance = dict(atol=1e-9, rel=1e-6) if exact else dict(atol=1e-3, rel=1e-4)
    assert_same_run(loop, batched_run, loop_rows, batched_rows, **tolerance)
    engine = batched_run.engine
    assert engine.padding_refusal is None
    assert padded_and_finished(counts, 7) == (True, True)
    assert made and engine.captured == "all"
    for space in engine.workspaces.values():
        assert space.eager_steps == 0 and space.full.captured
        assert space.full.replays == space.static_steps - space.full.warmup


@pytest.mark.usefixtures("float64")
def test_batchnorm_keeps_its_smaller_batches_eager_and_says_why(tmp_path, stand_in_capture):
    def make():
        return make_client(FedBN, backbone="cnn_bn", **IMAGE_16)

    options = {"shape": (1, 16, 16)}
    loop, loop_rows = fit(tmp_path, make, "loop", 1, **options)
    batched_run, batched_rows = fit(tmp_path, make, "batched", 4, **options)
    assert_same_run(loop, batched_run, loop_rows, batched_rows, atol=1e-9, rel=1e-6)
    engine = batched_run.engine
    assert engine.padding_refusal == ("its model has BatchNorm2d, whose batch statistics "
                                      "would see the padding")
    assert engine.steps_note == (
        "steps replayed from CUDA graphs but those where a client has a smaller batch, "
        "which run eagerly: its model has BatchNorm2d, whose batch statistics would see "
        "the padding")
    assert engine.captured == "partly"
    spaces = engine.workspaces.values()
    assert sum(w.eager_steps for w in spaces) > 0 and sum(w.full.replays for w in spaces) > 0


def test_a_method_that_does_not_weight_samples_is_not_padded():
    class Unweighted(FedAvg):
        def training_step(self, batch, batch_idx):
            return super().training_step(batch, batch_idx)

    Unweighted.batchable = True
    assert padding_refusal(make_client(FedAvg)) is None
    assert padding_refusal(make_client(Unweighted)) == (
        "Unweighted overrides training_step (not declared sample_weighted)")
    Unweighted.sample_weighted = True
    assert padding_refusal(make_client(Unweighted)) is None


def trained_alone(client, rows, batches, optimizer_class, **settings):
    """The client from ``rows`` trained on ``batches`` by its own optimizer: its state and
    the optimizer's state by parameter name."""
    load_rows(client, rows)
    client.capture_logs(True)
    optimizer = optimizer_class(client.parameters(), **settings)
    for x, y in batches:
        optimizer.zero_grad()
        client.training_step((x, y), 0).backward()
        optimizer.step()
    names = {p: n for n, p in client.named_parameters()}
    return client_state(client), {names[p]: s for p, s in optimizer.state.items()}


@pytest.mark.usefixtures("float64")
@pytest.mark.parametrize("optimizer, settings", [
    ("sgd", dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    ("adam", dict(lr=0.01, weight_decay=0.01)),
])
def test_a_finished_clients_parameters_and_optimizer_state_stay_as_its_last_step_left_them(
        optimizer, settings):
    # client 0: 3 batches, the last of 2 samples (padded to 4); client 1: 1 batch, then done
    client = make_client(FedAvg, optimizer=optimizer, **settings)
    fabric = Fabric(accelerator="cpu", devices=1)
    loop = TrainingLoop(fabric, batch_size=4)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(14, 1, 8, 8, generator=generator, dtype=torch.float64)
    y = torch.randint(0, 4, (14,), generator=generator)
    batches = [[(x[0:4], y[0:4]), (x[4:8], y[4:8]), (x[8:10], y[8:10])],
               [(x[10:14], y[10:14])]]
    starts = []
    for seed in (2, 3):
        torch.manual_seed(seed)
        starts.append(client_state(make_client(FedAvg)))
    template = {n: torch.stack([s[n] for s in starts]) for n in starts[0]}
    space = workspace.Workspace(client, loop, Phase(), template, batches[0][0], eager_capture)
    space.load(template)
    space.train(batches)
    assert space.static_steps == 3 and space.eager_steps == 0 and space.full.replays == 1
    after = space.result()
    names = {id(p): n for n, p in space.params.items()}
    stacked_state = {names[id(p)]: s for p, s in space.optimizer.state.items()}
    optimizer_class = torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam
    for k in (0, 1):
        alone, alone_state = trained_alone(make_client(FedAvg), starts[k], batches[k],
                                           optimizer_class, **settings)
        for name, value in alone.items():
            torch.testing.assert_close(after[name][k], value, rtol=1e-12, atol=1e-12)
        for name, state in alone_state.items():
            for key, value in state.items():
                if value.dim():  # moments and momentum: per client; Adam's step: the group's
                    torch.testing.assert_close(stacked_state[name][key][k], value,
                                               rtol=1e-12, atol=1e-12)


def test_a_capture_that_fails_leaves_the_step_eager_and_says_why_once(tmp_path, capsys,
                                                                      monkeypatch):
    def failing(step):
        raise RuntimeError("operation not permitted when stream is capturing\nmore detail")

    monkeypatch.setattr(engine_module, "step_capture", lambda fabric, graphs: failing)
    make = lambda: make_client(FedAvg, momentum=0.5)  # noqa: E731
    loop, loop_rows = fit(tmp_path, make, "loop", 1)
    eager, eager_rows = fit(tmp_path, make, "eager", 4)
    assert_same_run(loop, eager, loop_rows, eager_rows)
    assert eager.engine.captured == "none"
    line = ("fedlight: a batched step could not be captured in a CUDA graph (RuntimeError: "
            "operation not permitted when stream is capturing); it runs eagerly")
    assert capsys.readouterr().err.count(line) == 1


def test_a_replayed_step_raises_out_of_memory_and_reports_other_failures():
    reports, calls = [], []

    def refused(step):
        raise ValueError("no")

    step = ReplayedStep(lambda: calls.append(1), refused, warmup=1, report=reports.append)
    step()
    step()
    assert step.failure == "ValueError: no" and reports == ["ValueError: no"]
    assert len(calls) == 2 and not step.captured

    def short(s):
        raise torch.OutOfMemoryError("CUDA out of memory")

    step = ReplayedStep(lambda: None, short, warmup=0)
    with pytest.raises(torch.OutOfMemoryError):
        step()
    assert graphs.one_line(ValueError("")) == "ValueError"


def test_running_out_of_memory_in_a_capture_halves_the_group(tmp_path, monkeypatch):
    def capture(step):
        if step.__self__.size > 2:
            raise torch.OutOfMemoryError("no room to capture more than 2 clients")
        return eager_capture(step)

    monkeypatch.setattr(engine_module, "step_capture", lambda fabric, graphs: capture)
    make = lambda: make_client(FedAvg, momentum=0.5)  # noqa: E731
    loop, loop_rows = fit(tmp_path, make, "loop", 1)
    halved, halved_rows = fit(tmp_path, make, "halved", 4)
    assert halved.engine.group_size == 2 and halved.engine.captured == "all"
    assert_same_run(loop, halved, loop_rows, halved_rows)


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_adam_is_capturable_through_every_parameter_group_on_a_gpu(optimizer):
    client = make_client(GPFL, optimizer=optimizer)  # two parameter groups
    stacked = {n: torch.stack([p.detach()] * 2) for n, p in client.named_parameters()}
    on_gpu = stacked_optimizer(client, Phase(), stacked, torch.device("cuda"), True)
    assert len(on_gpu.param_groups) == 2
    assert all(g["capturable"] and g["foreach"] for g in on_gpu.param_groups)
    on_cpu = stacked_optimizer(client, Phase(), stacked, torch.device("cpu"), True)
    assert not any(g["capturable"] for g in on_cpu.param_groups)


def test_cudnn_autotunes_while_batched_groups_train_on_a_gpu_only(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    with autotuned_convolutions(torch.device("cpu")):
        assert torch.backends.cudnn.benchmark is False
    with autotuned_convolutions(torch.device("cuda")):
        assert torch.backends.cudnn.benchmark is True
    assert torch.backends.cudnn.benchmark is False


def test_the_runtime_starts_each_client_once_a_round(tmp_path, monkeypatch):
    from fedlight.federation.runtime import ClientRuntime
    started = []
    start = ClientRuntime.start

    def counted(self, task):
        started.append((task.round_idx, task.client_id))
        return start(self, task)

    monkeypatch.setattr(ClientRuntime, "start", counted)
    trainer, _ = fit(tmp_path, lambda: make_client(MAP), "batched", 4)
    assert isinstance(trainer.engine, BatchedEngine)
    assert_stacked(trainer.engine)
    assert len(started) == len(set(started)) == 8  # 2 rounds x 4 participants


def test_the_header_says_which_steps_run_from_graphs():
    assert steps_note(False, None) == "steps run eagerly"
    assert steps_note(True, padding_refusal(make_client(MAP))) == (
        "every step replayed from CUDA graphs, captured: all")
    bn = make_client(FedBN, backbone="cnn_bn", **IMAGE_16)
    assert steps_note(True, padding_refusal(bn)).endswith(
        "which run eagerly: its model has BatchNorm2d, whose batch statistics would see the "
        "padding")
