"""The text, character-sequence and sensor-signal sources on tiny files in their publishers'
formats (tests/text_fixtures.py): what they load, their one-line errors, and the data module
and DLG probe around them."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedlight.cli import main
from fedlight.core.errors import DownloadError, FedlightError
from fedlight.data import FederatedDataModule
from fedlight.data.partitions.dirichlet import Dirichlet
from fedlight.data.partitions.iid import IID
from fedlight.data.partitions.natural import Natural
from fedlight.data.sources import SOURCES
from fedlight.data.sources.agnews import (
    MAX_TOKENS,
    URLS,
    AGNews,
    build_vocabulary,
    encode,
    tokenize,
)
from fedlight.data.sources.amazon_review import DRIVE_ID, AmazonReview
from fedlight.data.sources.digits import Digits
from fedlight.data.sources.files import DataFormatError
from fedlight.data.sources.har import HAR, SIGNALS
from fedlight.data.sources.har import URL as HAR_URL
from fedlight.data.sources.pfllib import PFLlib
from fedlight.data.sources.shakespeare import LEAF_LETTERS, Shakespeare
from fedlight.privacy import DLGProbe
from fedlight.privacy.dlg import check_image_inputs
from tests.text_fixtures import write_agnews, write_amazon, write_har, write_shakespeare


def _rewrite_line(path: Path, number: int, text: str) -> None:
    lines = path.read_text().splitlines()
    lines[number - 1] = text
    path.write_text("\n".join(lines) + "\n")


# ===================================================================== AG News
def test_tokenizer_follows_basic_english_rules():
    text = 'Oil\'s "Price" (AP): up 5.2%; rises!<br />Why? Sales, too'
    assert tokenize(text) == ["oil", "'", "s", "price", "(", "ap", ")", "up", "5", ".", "2%",
                              "rises", "!", "why", "?", "sales", ",", "too"]


def test_vocabulary_is_padding_then_frequency_then_code_points_whatever_the_order():
    docs = [["b", "a", "c"], ["a", "d"], ["c", "a"]]
    vocab = build_vocabulary(docs)
    assert vocab == ["<pad>", "a", "c", "b", "d"]
    assert build_vocabulary(docs[::-1]) == vocab
    ids = encode([["a", "d"], ["c"] * 300], vocab)
    assert ids.dtype == np.int64 and ids.shape == (2, MAX_TOKENS)
    assert ids[0, :3].tolist() == [1, 4, 0] and (ids[1] == 2).all()  # padded, truncated


def test_agnews_loads_token_ids_labels_and_vocabulary(tmp_path):
    root = write_agnews(tmp_path / "ag")
    data = AGNews(root=root).load()
    assert data.x_train.dtype == torch.int64 and data.x_train.shape == (48, MAX_TOKENS)
    assert data.x_test.shape == (12, MAX_TOKENS) and data.num_classes == 4
    with open(root / "train.csv", newline="") as handle:
        first = next(csv.reader(handle))
    assert data.y_train[0] == int(first[0]) - 1
    expected = [data.vocab.index(t) for t in tokenize(f"{first[1]} {first[2]}")]
    assert data.x_train[0, :len(expected)].tolist() == expected
    assert data.x_train[0, len(expected):].eq(0).all() and data.vocab[0] == "<pad>"


@pytest.mark.parametrize(("line", "message"), [
    ('"2","only a title"', r"train\.csv:3: expected 3 fields .* got 2"),
    ('"7","t","d"', r"train\.csv:3: class index '7' is invalid; valid: 1-4"),
    ('"2","t","unterminated', r"train\.csv:3: malformed CSV"),
])
def test_agnews_malformed_line_is_a_one_line_error_and_nothing_is_written(tmp_path, capsys,
                                                                           line, message):
    root = write_agnews(tmp_path / "ag")
    _rewrite_line(root / "train.csv", 3, line)
    with pytest.raises(DataFormatError, match=message) as caught:
        AGNews(root=root).load()
    assert "\n" not in str(caught.value)
    runs = tmp_path / "runs"
    with pytest.raises(SystemExit):
        main(["fit", "--model", "FedAvg", "--data.source", "AGNews", "--data.source.root",
              str(root),
              "--trainer.default_root_dir", str(runs), "--trainer.progress_bar", "false"])
    assert re.search(message, capsys.readouterr().err.splitlines()[0])
    assert not runs.exists() or not any(runs.iterdir())


def test_agnews_download_fetches_the_two_csv_files(tmp_path, monkeypatch):
    fixture = write_agnews(tmp_path / "published")
    fetched = []

    def fake_download(url, folder, filename):
        fetched.append(url)
        (Path(folder) / filename).write_bytes((fixture / filename).read_bytes())

    monkeypatch.setattr("torchvision.datasets.utils.download_url", fake_download)
    data = AGNews(root=tmp_path / "fresh", download=True).load()
    assert sorted(fetched) == sorted(URLS.values()) and len(data.y_train) == 48


def test_har_and_amazon_review_downloads_fetch_their_archives(tmp_path, monkeypatch):
    fetched = []

    def fake_archive(url, folder, filename):
        fetched.append((url, filename))
        write_har(Path(folder))

    def fake_drive(file_id, folder, filename):
        fetched.append((file_id, filename))
        write_amazon(Path(folder))

    monkeypatch.setattr("torchvision.datasets.utils.download_and_extract_archive", fake_archive)
    monkeypatch.setattr("torchvision.datasets.utils.download_file_from_google_drive",
                        fake_drive)
    assert len(HAR(root=tmp_path / "har", download=True).load().y_train) == 24
    assert AmazonReview(root=tmp_path / "amz", download=True).load().num_classes == 2
    assert fetched == [(HAR_URL, "UCI HAR Dataset.zip"), (DRIVE_ID, "amazon.npz")]


@pytest.mark.parametrize("source, helper, names", [
    ("agnews", "download_url", r"put (train|test).csv there yourself"),
    ("har", "download_and_extract_archive", "unpack the zip there yourself"),
    ("amazon_review", "download_file_from_google_drive", "put amazon.npz there yourself"),
    ("tinyimagenet", "download_and_extract_archive", "download it yourself and unpack"),
])
def test_an_offline_download_is_one_user_error_saying_where_to_put_the_files(
        tmp_path, monkeypatch, source, helper, names):
    def offline(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setattr(f"torchvision.datasets.utils.{helper}", offline)
    with pytest.raises(DownloadError, match=f"could not download.*{names}") as error:
        SOURCES[source](root=tmp_path / source, download=True).load()
    assert "network is unreachable" in str(error.value) and "\n" not in str(error.value)
    assert isinstance(error.value, FedlightError)


def test_missing_files_say_how_to_get_them(tmp_path):
    with pytest.raises(FileNotFoundError, match="train.csv, test.csv not found.*download: true"):
        AGNews(root=tmp_path).load()
    with pytest.raises(FileNotFoundError, match="preprocess.sh"):
        Shakespeare(root=tmp_path).load()
    with pytest.raises(FileNotFoundError, match="download: true"):
        HAR(root=tmp_path).load()
    with pytest.raises(FileNotFoundError, match="amazon.npz not found.*Google Drive"):
        AmazonReview(root=tmp_path).load()
    with pytest.raises(ValueError, match="no root was given"):
        HAR().load()


# ===================================================================== Shakespeare
def test_shakespeare_codes_characters_after_padding_and_targets_in_leaf_order(tmp_path):
    root = write_shakespeare(tmp_path / "leaf", roles=3, samples=10)
    data = Shakespeare(root=root).load()
    assert data.x_train.dtype == torch.int64 and data.input_shape == (80,)
    assert data.num_classes == 80 and data.vocab == ["<pad>", *LEAF_LETTERS]
    record = json.loads(next((root / "train").glob("*.json")).read_text())
    user = sorted(record["users"])[0]
    x0, y0 = record["user_data"][user]["x"][0], record["user_data"][user]["y"][0]
    assert "".join(data.vocab[i] for i in data.x_train[0].tolist()) == x0
    assert LEAF_LETTERS[int(data.y_train[0])] == y0
    assert data.group_names == sorted(record["users"])
    assert np.bincount(data.groups_train).tolist() == [8, 8, 8]
    assert np.bincount(data.groups_test).tolist() == [2, 2, 2]


def _edit_leaf(root: Path, edit) -> Path:
    path = next((root / "train").glob("*.json"))
    record = json.loads(path.read_text())
    edit(record)
    path.write_text(json.dumps(record))
    return path


@pytest.mark.parametrize(("edit", "message"), [
    (lambda r: r["num_samples"].__setitem__(1, 9),
     r"user 'PLAY_ROLE1'\): num_samples says 9 but x has 8 and y has 8"),
    (lambda r: r["num_samples"].pop(), r"lists 4 users but 3 num_samples entries"),
    (lambda r: r["user_data"]["PLAY_ROLE2"]["x"].__setitem__(3, "é" * 80),
     r"user 'PLAY_ROLE2', sample 3\): x holds character 'é', which is not in LEAF's alphabet"),
    (lambda r: r["user_data"]["PLAY_ROLE0"]["x"].__setitem__(0, "short"),
     r"sample 0\): x must be a string of 80 characters"),
])
def test_leaf_file_with_disagreeing_counts_or_unknown_character_is_refused(tmp_path, edit,
                                                                         message):
    root = write_shakespeare(tmp_path / "leaf")
    path = _edit_leaf(root, edit)
    with pytest.raises(DataFormatError, match=message) as caught:
        Shakespeare(root=root).load()
    assert str(caught.value).startswith(str(path)) and "\n" not in str(caught.value)


# ===================================================================== HAR
def test_har_stacks_nine_channels_and_numbers_subjects(tmp_path):
    root = write_har(tmp_path, train_subjects=(1, 3), test_subjects=(2,), windows=6)
    data = HAR(root=root).load()
    assert data.x_train.dtype == torch.float32 and data.x_train.shape == (12, 9, 128)
    signals = root / "UCI HAR Dataset" / "train" / "Inertial Signals"
    gyro_y = np.loadtxt(signals / f"{SIGNALS[4]}_train.txt", dtype=np.float32)
    assert torch.equal(data.x_train[:, 4], torch.from_numpy(gyro_y))  # as distributed
    assert data.y_train.tolist() == [0, 1, 2, 3, 4, 5] * 2 and data.num_classes == 6
    assert data.group_names == ["1", "2", "3"]
    assert data.groups_train.tolist() == [0] * 6 + [2] * 6 and set(data.groups_test) == {1}
    inner = HAR(root=root / "UCI HAR Dataset").load()  # either folder works
    assert torch.equal(inner.x_train, data.x_train) and torch.equal(inner.y_train, data.y_train)
    assert torch.equal(inner.x_test, data.x_test) and inner.group_names == data.group_names


def test_har_wrong_column_count_names_file_and_line(tmp_path):
    root = write_har(tmp_path)
    path = root / "UCI HAR Dataset" / "test" / "Inertial Signals" / "body_gyro_z_test.txt"
    _rewrite_line(path, 4, " ".join(["0.1"] * 127))
    with pytest.raises(DataFormatError, match=rf"{path.name}:4: has 127 columns; expected 128"):
        HAR(root=root).load()
    _rewrite_line(path, 4, " ".join(["0.1"] * 127 + ["x"]))
    with pytest.raises(DataFormatError, match=rf"{path.name}:4: holds a value that is not a"):
        HAR(root=root).load()


def test_har_label_out_of_range_and_line_count_mismatch(tmp_path):
    root = write_har(tmp_path)
    labels = root / "UCI HAR Dataset" / "train" / "y_train.txt"
    _rewrite_line(labels, 2, "7")
    with pytest.raises(DataFormatError, match=r"y_train.txt:2: activity 7 is invalid; valid"):
        HAR(root=root).load()
    labels.write_text("1\n" * 5)
    with pytest.raises(DataFormatError, match=r"body_acc_x_train.txt: has 24 lines but"):
        HAR(root=root).load()


# ===================================================================== Amazon Review
def test_amazon_review_reads_the_distributed_sparse_layout(tmp_path):
    root = write_amazon(tmp_path, per_domain=5, features=30)
    data = AmazonReview(root=root).load()
    with np.load(root / "amazon.npz") as archive:
        dense = np.zeros(tuple(archive["xx_shape"]))
        dense[archive["xx_row"], archive["xx_col"]] = archive["xx_data"]
        labels = archive["yy"].ravel()
    assert torch.equal(data.x_train, torch.from_numpy(dense.T.astype(np.float32)))
    assert data.y_train.tolist() == ((labels + 1) // 2).tolist()
    assert data.domain_names == ["books", "dvd", "electronics", "kitchen"]
    assert data.domains_train.tolist() == np.repeat(np.arange(4), 5).tolist()
    assert data.x_test is None and data.num_classes == 2


def test_amazon_review_missing_array_or_bad_offsets(tmp_path):
    root = write_amazon(tmp_path)
    with np.load(root / "amazon.npz") as archive:
        arrays = {k: archive[k] for k in archive.files}
    np.savez(root / "amazon.npz", **{k: v for k, v in arrays.items() if k != "yy"})
    with pytest.raises(DataFormatError, match=r"amazon.npz \(array yy\): is missing"):
        AmazonReview(root=root).load()
    np.savez(root / "amazon.npz", **{**arrays, "offset": np.array([0, 5, 3, 40, 48])})
    with pytest.raises(DataFormatError, match=r"array offset\): is \[0, 5, 3, 40, 48\]"):
        AmazonReview(root=root).load()


# ===================================================================== the data module
def test_token_ids_go_through_the_data_module_unchanged(tmp_path, monkeypatch):
    monkeypatch.setattr("fedlight.data.datamodule.save_heatmap", lambda *args: None)
    root = write_agnews(tmp_path / "ag")
    data = FederatedDataModule(source=AGNews(root=str(root)),
                               partition=Dirichlet(beta=1.0, min_client_size=2),
                               num_clients=3, merge_test=True)
    data.setup()
    source = AGNews(root=root).load()
    assert data.vocab_size == len(source.vocab) and data.input_shape == (MAX_TOKENS,)
    x, _ = data.client_train(0)
    assert x.dtype == torch.int64
    assert torch.equal(data.pool_x, torch.cat([source.x_train, source.x_test]))
    record = data.vocabulary_record()
    assert record["size"] == len(source.vocab) and len(record["sha256"]) == 64
    data.save_partition(tmp_path)
    assert json.loads((tmp_path / "vocab.json").read_text()) == source.vocab
    images = FederatedDataModule(source=Digits(), num_clients=2)
    assert images.vocab_size is None and images.vocabulary_record() is None


def test_natural_partition_gives_one_client_per_role_and_subject(tmp_path):
    leaf = FederatedDataModule(source=Shakespeare(root=str(write_shakespeare(tmp_path / "s"))),
                               partition=Natural(), num_clients=4,
                               merge_test=True, train_fraction=0.8)
    leaf.setup()
    assert [(len(s.train), len(s.test)) for s in leaf.splits] == [(8, 2)] * 4
    har = FederatedDataModule(source=HAR(root=str(write_har(tmp_path / "h"))),
                              partition=Natural(), num_clients=5,
                              merge_test=True, train_fraction=0.75)
    har.setup()
    groups = np.concatenate([har.data.groups_train, har.data.groups_test])
    for client, split in enumerate(har.splits):
        assert set(groups[np.concatenate([split.train, split.test])]) == {client}


# ===================================================================== DLG
def test_dlg_refuses_inputs_that_are_not_images(tmp_path):
    tokens = torch.zeros(2, 80, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"needs image inputs.*int64 inputs of shape \(80,\)"):
        check_image_inputs(tokens)
    check_image_inputs(torch.zeros(2, 1, 8, 8))
    har = FederatedDataModule(source=HAR(root=str(write_har(tmp_path))), partition=IID(),
                              num_clients=2)
    har.setup()
    with pytest.raises(ValueError, match=r"data source 'har' has float32 inputs of shape "
                                         r"\(9, 128\); remove DLGProbe") as caught:
        DLGProbe().setup(SimpleNamespace(datamodule=har))
    assert "\n" not in str(caught.value)


# ===================================================================== runs on these sources
# (each paper config on these sources runs one round on fixture files in tests/test_configs.py)
CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_a_resumed_run_refuses_a_changed_vocabulary(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("fedlight.federation.outputs.writer.plot_curves", lambda *args: None)
    monkeypatch.setattr("fedlight.data.datamodule.save_heatmap", lambda *args: None)
    args = ["fit", "-c", str(CONFIGS / "gpfl/paper/agnews_fasttext_dirichlet.yaml"),
            "--data.source.download", "false", "--data.num_clients", "3",
            "--data.partition.min_client_size", "2",
            "--trainer.eval_every", "1", "--trainer.accelerator", "cpu", "--trainer.progress_bar",
            "false", "--trainer.logger", "csv", "--trainer.default_root_dir",
            str(tmp_path / "runs")]
    main([*args, "--data.source.root", str(write_agnews(tmp_path / "ag")), "--trainer.rounds", "1"])
    moved = write_agnews(tmp_path / "moved")  # the same files elsewhere (data.root may change)
    with open(moved / "test.csv", "a", newline="") as handle:  # but one more word
        csv.writer(handle, quoting=csv.QUOTE_ALL).writerow(["1", "Zebra", "zebra talks"])
    with pytest.raises(SystemExit):
        main([*args, "--data.source.root", str(moved), "--trainer.rounds", "2", "--ckpt_path",
              "last"])
    error = capsys.readouterr().err.splitlines()[0]
    assert re.search(r"vocabulary\.sha256: '[0-9a-f]{64}' -> '[0-9a-f]{64}'", error), error


def test_text_under_flower_gives_the_run_fit_gives(tmp_path, monkeypatch):
    pytest.importorskip("flwr")
    monkeypatch.setattr("fedlight.federation.outputs.writer.plot_curves", lambda *args: None)
    monkeypatch.setattr("fedlight.data.datamodule.save_heatmap", lambda *args: None)
    from fedlight.cli import FedlightCLI
    from fedlight.flower import build_client_app
    from fedlight.flower.inline import InlineGrid
    from fedlight.flower.server import serve
    from fedlight.flower.settings import load_run

    config = str(CONFIGS / "gpfl/paper/agnews_fasttext_dirichlet.yaml")
    overrides = ["--data.source.root", str(write_agnews(tmp_path / "ag")),
                 "--data.source.download", "false", "--data.num_clients", "3",
                 "--data.partition.min_client_size", "2", "--trainer.rounds", "2",
                 "--trainer.accelerator", "cpu", "--trainer.progress_bar", "false",
                 "--trainer.verbose", "false", "--trainer.logger", "csv",
                 "--trainer.default_root_dir", str(tmp_path / "runs")]
    trainer = FedlightCLI(args=["fit", "-c", config, *overrides]).trainer
    run = load_run(config, tuple(overrides))
    grid = InlineGrid(build_client_app(config, overrides, str(tmp_path / "state")),
                      run.datamodule.num_clients)
    outcome = serve(grid, run)
    assert run.model.backbone_kwargs["vocab_size"] == trainer.datamodule.vocab_size
    ours = [r["personalized_accuracy"] for r in outcome.history]
    assert ours == pytest.approx([r["personalized_accuracy"] for r in trainer.history], rel=1e-6)
    for key, value in trainer.global_state.items():
        torch.testing.assert_close(outcome.global_state[key], value.cpu(), rtol=1e-5, atol=1e-6)
    assert (Path(outcome.summary["run_dir"]) / "vocab.json").exists()


def test_token_ids_survive_a_pfllib_folder_both_ways(tmp_path):
    """fedlight's text split exported in PFLlib's layout, and PFLlib's own text layout
    ((ids, length) pairs), read back as int64 ids."""
    from fedlight.data.sources.pfllib import export_pfllib

    data = FederatedDataModule(source=AGNews(root=str(write_agnews(tmp_path / "ag"))),
                               partition=IID(), num_clients=2)
    folder = export_pfllib(data, tmp_path / "exported")
    back = PFLlib(root=folder).load()
    assert back.x_train.dtype == torch.int64
    assert torch.equal(back.x_train[:len(data.client_train(0)[0])], data.client_train(0)[0])
    pairs = np.empty((3, 2), dtype=object)
    for i in range(3):
        pairs[i, 0], pairs[i, 1] = [i + 1, 2, 0, 0], 2
    (tmp_path / "pfl" / "train").mkdir(parents=True)
    (tmp_path / "pfl" / "test").mkdir()
    for split in ("train", "test"):
        np.savez_compressed(tmp_path / "pfl" / split / "0.npz",
                            data={"x": pairs, "y": np.array([0, 1, 0])})
    (tmp_path / "pfl" / "config.json").write_text(json.dumps({"num_clients": 1,
                                                              "num_classes": 2}))
    text = PFLlib(root=tmp_path / "pfl").load()
    assert text.x_train.dtype == torch.int64 and text.x_train[:3, 0].tolist() == [1, 2, 3]


def test_a_text_run_with_the_dlg_probe_stops_before_training_and_leaves_no_folder(tmp_path):
    from fedlight.clients import CLIENTS
    from tests.conftest import tiny_trainer

    data = FederatedDataModule(source=AGNews(root=str(write_agnews(tmp_path / "ag"))),
                               partition=IID(), num_clients=2)
    data.setup()
    client = CLIENTS["FedAvg"](backbone="fasttext", num_classes=4, input_shape=data.input_shape,
                               vocab_size=data.vocab_size)
    trainer = tiny_trainer(tmp_path / "runs", probes=[DLGProbe()], verbose=False)
    with pytest.raises(ValueError, match=r"data source 'agnews' has int64 inputs of shape "
                                         r"\(200,\); remove DLGProbe"):
        trainer.fit(client, data)
    assert not any((tmp_path / "runs").iterdir())
