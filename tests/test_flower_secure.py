"""Secure aggregation under Flower (SecAgg+): the server gets only the weighted sum of the
updates, equal to plain aggregation within SecAgg+'s quantization; a SuperNode that drops
during the protocol, within the reconstruction threshold, does not stop the round; the
ServerApp's grid carries only masked vectors; rules that need individual updates refuse it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from flwr.common import bytes_to_ndarray  # noqa: E402
from flwr.common.secure_aggregation.secaggplus_constants import (  # noqa: E402
    RECORD_KEY_CONFIGS,
    Key,
)

from fedlight.flower import build_client_app, build_server_app  # noqa: E402
from fedlight.flower.client import ClientNode  # noqa: E402
from fedlight.flower.inline import InlineGrid  # noqa: E402
from fedlight.flower.secure import MODULUS_RANGE, SecureAggregation  # noqa: E402
from fedlight.flower.server import serve  # noqa: E402
from fedlight.flower.settings import load_run  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
FEDAVG = "fedavg/mnist5k_dirichlet.yaml"
SECURE = SecureAggregation(shares=4, threshold=3)
CLIENTS = 4


def _overrides(tmp_path, *extra):
    return ["--data.num_clients", str(CLIENTS), "--trainer.join_ratio", "1.0",
            "--trainer.rounds", "1", "--trainer.batch_size", "32", "--trainer.progress_bar",
            "false", "--trainer.verbose", "false", "--trainer.logger", "csv",
            "--trainer.default_root_dir", str(tmp_path / "runs"), *extra]


class _RecordingGrid(InlineGrid):
    """Keeps every reply the ServerApp receives: all that the server side ever holds."""

    def push_messages(self, messages):
        ids = list(super().push_messages(messages))
        self.received = getattr(self, "received", []) + [self.replies[i] for i in ids]
        return ids


def _served(tmp_path, config, overrides, secure, name):
    run = load_run(str(CONFIGS / config), tuple(overrides))
    grid = _RecordingGrid(build_client_app(str(CONFIGS / config), overrides,
                                           str(tmp_path / name)), CLIENTS)
    return run, grid, serve(grid, run, secure=secure)


def _largest_difference(first, second):
    return max(float((first[k].double() - second[k].double()).abs().max()) for k in first)


def _bound(run):
    sizes = [run.datamodule.client_train_size(i) for i in range(CLIENTS)]
    return SECURE.quantization_bound(sizes, max(sizes))


def test_the_server_gets_only_the_masked_sum_equal_to_plain_aggregation(tmp_path):
    overrides = _overrides(tmp_path)
    _, _, plain = _served(tmp_path, FEDAVG, overrides, None, "plain")
    run, grid, secure = _served(tmp_path, FEDAVG, overrides, SECURE, "secure")
    difference = _largest_difference(plain.global_state, secure.global_state)
    assert 0 < difference <= _bound(run)  # quantized, and within its bound
    assert secure.history[-1]["personalized_accuracy"] == pytest.approx(
        plain.history[-1]["personalized_accuracy"], abs=0.01)

    masked = []
    for reply in grid.received:  # what the ServerApp holds: no update in clear
        assert all(not record for record in reply.content.array_records.values())
        configs = reply.content.config_records.get(RECORD_KEY_CONFIGS, {})
        if Key.MASKED_PARAMETERS in configs:
            masked.append(np.concatenate([bytes_to_ndarray(b).ravel()
                                          for b in configs[Key.MASKED_PARAMETERS]]))
    assert len(masked) == CLIENTS
    for vector in masked:  # integers spread uniformly over the mask's range
        assert vector.dtype.kind in "iu" and 0 <= vector.min() and vector.max() < MODULUS_RANGE
        assert 0.45 < vector.mean() / MODULUS_RANGE < 0.55


def test_a_supernode_dropped_within_the_threshold_does_not_stop_the_round(tmp_path,
                                                                           monkeypatch):
    original = ClientNode.train

    def client_2_drops(self, task):
        if self.client_id == 2:
            raise RuntimeError("SuperNode 2 went away")
        return original(self, task)

    monkeypatch.setattr(ClientNode, "train", client_2_drops)
    overrides = _overrides(tmp_path)
    _, _, plain = _served(tmp_path, FEDAVG, overrides, None, "plain")
    run, _, secure = _served(tmp_path, FEDAVG, overrides, SECURE, "secure")
    assert [row["dropped"] for row in secure.history] == [1]
    assert secure.summary["rounds"] == 1
    assert 0 < _largest_difference(plain.global_state, secure.global_state) <= _bound(run)


@pytest.mark.slow  # two more runs (~20 s); the slow step runs it
def test_dp_fedavg_on_secure_aggregation_clips_on_the_clients_and_noises_the_sum(tmp_path):
    overrides = _overrides(tmp_path)
    config = "dp/fedavg_mnist5k_dirichlet.yaml"
    run, _, plain = _served(tmp_path, config, overrides, None, "plain")
    _, _, secure = _served(tmp_path, config, overrides, SECURE, "secure")
    # weights are 1 under DP: the bound of uniform weights
    bound = SECURE.quantization_bound([1.0] * CLIENTS, 1.0)
    assert 0 < _largest_difference(plain.global_state, secure.global_state) <= bound
    assert secure.summary["dp_epsilon"] == plain.summary["dp_epsilon"] > 0


@pytest.mark.parametrize(("config", "extra", "rule"), [
    ("fedproto/mnist5k_dirichlet.yaml", (), "PrototypeMean"),
    (FEDAVG, ("--server", "Krum"), "Krum"),
])
def test_rules_that_read_individual_updates_refuse_secure_aggregation(tmp_path, config, extra,
                                                                      rule):
    overrides = _overrides(tmp_path, *extra)
    app = build_server_app(str(CONFIGS / config), overrides, secure=SECURE)
    grid = InlineGrid(build_client_app(str(CONFIGS / config), overrides, str(tmp_path)), CLIENTS)
    with pytest.raises(ValueError, match=rf"server rule {rule} reads each client's own upload") \
            as error:
        app(grid, grid.contexts[next(iter(grid.contexts))])
    assert "\n" not in str(error.value)
    assert not (tmp_path / "runs").exists()


def test_secure_aggregation_settings_are_read_from_the_run_config():
    assert SecureAggregation.from_settings({}) is None
    settings = SecureAggregation.from_settings({"secure-aggregation": True, "secagg-shares": 5,
                                                "secagg-threshold": "0.6"})
    assert settings == SecureAggregation(5, 0.6)
    with pytest.raises(ValueError, match="secagg-shares must be an integer or a fraction"):
        SecureAggregation.from_settings({"secure-aggregation": "true", "secagg-shares": "x"})
    with pytest.raises(ValueError, match="must be less than `num_shares`"):
        SecureAggregation(3, 3).workflow(1.0, None)


def test_the_update_is_what_secure_aggregation_masks():
    from fedlight.core.client import Upload
    from fedlight.core.messages import ClientResult, TrainTask
    from fedlight.flower.secure import aggregate_state, secure_reply

    sent = {"w": torch.ones(2, 2), "n": torch.tensor(3)}
    task = TrainTask(0, 0, sent, {})
    result = ClientResult(0, Upload({"w": torch.full((2, 2), 4.0), "n": torch.tensor(5)}, 7.0),
                          1.0, 2)
    content = secure_reply(task, result, "samples", clip_norm=None)
    assert content["fitres.num_examples"]["num_examples"] == 7
    update = [a.numpy() for a in content["fitres.parameters"].values()]
    np.testing.assert_array_equal(update[0], np.full((2, 2), 3.0))
    state = aggregate_state(sent, update)
    assert torch.equal(state["w"], result.upload.state["w"]) and state["n"].item() == 5
    clipped = secure_reply(task, result, "uniform", clip_norm=1.0)
    values = np.concatenate([a.numpy().ravel() for a in clipped["fitres.parameters"].values()])
    assert np.linalg.norm(values) == pytest.approx(1.0)
    assert clipped["fitres.num_examples"]["num_examples"] == 1
