"""Batched clients (trainer.batched_clients): several participants trained as one vmapped
computation give the loop's results to float tolerance, whatever the group size; methods and
settings that cannot be batched fall back to the loop with a one-line note."""

from __future__ import annotations

import csv

import pytest
import torch

from fedlight.clients import FedAvg, FedBABU, FedProx, FedRep, Local
from fedlight.core.client import Phase
from fedlight.data.datamodule import iterate_batches
from fedlight.data.partitions.dirichlet import Dirichlet
from fedlight.federation.engines.batched import (
    BatchedEngine,
    batching_refusal,
    phase_batches,
)
from fedlight.federation.engines.sequential import SequentialEngine
from tests.conftest import make_client, tiny_data, tiny_trainer
from tests.test_batched_methods import assert_stacked, count_stacked_calls  # noqa: F401

# Dirichlet sizes: clients take different numbers of steps and end on smaller last batches.
DATA = dict(num_clients=5, partition=Dirichlet(beta=0.5, min_client_size=5), samples=300)
TOLERANCE = dict(rel=1e-4, abs=1e-5)


def run(tmp_path, client, batched, name, **options):
    trainer = tiny_trainer(tmp_path, rounds=3, join_ratio=0.8, batch_size=7, threads=1,
                           run_name=name, batched_clients=batched, **options)
    summary = trainer.fit(client, tiny_data(**DATA))
    with open(f"{summary['run_dir']}/metrics.csv") as handle:
        rows = [{k: v for k, v in r.items() if k != "seconds"} for r in csv.DictReader(handle)]
    return trainer, rows


