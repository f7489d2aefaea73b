"""Reported metrics through torchmetrics: accuracy as before, macro-F1 and AUC as sklearn /
PFLlib compute them, pooled over clients."""

from __future__ import annotations

import pytest
import torch
from sklearn.metrics import f1_score, roc_auc_score
from sklearn.preprocessing import label_binarize

from fedlight.clients import FedAvg
from fedlight.federation.evaluation import (
    batch_count,
    batch_outputs,
    score_batches,
    score_outputs,
    stacked_batch_outputs,
    summarize_clients,
)
from tests.conftest import make_client, tiny_data, tiny_trainer


def _scores(seed: int, n: int = 37, classes: int = 5):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, classes, generator=generator)
    y = torch.randint(0, classes, (n,), generator=generator)
    return logits, y, score_outputs(lambda x: {"personalized": x}, logits, y, 8)["personalized"]


def test_score_matches_the_argmax_count_sklearn_f1_and_pfllib_auc():
    logits, y, score = _scores(0)
    assert score.correct == int((logits.argmax(-1) == y).sum()) and score.total == len(y)
    assert score.loss == pytest.approx(float(torch.nn.functional.cross_entropy(logits, y)))
    assert score.macro_f1 == pytest.approx(f1_score(y, logits.argmax(-1), average="macro"))
    probs = logits.softmax(-1).numpy()
    expected_auc = roc_auc_score(label_binarize(y, classes=range(5)), probs, average="micro")
    assert score.auc == pytest.approx(expected_auc, abs=1e-6)


def test_pooled_metrics_over_clients():
    clients = {i: _scores(i)[1:] for i in range(3)}
    metrics = summarize_clients({i: {"personalized": s} for i, (_, s) in clients.items()})
    y = torch.cat([y for y, _ in clients.values()])
    preds = torch.cat([_scores(i)[0].argmax(-1) for i in range(3)])
    assert metrics["personalized_accuracy"] == pytest.approx(float((preds == y).float().mean()))
    assert metrics["personalized_macro_f1"] == pytest.approx(f1_score(y, preds, average="macro"))
    weighted = sum(s.auc * s.total for _, s in clients.values()) / len(y)  # PFLlib's pooling
    assert metrics["personalized_auc"] == pytest.approx(weighted)


@pytest.mark.parametrize("n", [1, 9, 17])  # k x batch size + 1: a trailing one-sample batch
def test_every_sample_is_scored_when_the_last_batch_holds_one(n):
    generator = torch.Generator().manual_seed(n)
    logits = torch.randn(n, 3, generator=generator)
    y = torch.randint(0, 3, (n,), generator=generator)
    score = score_outputs(lambda x: {"personalized": x}, logits, y, 8)["personalized"]
    assert score.total == n
    assert score.correct == int((logits.argmax(-1) == y).sum())
    assert score.loss == pytest.approx(float(torch.nn.functional.cross_entropy(logits, y)))


def test_a_run_whose_test_splits_end_in_a_one_sample_batch_scores_every_sample(tmp_path):
    data = tiny_data()  # 15 local test samples per client = 7 batches of 2 + 1
    trainer = tiny_trainer(tmp_path, rounds=1, eval_batch_size=2, verbose=False)
    trainer.fit(make_client(FedAvg), data)
    totals = {i: s["personalized"].total for i, s in trainer.last_client_scores.items()}
    assert totals == {i: len(data.client_test(i)[1]) for i in range(data.num_clients)}
    assert set(totals.values()) == {15}


@pytest.mark.parametrize("world_size", [2, 3])
def test_batches_shared_across_processes_and_gathered_score_as_one_process(world_size):
    """The global model's evaluation: each rank computes every world_size-th batch
    (Distributed.share), the ranks' outputs are merged by batch number, and the score is the
    one-process score exactly; a missing share changes it."""
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(45, 4, generator=generator)  # 6 batches of 8, the last of 5
    y = torch.randint(0, 4, (45,), generator=generator)
    count = batch_count(len(y), 8)
    assert count == 6
    shares = [range(rank, count, world_size) for rank in range(world_size)]
    merged: dict = {}
    for share in shares:
        merged.update(batch_outputs(lambda x: {"global": x * 2}, logits, 8, share))
    one = score_outputs(lambda x: {"global": x * 2}, logits, y, 8)["global"]
    shared = score_batches(dict(sorted(merged.items())), y, 8)["global"]
    assert (shared.correct, shared.loss_sum, shared.class_counts, shared.auc) == (
        one.correct, one.loss_sum, one.class_counts, one.auc)
    with pytest.raises(KeyError):
        score_batches(batch_outputs(lambda x: {"global": x}, logits, 8, shares[0]), y, 8)


def test_stacked_outputs_cut_each_client_as_its_own_batches_and_drop_the_padding():
    weights = torch.tensor([1.0, -2.0, 3.0])  # client k's "model" multiplies by weights[k]
    xs = [torch.randn(n, 4) for n in (11, 0, 5)]
    seen = []

    def outputs(inputs):
        seen.append(tuple(inputs.shape))
        return {"personalized": inputs * weights[:, None, None]}

    stacked = stacked_batch_outputs(outputs, xs, 4)
    assert seen == [(3, 4, 4), (3, 4, 4), (3, 3, 4)]  # 11 rows: batches of 4, 4, 3
    for k, x in enumerate(xs):
        alone = batch_outputs(lambda xb, k=k: {"personalized": xb * weights[k]}, x, 4)
        assert stacked[k].keys() == alone.keys()
        for number, named in alone.items():
            torch.testing.assert_close(stacked[k][number]["personalized"], named["personalized"])
    assert stacked[1][0]["personalized"].shape == (0, 4)  # as torch.split cuts an empty split
