"""The engine chosen by measuring (trainer.batched_clients: measure, auto on a GPU) and the
first round guarded by the loop: the choice follows the timings (injected here: no test
depends on a measured time), the probe changes nothing of the run, the choice is recorded in
the run folder and kept on resume, and an error of the batched engine in the first round
reruns that round with the loop."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from fedlight.clients import GPFL, FedAvg
from fedlight.core.errors import TrainingDiverged
from fedlight.data.partitions.dirichlet import Dirichlet
from fedlight.federation.build import simulator_engine
from fedlight.federation.engines import choice
from fedlight.federation.engines.batched import BatchedEngine
from fedlight.federation.engines.choice import (
    BATCHED,
    CHOICE_FILE,
    GRAPHS,
    LOOP,
    ChosenEngine,
    EngineChoice,
    fastest,
)
from fedlight.federation.engines.sequential import SequentialEngine
from fedlight.federation.options import TrainerOptions
from tests.conftest import make_client, tiny_data, tiny_trainer

# Dirichlet sizes: clients take different numbers of steps and end on smaller last batches.
DATA = dict(num_clients=4, partition=Dirichlet(beta=0.5, min_client_size=5), samples=200)


class ScriptedClock:
    """A clock whose readings advance by ``seconds[way]`` over each timed pass, the ways
    timed in the order of ``seconds`` (the probe reads the clock twice per way)."""

    def __init__(self, seconds):
        self.readings = []
        now = 0.0
        for value in seconds.values():
            self.readings += [now, now + value]
            now += value + 1.0
        self.readings.reverse()

    def __call__(self):
        return self.readings.pop()


def fit(tmp_path, name, batched, make=lambda: make_client(GPFL), rounds=2,
        ckpt_path=None, **options):
    trainer = tiny_trainer(tmp_path, rounds=rounds, batch_size=7, threads=1, run_name=name,
                           batched_clients=batched, **options)
    summary = trainer.fit(make(), tiny_data(**DATA), ckpt_path=ckpt_path)
    with open(f"{summary['run_dir']}/metrics.csv") as handle:
        rows = [{k: v for k, v in r.items() if k != "seconds"} for r in csv.DictReader(handle)]
    return trainer, rows, summary


def assert_same_run(first, second):
    (one, rows_one, _), (two, rows_two, _) = first, second
    assert rows_one == rows_two and len(rows_one) > 0
    for key, value in one.global_state.items():
        assert torch.equal(value, two.global_state[key]), key
    for client, state in one.client_states.items():
        for key, value in state.items():
            assert torch.equal(value, two.client_states[client][key]), (client, key)


def test_the_fastest_way_is_chosen_the_loop_on_a_tie():
    assert fastest({LOOP: 2.0, BATCHED: 1.0, GRAPHS: 0.5}) == GRAPHS
    assert fastest({LOOP: 1.0, BATCHED: 1.0}) == LOOP
    assert fastest({BATCHED: 3.0}) == BATCHED
    assert fastest({}) == LOOP


def test_a_choice_round_trips_through_its_record():
    made = EngineChoice(BATCHED, {LOOP: 2e-3, BATCHED: 1e-3}, {GRAPHS: "RuntimeError: x"})
    assert EngineChoice.from_record(json.loads(json.dumps(made.record()))) == made
    line = made.line(3, 4)
    assert "loop 0.002" in line and "batched 0.001" in line and "batched + graphs failed" in line
    assert line.endswith("the batched trains the run") and "\n" not in line


@pytest.mark.parametrize("seconds, way, engine", [
    ({LOOP: 1.0, BATCHED: 5.0}, LOOP, SequentialEngine),
    ({LOOP: 5.0, BATCHED: 1.0}, BATCHED, BatchedEngine),
])
def test_measure_keeps_the_fastest_says_so_and_changes_nothing(tmp_path, monkeypatch, capsys,
                                                               seconds, way, engine):
    monkeypatch.setattr(choice, "clock", ScriptedClock(seconds))
    measured = fit(tmp_path, "measured", "measure", verbose=True)
    trainer, _, summary = measured
    assert type(trainer.engine) is engine
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "batched_clients measured" in line]
    assert len(lines) == 1 and f"the {way} trains the run" in lines[0]
    recorded = json.loads((Path(summary["run_dir"]) / CHOICE_FILE).read_text())
    assert recorded["way"] == way and set(recorded["seconds_per_step"]) == {LOOP, BATCHED}
    # the probe trained every client a few steps each way: nothing of it is left
    plain = fit(tmp_path, "plain", 1 if way == LOOP else DATA["num_clients"])
    assert_same_run(measured, plain)


def test_a_resumed_run_keeps_the_recorded_choice_without_measuring(tmp_path, monkeypatch,
                                                                   capsys):
    monkeypatch.setattr(choice, "clock", ScriptedClock({LOOP: 5.0, BATCHED: 1.0}))
    _, _, summary = fit(tmp_path, "part", "measure", rounds=1)
    checkpoint = torch.load(f"{summary['run_dir']}/checkpoints/last.ckpt", weights_only=False)
    assert checkpoint["engine_choice"]["way"] == BATCHED

    def no_clock():
        raise AssertionError("a resumed run measured again")

    monkeypatch.setattr(choice, "clock", no_clock)
    capsys.readouterr()
    resumed = fit(tmp_path, "part", "measure", rounds=2, ckpt_path="last", verbose=True)
    assert type(resumed[0].engine) is BatchedEngine
    assert ("fedlight: the batched trains the run, as its first round chose "
            f"({CHOICE_FILE})") in capsys.readouterr().out
    monkeypatch.setattr(choice, "clock", ScriptedClock({LOOP: 5.0, BATCHED: 1.0}))
    whole = fit(tmp_path, "whole", "measure", rounds=2)
    assert_same_run(resumed, whole)


def test_a_way_that_fails_while_timed_is_not_chosen(tmp_path, monkeypatch, capsys):
    def broken(self, tasks):
        raise RuntimeError("no stacked step today")

    monkeypatch.setattr(BatchedEngine, "train", broken)
    monkeypatch.setattr(choice, "clock", ScriptedClock({LOOP: 5.0}))
    measured = fit(tmp_path, "measured", "measure", verbose=True)
    assert type(measured[0].engine) is SequentialEngine
    assert "batched failed: RuntimeError: no stacked step today" in capsys.readouterr().out
    assert_same_run(measured, fit(tmp_path, "plain", 1))


def failing_first_round(monkeypatch, error):
    """BatchedEngine.train raising ``error`` after its first client's result, in the run's
    first round only."""
    original = BatchedEngine.train

    def train(self, tasks):
        for count, result in enumerate(original(self, tasks)):
            if tasks[0].round_idx == 0 and count == 1:
                raise error
            yield result

    monkeypatch.setattr(BatchedEngine, "train", train)


def test_an_error_of_the_batched_engine_in_round_one_reruns_it_with_the_loop(
        tmp_path, monkeypatch, capsys):
    failing_first_round(monkeypatch, RuntimeError("CUDA error: an illegal memory access\nmore"))
    fallen = fit(tmp_path, "fallen", DATA["num_clients"], rounds=3)
    trainer, _, summary = fallen
    assert type(trainer.engine) is SequentialEngine
    err = [line for line in capsys.readouterr().err.splitlines() if "batched clients" in line]
    assert err == ["fedlight: batched clients failed in round 1 (RuntimeError: CUDA error: an "
                   "illegal memory access); the round is trained again one client after "
                   "another, as is the rest of the run"]
    recorded = json.loads((Path(summary["run_dir"]) / CHOICE_FILE).read_text())
    assert recorded["way"] == LOOP and recorded["fallback"].startswith("batched: RuntimeError")
    assert_same_run(fallen, fit(tmp_path, "loop", 1, rounds=3))


def test_a_user_error_of_the_batched_engine_is_not_hidden(tmp_path, monkeypatch):
    failing_first_round(monkeypatch, TrainingDiverged("non-finite loss: lower the lr"))
    with pytest.raises(TrainingDiverged, match="lower the lr"):
        fit(tmp_path, "diverged", DATA["num_clients"],
            make=lambda: make_client(FedAvg, momentum=0.5))


def test_measure_is_a_valid_value_and_auto_on_a_cpu_does_not_measure(tmp_path, monkeypatch):
    def no_clock():
        raise AssertionError("auto measured on a CPU")

    monkeypatch.setattr(choice, "clock", no_clock)
    trainer, _, summary = fit(tmp_path, "auto", "auto")
    assert type(trainer.engine) is SequentialEngine and trainer.run.engine_choice is None
    assert not (Path(summary["run_dir"]) / CHOICE_FILE).exists()
    assert trainer.run.hyperparameters(trainer)["trainer"]["batched_clients"] == 1
    with pytest.raises(ValueError, match="'measure' times both ways"):
        tiny_trainer(tmp_path, batched_clients="fastest")


@pytest.mark.parametrize("device, requested, graphs, ways", [
    ("cuda", "auto", True, (LOOP, BATCHED, GRAPHS)),  # auto on a GPU measures every way
    ("cuda", "auto", False, (LOOP, BATCHED)),  # cuda_graphs: false leaves graphs out
    ("cuda", "measure", True, (LOOP, BATCHED, GRAPHS)),
    ("cpu", "measure", True, (LOOP, BATCHED)),  # no graphs on a CPU
    ("cuda", 3, True, (GRAPHS,)),  # K: batched as asked, not measured
    ("cpu", 3, True, (BATCHED,)),
    ("cpu", "auto", True, None),  # the loop, without measuring
])
def test_which_ways_the_simulator_chooses_from(device, requested, graphs, ways):
    precision = SimpleNamespace(precision="32-true")
    fabric = SimpleNamespace(device=torch.device(device),
                             strategy=SimpleNamespace(precision=precision))
    runtime = SimpleNamespace(fabric=fabric, client=make_client(FedAvg))
    options = TrainerOptions(batched_clients=requested, cuda_graphs=graphs)
    engine, note = simulator_engine(options, runtime)
    if ways is None:
        assert type(engine) is SequentialEngine and "auto on cpu" in note
        return
    assert isinstance(engine, ChosenEngine) and engine.ways == ways
    measured = len(ways) > 1
    assert (engine.choice is None) == measured
    assert ("the fastest trains the run" in note) == measured


def test_a_run_that_fell_back_to_the_loop_resumes_with_the_loop(tmp_path, monkeypatch):
    failing_first_round(monkeypatch, RuntimeError("capture failed"))
    fit(tmp_path, "part", DATA["num_clients"], rounds=1)
    resumed = fit(tmp_path, "part", DATA["num_clients"], rounds=2, ckpt_path="last")
    assert type(resumed[0].engine) is SequentialEngine
    assert resumed[0].run.engine_choice["fallback"] == "batched: RuntimeError: capture failed"
    assert_same_run(resumed, fit(tmp_path, "loop", 1, rounds=2))
