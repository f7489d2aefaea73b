"""Trainer options of the papers' protocols: training-batch augmentation in the runtime, the
cap on local steps, the random join ratio, per-client scores of every evaluated round and the
reporting window of the summary (tiny synthetic runs)."""

from __future__ import annotations

import csv
import json
import statistics

import pytest
import torch
from lightning.fabric import Fabric

from fedlight.analysis.report import read_run, results_table
from fedlight.clients import FedAvg, FedRep
from fedlight.core.client import Phase
from fedlight.core.errors import ConfigError
from fedlight.core.messages import Score, TrainTask
from fedlight.core.seeding import mean_join_ratio, participant_count, sample_clients
from fedlight.data import FederatedDataModule, batches_per_epoch, iterate_batches
from fedlight.data.partitions.domains import Domains
from fedlight.data.sources.mnist5k import MNIST5k
from fedlight.federation.outputs.folder import CLIENT_ROUNDS
from fedlight.federation.outputs.writer import client_score_rows
from fedlight.federation.training_loop import TrainingLoop
from tests.conftest import make_client, tiny_data, tiny_trainer

AUGMENT = {"hflip": True, "crop_padding": 2}


def fit(root, name, data=None, client=None, **options):
    trainer = tiny_trainer(root, run_name=name, verbose=False, **options)
    trainer.fit(client or make_client(FedAvg), data or tiny_data())
    return trainer


def results(trainer):
    """The run's metrics without its timings, and every client's final state."""
    rows = [{k: v for k, v in row.items() if k != "seconds"} for row in trainer.history]
    return rows, {k: v.clone() for k, v in trainer.global_state.items()}


def same_results(first, second) -> bool:
    (rows_a, state_a), (rows_b, state_b) = first, second
    return rows_a == rows_b and all(torch.equal(state_a[k], state_b[k]) for k in state_a)


# ----------------------------------------------------------------- augmentation
def test_augmentation_changes_the_run_and_the_same_seed_repeats_it(tmp_path):
    plain = results(fit(tmp_path, "plain"))
    augmented = results(fit(tmp_path, "aug", tiny_data(augment=AUGMENT)))
    again = results(fit(tmp_path, "again", tiny_data(augment=AUGMENT)))
    assert not same_results(plain, augmented)
    assert same_results(augmented, again)


def test_an_augmented_run_resumes_exactly(tmp_path):
    straight = results(fit(tmp_path, "straight", tiny_data(augment=AUGMENT), rounds=3))
    fit(tmp_path, "resumed", tiny_data(augment=AUGMENT), rounds=2)
    resumed = tiny_trainer(tmp_path, run_name="resumed", rounds=3, verbose=False)
    resumed.fit(make_client(FedAvg), tiny_data(augment=AUGMENT), ckpt_path="last")
    assert same_results(straight, results(resumed))


def drawn(trainer, client_id, round_idx):
    """The first training batch the runtime draws for a client in a round."""
    runtime = trainer.run.runtime
    shared, message = trainer.server.download(client_id)
    generator = runtime.start(TrainTask(client_id, round_idx, shared, message))
    return next(iter(runtime.batches(client_id, generator)))


def test_batches_are_augmented_on_their_device_per_client_and_round(tmp_path):
    trainer = fit(tmp_path, "aug", tiny_data(augment=AUGMENT), rounds=1)
    population = trainer.run.population
    x, y = drawn(trainer, 0, 1)
    assert x.device == population.train_data[0][0].device
    assert torch.equal(x, drawn(trainer, 0, 1)[0])  # a function of (seed, round, client)
    population.augmentation = None
    unaugmented, same_labels = drawn(trainer, 0, 1)
    assert torch.equal(y, same_labels) and not torch.equal(x, unaugmented)
    # the draws differ across rounds and clients: one probe image set augmented with the
    # generator each (client, round) augments its first batch with
    augmentation, probe = trainer.datamodule.augmentation, torch.randn(16, 1, 8, 8)
    probes = []

    def recording(x, generator):
        copy = torch.Generator().set_state(generator.get_state())
        probes.append(augmentation(probe, copy))
        return augmentation(x, generator)

    population.augmentation = recording
    for client_id, round_idx in ((0, 1), (0, 2), (1, 1), (0, 1)):
        drawn(trainer, client_id, round_idx)
    assert torch.equal(probes[0], probes[3])
    assert not torch.equal(probes[0], probes[1]) and not torch.equal(probes[0], probes[2])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_augmented_batches_stay_on_the_gpu(tmp_path):
    trainer = fit(tmp_path, "gpu", tiny_data(augment=AUGMENT), rounds=1, accelerator="cuda",
                  devices=1)
    x, _ = drawn(trainer, 0, 1)
    assert x.is_cuda


