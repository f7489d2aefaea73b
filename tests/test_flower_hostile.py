"""Hostile or broken updates are refused, not trusted: a SuperNode whose reply has other keys,
another shape, NaN or Inf values, an impossible weight, another round's number or bytes that
are not a structure of tensors is left out of the round with one line naming the client and
the cause; the round goes on with the others, a round left with no accepted update is
skipped, and the run folder's refused.json records each one. The same check guards the
simulator's engine."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch

pytest.importorskip("flwr")

from flwr.app import ConfigRecord  # noqa: E402

from fedlight.cli import FedlightCLI  # noqa: E402
from fedlight.core.client import Upload  # noqa: E402
from fedlight.core.messages import ClientResult, TrainTask  # noqa: E402
from fedlight.federation.engines.sequential import SequentialEngine  # noqa: E402
from fedlight.federation.protocol import update_problem  # noqa: E402
from fedlight.flower import build_client_app, build_server_app  # noqa: E402
from fedlight.flower.inline import run_inline  # noqa: E402
from fedlight.flower.server import REFUSED_FILE  # noqa: E402
from tests.flower_hostile.hostile import FAULTS, hostile_app  # noqa: E402

CONFIG = str(Path(__file__).resolve().parents[1] / "configs" / "fedavg" / "mnist5k_dirichlet.yaml")
RUN = ["--data.num_clients", "4", "--trainer.join_ratio", "1.0", "--trainer.rounds", "3",
       "--trainer.eval_every", "1", "--trainer.batch_size", "32", "--trainer.progress_bar",
       "false", "--trainer.verbose", "false", "--trainer.logger", "csv"]


def test_each_kind_of_bad_update_is_refused_and_the_round_goes_on(tmp_path, capsys):
    kinds = list(FAULTS)
    schedule = {0: dict(zip((1, 2, 3), kinds[:3], strict=True)),
                1: dict(zip((1, 2, 3), kinds[3:], strict=True)),
                2: {c: "nan" for c in range(4)}}  # nothing valid: the round is skipped
    overrides = [*RUN, "--trainer.default_root_dir", str(tmp_path / "runs")]
    honest: dict[int, dict[str, torch.Tensor]] = {}
    nodes = hostile_app(build_client_app(CONFIG, overrides, str(tmp_path / "state")), schedule,
                        honest)
    out = []
    run_inline(build_server_app(CONFIG, overrides, on_finish=out.append), nodes, 4)
    (outcome,) = out

    assert [row["refused"] for row in outcome.history] == [3, 3, 4]
    assert [row["dropped"] for row in outcome.history] == [3, 3, 4]
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("fedlight:")]
    expected = [(r + 1, c, FAULTS[f][2]) for r, faults in schedule.items()
                for c, f in sorted(faults.items())]
    refusals = lines[:10]
    assert len(refusals) == 10 and lines[10:] == [
        "fedlight: round 3 skipped: no update was accepted"]
    for line, (round_number, client, cause) in zip(refusals, expected, strict=True):
        assert re.fullmatch(rf"fedlight: round {round_number}: the update of client {client} "
                            rf"was refused: {cause}.*", line), line
    recorded = json.loads((Path(outcome.summary["run_dir"]) / REFUSED_FILE).read_text())
    assert [(r["round"], r["client"]) for r in recorded] == [e[:2] for e in expected]

    # round 2 kept client 0's update alone; round 3, all refused, left it untouched
    for key, value in honest[1].items():
        assert torch.equal(outcome.global_state[key], value), key


def _result(state, weight=10.0, loss=1.0, payload=None):
    return ClientResult(0, Upload(state, weight, payload or {}), loss, 3)


def test_update_problem_names_each_cause():
    sent = {"w": torch.zeros(2, 3), "n": torch.tensor(1)}
    task = TrainTask(0, 4, sent, {})
    assert update_problem(task, _result({"w": torch.ones(2, 3), "n": torch.tensor(2)})) is None
    cases = [
        (_result({"w": torch.ones(2, 3)}), "missing: 'n'; unexpected: none"),
        (_result({**sent, "x": torch.ones(1)}), "missing: none; unexpected: 'x'"),
        (_result({"w": torch.ones(3, 2), "n": torch.tensor(2)}),
         "'w' has shape (3, 2), expected (2, 3)"),
        (_result({"w": torch.tensor([[1.0, float("inf"), 0], [0, 0, 0]]), "n": torch.tensor(2)}),
         "'w' has non-finite values"),
        (_result(sent, payload={"p": {"q": torch.tensor([float("nan")])}}),
         "payload['p']['q'] has non-finite values"),
        (_result(sent, weight=-1.0), "its weight -1.0 is not a finite non-negative number"),
        (_result(sent, loss=float("nan")), "its training loss is not finite"),
    ]
    for result, cause in cases:
        assert cause in update_problem(task, result)


def test_the_simulators_engine_is_guarded_by_the_same_check(tmp_path, capsys, monkeypatch):
    original = SequentialEngine.train

    def broken_engine(self, tasks):
        for index, result in enumerate(original(self, tasks)):
            if index == 0:  # a wrong shape
                state = {k: v.flatten() for k, v in result.upload.state.items()}
                result = dataclasses.replace(result, upload=Upload(state, result.upload.weight))
            yield result
            if index == 1:  # the same client again, and a client not asked
                yield result
                yield dataclasses.replace(result, client_id=99)

    monkeypatch.setattr(SequentialEngine, "train", broken_engine)
    overrides = [*RUN, "--data.num_clients", "3", "--trainer.rounds", "1",
                 "--trainer.default_root_dir", str(tmp_path)]
    trainer = FedlightCLI(args=["fit", "-c", CONFIG, *overrides]).trainer
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("fedlight:")]
    assert [re.sub(r"refused: .*", "refused", line) for line in lines] == [
        "fedlight: round 1: the update of client 0 was refused",
        "fedlight: round 1: the update of client 1 was refused",
        "fedlight: round 1: the update of client 99 was refused"]
    assert "shape" in lines[0] and "a second result" in lines[1]
    assert "not a participant of the round" in lines[2]
    assert trainer.history[0]["refused"] == 1 and trainer.history[0]["dropped"] == 1
    shapes = {k: v.shape for k, v in trainer.run.client.state_dict().items()}
    assert all(v.shape == shapes[k] for k, v in trainer.global_state.items())
    assert all(torch.isfinite(v).all() for v in trainer.global_state.values()
               if v.is_floating_point())


def test_a_config_record_without_a_round_is_an_unreadable_reply():
    from flwr.app import RecordDict

    from fedlight.flower.engine import read_reply

    content = RecordDict({"result": ConfigRecord({"weight": 1.0})})
    refused = read_reply(TrainTask(2, 0, {}, {}), content)
    assert refused.client_id == 2 and refused.reason.startswith("its reply cannot be read (")
