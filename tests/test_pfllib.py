import json

import numpy as np
import pytest
import torch

from fedlight.cli import main
from fedlight.data import FederatedDataModule
from fedlight.data.partitions import as_partition
from fedlight.data.partitions.dirichlet import Dirichlet
from fedlight.data.partitions.from_file import FromFile
from fedlight.data.sources.pfllib import PFLlib, export_pfllib
from tests.conftest import tiny_data


def write_pfllib_folder(folder, sizes=((12, 4), (8, 3), (10, 5)), shape=(1, 8, 8), classes=4):
    """A PFLlib dataset folder as its generators write it."""
    rng = np.random.default_rng(0)
    written = []
    for split in ("train", "test"):
        (folder / split).mkdir(parents=True, exist_ok=True)
    for client_id, (n_train, n_test) in enumerate(sizes):
        arrays = {}
        for split, n in (("train", n_train), ("test", n_test)):
            x = rng.normal(size=(n, *shape)).astype(np.float32)
            y = rng.integers(0, classes, size=n)
            with open(folder / split / f"{client_id}.npz", "wb") as handle:
                np.savez_compressed(handle, data={"x": x, "y": y})
            arrays[split] = (x, y)
        written.append(arrays)
    (folder / "config.json").write_text(json.dumps(
        {"num_clients": len(sizes), "num_classes": classes, "non_iid": True}))
    return written


def test_pfllib_folder_is_read_with_its_own_clients(tmp_path):
    written = write_pfllib_folder(tmp_path)
    data = FederatedDataModule(source=PFLlib(root=str(tmp_path)), num_clients=3)
    data.setup()
    assert data.num_clients == 3 and data.num_classes == 4 and data.input_shape == (1, 8, 8)
    for client_id, arrays in enumerate(written):
        for split, getter in (("train", data.client_train), ("test", data.client_test)):
            x, y = getter(client_id)
            assert torch.equal(x, torch.from_numpy(arrays[split][0]))
            assert torch.equal(y, torch.from_numpy(arrays[split][1]))
    assert len(data.global_test()[1]) == 4 + 3 + 5  # the union of the clients' test splits


def test_export_then_read_round_trips_every_client(tmp_path):
    original = tiny_data(num_clients=3, partition=Dirichlet(beta=0.5, min_client_size=5))
    export_pfllib(original, tmp_path / "exported")
    again = FederatedDataModule(source=PFLlib(root=str(tmp_path / "exported")), num_clients=3)
    for client_id in range(3):
        for getter in ("client_train", "client_test"):
            for a, b in zip(getattr(original, getter)(client_id), getattr(again, getter)(client_id),
                            strict=True):
                assert torch.equal(a, b)
    config = json.loads((tmp_path / "exported" / "config.json").read_text())
    assert config["num_clients"] == 3 and config["num_classes"] == 4


def test_missing_client_file_is_named(tmp_path):
    write_pfllib_folder(tmp_path)
    (tmp_path / "test" / "1.npz").unlink()
    with pytest.raises(FileNotFoundError, match="test/1.npz"):
        FederatedDataModule(source=PFLlib(root=str(tmp_path))).setup()


def test_mismatched_lengths_are_named(tmp_path):
    write_pfllib_folder(tmp_path)
    with open(tmp_path / "train" / "0.npz", "wb") as handle:
        np.savez_compressed(handle, data={"x": np.zeros((5, 1, 8, 8)), "y": np.zeros(4)})
    with pytest.raises(ValueError, match="x has 5 samples but y has 4"):
        FederatedDataModule(source=PFLlib(root=str(tmp_path))).setup()


def test_missing_config_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        FederatedDataModule(source=PFLlib(root=str(tmp_path))).setup()


@pytest.mark.parametrize("clients, message", [
    ([{"train": [0, 1], "test": [2]}, {"train": [2, 3], "test": []}], "sample 2 is in client 0"),
    ([{"train": [0, 1000], "test": []}], "index 1000 is out of range"),
    ([{"train": [0, 1]}, {"train": [], "test": [5]}], "client 1 has no training sample"),
])
def test_bad_partition_files_are_rejected(tmp_path, clients, message):
    path = tmp_path / "split.json"
    path.write_text(json.dumps({"clients": clients}))
    with pytest.raises(ValueError, match=message):
        tiny_data(partition=FromFile(str(path))).setup()


def test_partition_file_reproduces_a_run_split(tmp_path):
    original = tiny_data(num_clients=3, partition="pathological")
    original.save_partition(tmp_path)
    copy = tiny_data(partition=FromFile(str(tmp_path / "partition.json")))
    copy.setup()
    assert copy.num_clients == 3
    for client_id in range(3):
        assert torch.equal(copy.client_train(client_id)[1], original.client_train(client_id)[1])


def test_unknown_partition_lists_from_file_too():
    with pytest.raises(ValueError, match="'Pathologic'; valid: .*FromFile"):
        as_partition({"class_path": "Pathologic"})


def test_fit_on_a_pfllib_folder_and_export_a_run(tmp_path):
    write_pfllib_folder(tmp_path / "pfl", sizes=((20, 6), (16, 6)), shape=(1, 28, 28), classes=10)
    config = "configs/fedavg/mnist5k_dirichlet.yaml"
    main(["fit", "-c", config, "--data.source", "PFLlib", "--data.source.root",
          str(tmp_path / "pfl"),
          "--trainer.rounds", "1", "--trainer.progress_bar", "false",
          "--trainer.default_root_dir", str(tmp_path / "runs")])
    run = next((tmp_path / "runs").iterdir())
    split = json.loads((run / "partition.json").read_text())
    assert [len(c["train"]) for c in split["clients"]] == [20, 16]
    main(["export-partition", str(run), str(tmp_path / "back")])
    for split_name in ("train", "test"):
        for client_id in range(2):
            with np.load(tmp_path / "back" / split_name / f"{client_id}.npz",
                         allow_pickle=True) as a, np.load(
                    tmp_path / "pfl" / split_name / f"{client_id}.npz", allow_pickle=True) as b:
                assert np.array_equal(a["data"].tolist()["x"], b["data"].tolist()["x"])