def assert_rows_close(first, second):
    assert len(first) == len(second) > 0
    for a, b in zip(first, second, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            if a[key] in ("", None) or not a[key].replace(".", "").replace("-", "").replace(
                    "e", "").isdigit():
                assert a[key] == b[key], key
            else:
                assert float(a[key]) == pytest.approx(float(b[key]), **TOLERANCE), key


def assert_states_close(first, second, atol=1e-5):
    assert sorted(first) == sorted(second)
    for key, value in first.items():
        torch.testing.assert_close(value, second[key], rtol=1e-4, atol=atol, msg=key)


# Adam divides by the root of the second moment, so an entry whose gradient is near 0 turns
# the loop's and the batched sums' last-bit differences into ~1e-4 (1 entry in 12,800 here).
@pytest.mark.parametrize("make, atol", [
    (lambda: make_client(FedAvg, momentum=0.9, weight_decay=1e-3), 1e-5),  # stateful SGD
    (lambda: make_client(FedRep, optimizer="adam", lr=0.01), 1e-3),  # two phases, Adam
    (lambda: make_client(FedBABU), 1e-5),  # the head frozen
    (lambda: make_client(FedAvg, extra_private=["model.head.*"]), 1e-5),  # FedPer's head
    (lambda: make_client(Local), 1e-5),  # nothing shared
], ids=["fedavg-momentum", "fedrep-adam", "fedbabu", "fedper", "local"])
def test_batched_clients_train_as_the_loop_does(tmp_path, make, atol):
    loop, loop_rows = run(tmp_path, make(), 1, "loop")
    batched, batched_rows = run(tmp_path, make(), 4, "batched")
    assert isinstance(loop.engine, SequentialEngine) and isinstance(batched.engine, BatchedEngine)
    assert_stacked(batched.engine)
    assert_rows_close(loop_rows, batched_rows)
    assert_states_close(loop.global_state, batched.global_state, atol)
    for client_id, state in loop.client_states.items():
        assert_states_close(state, batched.client_states[client_id], atol)
    # the models moved: a step that did nothing would match a loop that did nothing
    assert float(loop_rows[-1]["train_loss"]) != float(loop_rows[0]["train_loss"])


def test_the_group_size_does_not_change_the_result(tmp_path):
    two, two_rows = run(tmp_path, make_client(FedAvg, momentum=0.5), 2, "two")
    five, five_rows = run(tmp_path, make_client(FedAvg, momentum=0.5), 5, "five")
    assert_rows_close(two_rows, five_rows)
    assert_states_close(two.global_state, five.global_state)
    assert_stacked(five.engine)


def test_convolutions_are_batched_too(tmp_path):
    def cnn():
        return make_client(FedAvg, backbone="cnn", input_shape=(1, 28, 28), lr=0.05)
    options = dict(shape=(1, 28, 28), samples=120, num_clients=3,
                   partition=Dirichlet(beta=0.5, min_client_size=5))
    results = []
    for name, batched in (("loop", 1), ("batched", 3)):
        trainer = tiny_trainer(tmp_path, rounds=2, batch_size=10, threads=1, run_name=name,
                               batched_clients=batched, memory_format="contiguous")
        trainer.fit(cnn(), tiny_data(**options))
        results.append(trainer.global_state)
    assert_states_close(*results)
    assert_stacked(trainer.engine)


@pytest.mark.parametrize("make, options, reason", [
    (lambda: make_client(FedProx), {}, "FedProx overrides training_step (not declared batchable)"),
    (lambda: make_client(FedAvg), {"precision": "16-mixed"}, "16-mixed keeps one loss scaler"),
    (lambda: make_client(FedAvg), {"optimizer_state": "persist"}, "optimizer_state persist"),
    (lambda: make_client(FedAvg), {"gradient_clip_val": 1.0}, "gradient clipping"),
])
def test_what_cannot_be_batched_says_why(make, options, reason):
    settings = {"precision": "32-true", "optimizer_state": "fresh", "gradient_clip_val": None,
                **options}
    assert reason in batching_refusal(make(), **settings)


def test_an_overridden_hook_or_dropout_is_refused():
    client = make_client(FedAvg)
    assert batching_refusal(client, "32-true", "fresh", None) is None
    client.on_train_batch_start = lambda batch, batch_idx: None
    assert "on_train_batch_start" in batching_refusal(client, "32-true", "fresh", None)
    client = make_client(FedAvg)
    client.model.add_module("drop", torch.nn.Dropout(0.5))
    assert batching_refusal(client, "32-true", "fresh", None).startswith(
        "its model has torch's Dropout, whose masks come from one global generator")


def test_a_method_that_cannot_be_batched_trains_in_the_loop_and_says_so(tmp_path, capsys):
    trainer = tiny_trainer(tmp_path, rounds=1, batched_clients=4, verbose=True)
    trainer.fit(make_client(FedProx), tiny_data())
    assert type(trainer.engine) is SequentialEngine
    assert ("fedlight: batched_clients: 4 not used, clients train one after another "
            "(FedProx overrides training_step (not declared batchable))"
            ) in capsys.readouterr().out


@pytest.mark.parametrize("value", [0, -2, 1.5, True, "all"])
def test_bad_batched_clients_is_a_one_line_error(tmp_path, value):
    with pytest.raises(ValueError, match=r"trainer.batched_clients must be 'auto' or a positive "
                                         rf"integer, got {value!r} \(1 trains clients one after "
                                         r"another\)"):
        tiny_trainer(tmp_path, batched_clients=value)


def test_phase_batches_draw_as_the_loop_does():
    x, y = torch.arange(23.0).reshape(23, 1), torch.arange(23)
    order = torch.Generator().manual_seed(3)
    drawn = phase_batches(lambda: iterate_batches(x, y, 5, order), Phase(epochs=2))
    generator = torch.Generator().manual_seed(3)
    orders = [torch.randperm(23, generator=generator) for _ in range(2)]
    # 23 = 4 x 5 + 3 per epoch: a last batch of 3
    assert [len(b[1]) for b in drawn] == [5, 5, 5, 5, 3] * 2
    assert torch.equal(torch.cat([b[1] for b in drawn]), torch.cat(orders))
    same_order = torch.Generator().manual_seed(3)
    capped = phase_batches(lambda: iterate_batches(x, y, 5, same_order),
                           Phase(epochs=3, max_steps=6))
    assert len(capped) == 6 and torch.equal(capped[5][1], drawn[5][1])


def test_a_batched_run_resumes_exactly_and_a_changed_setting_is_refused(tmp_path):
    def trainer(rounds, name, batched=3):
        return tiny_trainer(tmp_path, rounds=rounds, batch_size=7, threads=1, run_name=name,
                            batched_clients=batched, verbose=False)
    whole = trainer(3, "whole")
    whole.fit(make_client(FedAvg, momentum=0.5), tiny_data(**DATA))
    part = trainer(2, "part")
    summary = part.fit(make_client(FedAvg, momentum=0.5), tiny_data(**DATA))
    checkpoint = f"{summary['run_dir']}/checkpoints/last.ckpt"
    resumed = trainer(3, "part")
    resumed.fit(make_client(FedAvg, momentum=0.5), tiny_data(**DATA), ckpt_path=checkpoint)
    for key, value in whole.global_state.items():
        assert torch.equal(value, resumed.global_state[key]), key
    assert_stacked(resumed.engine)
    with pytest.raises(ValueError, match="batched_clients"):
        trainer(3, "part", batched=1).fit(make_client(FedAvg, momentum=0.5),
                                          tiny_data(**DATA), ckpt_path=checkpoint)
