import csv
import json

import pytest
import torch
import torch.nn.functional as F

from fedlight.clients import FedAvg, FederatedClient, Local
from fedlight.core.seeding import derive_seed, sample_clients
from fedlight.data.datamodule import iterate_batches
from tests.conftest import tiny_data, tiny_trainer


def make_client(cls=FedAvg, **kwargs):
    torch.manual_seed(0)
    return cls(**{"backbone": "mlp", "num_classes": 4, "input_shape": (1, 8, 8), "lr": 0.1,
                  **kwargs})


def read_metrics(run_dir):
    with open(run_dir / "metrics.csv") as handle:
        return list(csv.DictReader(handle))


def test_one_client_fedavg_equals_centralized_training_on_the_same_batches(tmp_path):
    data = tiny_data(num_clients=1)
    client = make_client()
    reference = make_client()
    trainer = tiny_trainer(tmp_path, rounds=1, batch_size=16)
    trainer.fit(client, data)

    x, y = data.client_train(0)
    seed = derive_seed(0, 0, 0)
    torch.manual_seed(seed)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for xb, yb in iterate_batches(x, y, 16, torch.Generator().manual_seed(seed)):
        loss = F.cross_entropy(reference(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    for key, value in reference.state_dict().items():
        assert torch.equal(trainer.global_state[key], value), key


def test_run_folder_holds_the_documented_files_and_columns(tmp_path):
    trainer = tiny_trainer(tmp_path, rounds=3, run_name="demo")
    summary = trainer.fit(make_client(), tiny_data())
    run = tmp_path / "demo"
    for name in ("config.yaml", "partition.json", "partition_stats.json", "partition.png",
                 "metrics.csv", "summary.json", "accuracy.png", "checkpoints/last.ckpt"):
        assert (run / name).is_file(), name
    rows = read_metrics(run)
    assert [int(r["round"]) for r in rows] == [1, 2, 3]
    for column in ("round", "global_accuracy", "personalized_accuracy",
                   "personalized_accuracy_std", "train_loss", "seconds"):
        assert column in rows[0]
    saved = json.loads((run / "summary.json").read_text())
    assert saved["rounds"] == 3
    assert 0 <= saved["best_personalized_accuracy"] <= 1
    assert saved["best_personalized_accuracy"] >= saved["last_personalized_accuracy"]
    assert summary["best_global_accuracy"] == saved["best_global_accuracy"]
    partition = json.loads((run / "partition.json").read_text())
    assert len(partition["clients"]) == 4 and set(partition["clients"][0]) == {"train", "test"}


def test_second_run_with_the_same_name_gets_a_new_folder(tmp_path):
    tiny_trainer(tmp_path, rounds=1, run_name="demo").fit(make_client(), tiny_data())
    tiny_trainer(tmp_path, rounds=1, run_name="demo").fit(make_client(), tiny_data())
    assert (tmp_path / "demo").is_dir() and (tmp_path / "demo-v2").is_dir()


def test_training_improves_accuracy(tmp_path):
    summary = tiny_trainer(tmp_path, rounds=6).fit(make_client(), tiny_data())
    rows = read_metrics(tmp_path / summary["run_dir"].split("/")[-1])
    assert float(rows[-1]["train_loss"]) < float(rows[0]["train_loss"])
    assert summary["last_personalized_accuracy"] > 0.5  # 4 classes: chance is 0.25


def test_local_has_no_global_model_and_sends_nothing(tmp_path):
    summary = tiny_trainer(tmp_path, rounds=2).fit(make_client(Local), tiny_data())
    assert summary["best_global_accuracy"] is None and summary["last_global_accuracy"] is None
    assert summary["bytes_up"] == 0


def test_same_seed_same_metrics_and_other_seed_other_metrics(tmp_path):
    def run(seed, name):
        trainer = tiny_trainer(tmp_path, rounds=2, seed=seed, run_name=name, join_ratio=0.5)
        trainer.fit(make_client(), tiny_data())
        return [r["personalized_accuracy"] + r["train_loss"] for r in read_metrics(tmp_path / name)]

    assert run(0, "a") == run(0, "b")
    assert run(0, "a") != run(1, "c")


def test_resumed_run_equals_uninterrupted_run(tmp_path):
    full = tiny_trainer(tmp_path, rounds=4, join_ratio=0.5, run_name="full")
    full.fit(make_client(extra_private=["model.head.*"]), tiny_data())

    first = tiny_trainer(tmp_path, rounds=2, join_ratio=0.5, run_name="resumed")
    first.fit(make_client(extra_private=["model.head.*"]), tiny_data())
    second = tiny_trainer(tmp_path, rounds=4, join_ratio=0.5, run_name="resumed")
    second.fit(make_client(extra_private=["model.head.*"]), tiny_data(), ckpt_path="last")

    full_rows, resumed_rows = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "resumed")
    for row in full_rows + resumed_rows:
        row.pop("seconds")  # wall time is the only column allowed to differ
    assert resumed_rows == full_rows
    for key, value in full.global_state.items():
        assert torch.equal(second.global_state[key], value)
    for client_id, state in full.client_states.items():
        for key, value in state.items():
            assert torch.equal(second.client_states[client_id][key], value)


def test_client_sampling_is_seeded_and_respects_the_join_ratio():
    rounds = [sample_clients(20, 0.25, 7, r) for r in range(5)]
    assert all(len(r) == 5 and len(set(r)) == 5 for r in rounds)
    assert rounds == [sample_clients(20, 0.25, 7, r) for r in range(5)]
    assert rounds != [sample_clients(20, 0.25, 8, r) for r in range(5)]
    assert sample_clients(20, 1.0, 0, 3) == list(range(20))


class Exploding(FederatedClient):
    def training_step(self, batch, batch_idx):
        return super().training_step(batch, batch_idx) * float("nan")


def test_non_finite_loss_stops_and_leaves_no_run_folder(tmp_path):
    with pytest.raises(FloatingPointError, match="non-finite training loss for client 0"):
        tiny_trainer(tmp_path, rounds=2, run_name="boom").fit(make_client(Exploding), tiny_data())
    assert not (tmp_path / "boom").exists()


def test_bad_trainer_arguments_are_named(tmp_path):
    with pytest.raises(ValueError, match="join_ratio.*1.5"):
        tiny_trainer(tmp_path, join_ratio=1.5)
    with pytest.raises(ValueError, match="rounds must be at least 1, got 0"):
        tiny_trainer(tmp_path, rounds=0)
    with pytest.raises(ValueError, match="'median'"):
        tiny_trainer(tmp_path, weighting="median")
    with pytest.raises(ValueError, match="'mlflow'.*csv, tensorboard, wandb"):
        tiny_trainer(tmp_path, logger="mlflow")


def test_class_count_mismatch_is_caught_before_any_file_is_written(tmp_path):
    client = FedAvg(backbone="mlp", num_classes=7, input_shape=(1, 8, 8))
    with pytest.raises(ValueError, match="7 classes"):
        tiny_trainer(tmp_path, run_name="x").fit(client, tiny_data())
    assert not (tmp_path / "x").exists()


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no run named 'nothing'"):
        tiny_trainer(tmp_path, run_name="nothing").fit(make_client(), tiny_data(),
                                                        ckpt_path="last")


def test_quiet_trainer_prints_nothing_but_writes_the_run(tmp_path, capsys):
    tiny_trainer(tmp_path, rounds=1, run_name="quiet", verbose=False).fit(make_client(),
                                                                            tiny_data())
    assert capsys.readouterr().out == ""
    assert (tmp_path / "quiet" / "summary.json").is_file()
    tiny_trainer(tmp_path, rounds=1, run_name="loud").fit(make_client(), tiny_data())
    assert "fedlight summary" in capsys.readouterr().out
