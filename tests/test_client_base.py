import lightning as L
import pytest
import torch

from fedlight.clients import FedAvg, Local
from fedlight.core.client import resolve_partition
from tests.conftest import tiny_data


def make(cls=FedAvg, **kwargs):
    torch.manual_seed(0)
    options = dict(backbone="mlp", num_classes=4, input_shape=(1, 8, 8), lr=0.1)
    return cls(**{**options, **kwargs})


def test_fedavg_shares_everything_and_local_nothing():
    fedavg, local = make(FedAvg), make(Local)
    keys = set(fedavg.state_dict())
    assert set(fedavg.partition.shared) == keys and not fedavg.partition.private
    assert set(local.partition.private) == keys and not local.partition.shared
    assert fedavg.has_global_model and not local.has_global_model
    assert local.upload().state == {}


def test_extra_private_turns_fedavg_into_fedper():
    client = make(extra_private=["model.head.*"])
    assert set(client.partition.private) == {"model.head.weight", "model.head.bias"}
    assert not set(client.upload().state) & set(client.partition.private)
    assert not client.has_global_model


def test_pattern_that_matches_nothing_is_an_error_naming_it():
    client = make(extra_private=["model.haed.*"])
    with pytest.raises(ValueError, match=r"'model\.haed\.\*' matches no parameter"):
        _ = client.partition


def test_uncovered_keys_are_an_error():
    with pytest.raises(ValueError, match="neither shared nor private"):
        resolve_partition(["a.w", "b.w"], shared=["a.*"], private=[])


def test_private_patterns_win_and_buffers_are_partitioned():
    keys = ["enc.w", "enc.bn.running_mean", "enc.bn.num_batches_tracked", "head.w"]
    part = resolve_partition(keys, shared=["*"], private=["enc.bn.*"])
    assert part.private == ("enc.bn.running_mean", "enc.bn.num_batches_tracked")
    assert part.shared == ("enc.w", "head.w")


def test_bad_constructor_values_are_named():
    with pytest.raises(ValueError, match="'rmsprop'.*sgd, adam, adamw"):
        make(optimizer="rmsprop")
    with pytest.raises(ValueError, match="-1"):
        make(lr=-1)


def test_client_trains_alone_in_a_plain_lightning_trainer(tmp_path):
    data = tiny_data()
    client = make()
    view = data.client(0)
    trainer = L.Trainer(max_epochs=3, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=tmp_path)
    before = trainer.validate(client, view, verbose=False)[0]["val_loss"]
    trainer.fit(client, view)
    after = trainer.validate(client, view, verbose=False)[0]["val_loss"]
    assert after < before