def test_evaluation_never_augments(tmp_path):
    trainer = fit(tmp_path, "aug", tiny_data(augment=AUGMENT), rounds=1)
    calls = []
    augmentation = trainer.run.population.augmentation
    trainer.run.population.augmentation = lambda x, g: calls.append(1) or augmentation(x, g)
    trainer.run.runtime.score(0, 1, trainer.global_state)
    assert calls == []
    drawn(trainer, 0, 1)
    assert calls == [1]


# ----------------------------------------------------------------- step cap
class Counting(FedAvg):
    """FedAvg that counts its optimizer steps per phase."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.steps: dict[str, int] = {}

    def on_before_optimizer_step(self, optimizer):
        self.steps[self.phase] = self.steps.get(self.phase, 0) + 1


def batches(count=5):
    generator = torch.Generator().manual_seed(0)
    return [(torch.randn(8, 1, 8, 8, generator=generator),
             torch.randint(0, 4, (8,), generator=generator)) for _ in range(count)]


@pytest.mark.parametrize("cap, expected", [(None, {"a": 5, "b": 10}), (7, {"a": 5, "b": 2}),
                                           (3, {"a": 3})])
def test_max_local_steps_caps_the_steps_across_phases(cap, expected):
    client = make_client(Counting)
    data = batches()
    loop = TrainingLoop(Fabric(accelerator="cpu", devices=1), batch_size=8, max_local_steps=cap)
    result = loop.fit(client, lambda: iter(data), [Phase("a", 1), Phase("b", 2)], 1)
    assert client.steps == expected and result.steps == sum(expected.values())


def test_a_phase_limit_still_applies_under_the_cap():
    client = make_client(Counting)
    data = batches()
    loop = TrainingLoop(Fabric(accelerator="cpu", devices=1), batch_size=8, max_local_steps=8)
    loop.fit(client, lambda: iter(data), [Phase("a", 2, max_steps=4), Phase("b", 2)], 1)
    assert client.steps == {"a": 4, "b": 4}


def test_trainer_max_local_steps_stops_every_client_at_n_steps(tmp_path):
    client = make_client(Counting)
    # 45 training samples per client at batch 16: 3 steps an epoch, 6 in two epochs
    fit(tmp_path, "capped", client=client, rounds=1, local_epochs=2, max_local_steps=4)
    assert client.steps == {"train": 4 * 4}  # 4 clients, 4 steps each
    client = make_client(Counting)
    fit(tmp_path, "uncapped", client=client, rounds=1, local_epochs=2)
    assert client.steps == {"train": 4 * 6}


def test_a_run_cannot_resume_under_another_step_cap(tmp_path):
    fit(tmp_path, "r", rounds=1, max_local_steps=2)
    resumed = tiny_trainer(tmp_path, rounds=2, run_name="r", max_local_steps=3)
    with pytest.raises(ValueError, match="max_local_steps: 2 -> 3"):
        resumed.fit(make_client(FedAvg), tiny_data(), ckpt_path="last")


def test_the_new_options_are_recorded_only_away_from_their_defaults(tmp_path):
    plain = fit(tmp_path, "plain", rounds=1)
    trainer = plain.run.hyperparameters(plain)["trainer"]
    assert "max_local_steps" not in trainer and "random_join_ratio" not in trainer
    capped = fit(tmp_path, "capped", rounds=1, max_local_steps=2, random_join_ratio=True)
    trainer = capped.run.hyperparameters(capped)["trainer"]
    assert trainer["max_local_steps"] == 2 and trainer["random_join_ratio"] is True


def test_batched_clients_stop_at_the_same_cap_as_the_loop(tmp_path):
    # FedRep: a head epoch (3 steps), then two body epochs (6 steps): the cap ends the body
    # phase after its first step
    batched_equals_loop_and_differs_without(tmp_path, max_local_steps=4)


def batched_equals_loop_and_differs_without(tmp_path, **options):
    """FedRep (one head epoch), one round of two local epochs under ``options``: batched
    clients end where the loop ends, and the same run without ``options`` ends elsewhere."""
    def run(name, **more):
        return fit(tmp_path, name, client=make_client(FedRep, head_epochs=1), rounds=1,
                   local_epochs=2, **more)

    batched = run("batched", batched_clients=2, **options)
    looped = run("looped", batched_clients=1, **options)
    for key, value in looped.global_state.items():
        assert torch.allclose(batched.global_state[key], value, atol=1e-5), key
    plain = run("plain", batched_clients=2)
    assert any(not torch.allclose(plain.global_state[k], v, atol=1e-5)
               for k, v in looped.global_state.items())


# ----------------------------------------------------------------- drop_last
@pytest.mark.parametrize("samples, drop_last, sizes", [
    (25, False, [10, 10, 5]), (25, True, [10, 10]), (21, False, [10, 10]),  # a 1-sample tail
    (20, True, [10, 10]), (7, True, [7]), (7, False, [7]), (1, True, [1])])
def test_drop_last_drops_a_partial_tail_but_never_the_only_batch(samples, drop_last, sizes):
    x, y = torch.zeros(samples, 2), torch.arange(samples)
    drawn = list(iterate_batches(x, y, 10, torch.Generator().manual_seed(0),
                                 drop_last=drop_last))
    assert [len(b) for _, b in drawn] == sizes
    assert batches_per_epoch(samples, 10, drop_last) == len(sizes)
    assert sorted(torch.cat([b for _, b in drawn]).tolist()) == sorted(
        torch.cat([b for _, b in drawn]).unique().tolist())  # no sample twice


def test_trainer_drop_last_trains_only_whole_batches(tmp_path):
    # 45 training samples per client at batch 16: 2 whole batches and a tail of 13
    client = make_client(Counting)
    fit(tmp_path, "dropped", client=client, rounds=1, local_epochs=2, drop_last=True)
    assert client.steps == {"train": 4 * 4}  # 4 clients, 2 steps an epoch
    client = make_client(Counting)
    fit(tmp_path, "kept", client=client, rounds=1, local_epochs=2)
    assert client.steps == {"train": 4 * 6}


def test_batched_clients_drop_the_same_batches_as_the_loop(tmp_path):
    batched_equals_loop_and_differs_without(tmp_path, drop_last=True)


def test_a_run_cannot_resume_with_another_drop_last(tmp_path):
    fit(tmp_path, "r", rounds=1, drop_last=True)
    resumed = tiny_trainer(tmp_path, rounds=2, run_name="r")
    with pytest.raises(ValueError, match="trainer.drop_last: True -> "):
        resumed.fit(make_client(FedAvg), tiny_data(), ckpt_path="last")


def test_drop_last_must_be_a_boolean(tmp_path):
    with pytest.raises(ConfigError, match="trainer.drop_last must be true or false, got 'yes'"):
        tiny_trainer(tmp_path, drop_last="yes")


# ----------------------------------------------------------------- random join ratio
def test_random_join_ratio_draws_within_its_range_and_differs_across_rounds():
    counts = [participant_count(50, 0.5, 3, r, random_join_ratio=True) for r in range(200)]
    assert min(counts) >= 25 and max(counts) <= 50 and len(set(counts)) > 10
    assert counts == [participant_count(50, 0.5, 3, r, True) for r in range(200)]
    assert counts != [participant_count(50, 0.5, 4, r, True) for r in range(200)]
    assert abs(statistics.mean(counts) - 37.5) < 2
    low = [participant_count(50, 0.1, 3, r, True) for r in range(200)]
    assert min(low) >= 5 and min(low) < 25  # [0.1, 1] reaches below the [0.5, 1] range
    assert [len(sample_clients(50, 0.5, 3, r, True)) for r in range(200)] == counts
    assert participant_count(50, 0.5, 3, 0) == 25  # off: the fixed share
    assert mean_join_ratio(50, 0.5, True) == 0.75 and mean_join_ratio(50, 0.5) == 0.5


def test_a_random_join_ratio_run_varies_its_participants_and_resumes_exactly(tmp_path):
    options = dict(join_ratio=0.25, random_join_ratio=True, seed=1)
    data = tiny_data(num_clients=8)
    straight = fit(tmp_path, "straight", data, rounds=6, **options)
    counts = {len(sample_clients(8, 0.25, 1, r, True)) for r in range(6)}
    assert len(counts) > 1 and min(counts) >= 2
    assert straight.client.context.join_ratio == mean_join_ratio(8, 0.25, True)
    fit(tmp_path, "resumed", tiny_data(num_clients=8), rounds=3, **options)
    resumed = tiny_trainer(tmp_path, run_name="resumed", rounds=6, verbose=False, **options)
    resumed.fit(make_client(FedAvg), tiny_data(num_clients=8), ckpt_path="last")
    assert same_results(results(straight), results(resumed))
    bytes_down = [row["bytes_down"] for row in straight.history]
    assert len(set(bytes_down)) > 1  # the rounds' participants differ in number


# ----------------------------------------------------------------- per-client scores
def read_csv(path):
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_per_client_scores_write_one_row_per_client_and_evaluated_round(tmp_path):
    trainer = fit(tmp_path, "r", rounds=4, eval_every=2, per_client_scores=True)
    rows = read_csv(tmp_path / "r" / CLIENT_ROUNDS)
    assert [(r["round"], r["client"]) for r in rows] == [
        (str(n), str(c)) for n in (2, 4) for c in range(4)]
    last = {int(r["client"]): float(r["personalized_accuracy"]) for r in rows if r["round"] == "4"}
    per_client = json.loads((tmp_path / "r" / "per_client.json").read_text())
    assert last == {r["client"]: r["personalized_accuracy"] for r in per_client}
    assert statistics.mean(last.values()) == pytest.approx(
        trainer.history[-1]["personalized_accuracy_mean"])
    assert list(rows[0])[:2] == ["round", "client"] and "client_name" not in rows[0]
    assert {"personalized_loss", "personalized_auc", "personalized_macro_f1",
            "personalized_samples"} <= set(rows[0])
    fit(tmp_path, "off", rounds=1)
    assert not (tmp_path / "off" / CLIENT_ROUNDS).exists()


def test_rows_name_each_clients_domain_where_the_data_has_one():
    scores = {1: {"personalized": Score(3, 4, 1.0)}, 0: {"personalized": Score(1, 4, 2.0),
                                                         "global_head": Score(2, 4, 1.0)}}
    rows = client_score_rows(7, scores, ["mnist", None])
    assert [(r["round"], r["client"], r["client_name"]) for r in rows] == [
        (7, 0, "mnist"), (7, 1, None)]
    assert rows[0]["global_head_accuracy"] == 0.5 and rows[1]["personalized_accuracy"] == 0.75
    assert rows[0]["personalized_samples"] == 4 and rows[0]["personalized_loss"] == 0.5


def test_the_data_module_names_each_domain_client():
    data = FederatedDataModule(source=MNIST5k(domain_transforms=["identity", "invert"]),
                               partition=Domains(), num_clients=2)
    data.setup()
    assert data.client_names() == ["identity", "invert"]
    plain = tiny_data()
    plain.setup()
    assert plain.client_names() is None


def test_per_client_rows_are_not_repeated_after_a_resume(tmp_path):
    straight = tmp_path / "straight" / CLIENT_ROUNDS
    fit(tmp_path, "straight", rounds=4, per_client_scores=True)
    fit(tmp_path, "resumed", rounds=2, per_client_scores=True)
    written = tmp_path / "resumed" / CLIENT_ROUNDS
    # what a run killed during round 3, after its checkpoint of round 2, leaves: round 3's
    # rows and a line cut short
    round3 = [line for line in straight.read_text().splitlines() if line.startswith("3,")]
    written.write_text(written.read_text() + "\n".join(round3) + "\n3,1,0.2")
    resumed = tiny_trainer(tmp_path, run_name="resumed", rounds=4, per_client_scores=True,
                           verbose=False)
    resumed.fit(make_client(FedAvg), tiny_data(), ckpt_path="last")
    assert written.read_text() == straight.read_text()


def test_per_client_rows_are_the_same_with_two_processes(tmp_path):
    threads = torch.get_num_threads()
    fit(tmp_path, "one", rounds=2, per_client_scores=True, threads=1)
    fit(tmp_path, "two", rounds=2, per_client_scores=True, threads=1, devices=2,
        strategy="ddp_fork")
    torch.set_num_threads(threads)
    assert (tmp_path / "one" / CLIENT_ROUNDS).read_text() == (
        tmp_path / "two" / CLIENT_ROUNDS).read_text()


# ----------------------------------------------------------------- reporting window
def test_report_last_sets_the_summary_window_and_its_titles(tmp_path, capsys):
    trainer = tiny_trainer(tmp_path, run_name="r", rounds=5, report_last=3)
    summary = trainer.fit(make_client(FedAvg), tiny_data())
    accuracies = [row["personalized_accuracy"] for row in trainer.history]
    assert summary["report_last"] == 3
    assert summary["mean_last_personalized_accuracy"] == pytest.approx(
        statistics.mean(accuracies[-3:]))
    assert summary["mean_last_personalized_accuracy"] != pytest.approx(
        statistics.mean(accuracies))
    assert "personalized_accuracy, mean of the last 3 evaluations" in capsys.readouterr().out
    saved = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert saved["report_last"] == 3
    table = results_table([read_run(tmp_path / "r")])
    assert "| mean last-3 personalized |" in table


def test_a_report_of_runs_with_other_windows_names_both():
    runs = [read_run_stub(3), read_run_stub(None)]
    assert "mean last-3/10 personalized" in results_table(runs)


def read_run_stub(window):
    from pathlib import Path

    from fedlight.analysis.report import RunRecord

    summary = {"mean_last_personalized_accuracy": 0.5, "rounds": 2}
    if window is not None:
        summary["report_last"] = window
    return RunRecord(Path("x"), "FedAvg", "s", 0, summary, [])
