"""The papers' backbones through the methods that rely on their cut: one local step each of
FedAvg, FedPer, FedRep, GPFL and Privatize (and FedBN / FedPick on the BatchNorm ones)."""

from __future__ import annotations

import pytest
import torch

from fedlight.clients import GPFL, AutoSA, FedAvg, FedBN, FedPer, FedPick, FedRep, Privatize
from fedlight.clients.fedbn import BATCH_NORMS
from fedlight.clients.privatize import sps_way, ssp_way

NUM_CLASSES = 5
BATCH = 4

# (backbone, input shape, backbone_kwargs); AlexNet's FC layers narrowed to keep it fast.
BACKBONES = [
    ("alexnet_bn", (3, 63, 63), {"fc_dims": [24, 16]}),
    ("resnet20", (3, 16, 16), {}),
    ("resnet56", (3, 8, 8), {"shortcut": "padding"}),
    ("femnist_cnn", (1, 28, 28), {}),
    ("femnist_cnn", (1, 28, 28), {"all_fc_head": True}),
    ("mlp3", (40,), {}),
    ("fasttext", (12,), {"vocab_size": 30}),
    ("char_lstm", (10,), {"vocab_size": 20}),
    ("har_cnn", (9, 128), {}),
]
IDS = [f"{name}{'-' + ','.join(kwargs) if kwargs else ''}" for name, _, kwargs in BACKBONES]


def cases(*names: str) -> list:
    """The ``BACKBONES`` entries of ``names`` as pytest params with their ids."""
    return [pytest.param(*case, id=case_id) for case, case_id in zip(BACKBONES, IDS, strict=True)
            if case[0] in names]


METHODS = [(FedAvg, {}), (FedPer, {}), (FedRep, {}), (GPFL, {}), (Privatize, {"way": "AaB"})]
# (backbone case, method) pairs; GPFL's CoV is two d x d layers, so it skips the 3136-d feature
# of femnist_cnn's paper cut (that cut is for the privatization strings).
STEPS = [
    pytest.param(*case, cls, options, id=f"{case_id}-{cls.__name__}")
    for case, case_id in zip(BACKBONES, IDS, strict=True)
    for cls, options in METHODS
    if not (cls is GPFL and case[2].get("all_fc_head"))
]


def batch(shape: tuple[int, ...], kwargs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded batch: token ids for sequence backbones (``vocab_size`` given), else floats."""
    generator = torch.Generator().manual_seed(1)
    y = torch.arange(BATCH) % NUM_CLASSES
    if "vocab_size" in kwargs:
        return torch.randint(0, kwargs["vocab_size"], (BATCH, *shape), generator=generator), y
    return torch.randn(BATCH, *shape, generator=generator), y


def make(cls, name: str, shape: tuple[int, ...], kwargs: dict, **options):
    torch.manual_seed(0)
    return cls(backbone=name, num_classes=NUM_CLASSES, input_shape=shape, lr=0.05,
               backbone_kwargs=kwargs, **options)


def one_step(client, data: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, list[str]]:
    """Loss of one optimizer step and the state keys it changed."""
    before = {k: v.clone() for k, v in client.state_dict().items()}
    optimizer = client.configure_optimizers()
    loss = client.training_step(data, 0)
    loss.backward()
    optimizer.step()
    after = client.state_dict()
    return loss.detach(), [k for k in before if not torch.equal(before[k], after[k])]


@pytest.mark.parametrize(("name", "shape", "kwargs", "cls", "options"), STEPS)
def test_one_local_step_trains_encoder_and_head(name, shape, kwargs, cls, options) -> None:
    client = make(cls, name, shape, kwargs, **options)
    loss, changed = one_step(client, batch(shape, kwargs))
    assert torch.isfinite(loss)
    assert any(k.startswith("model.encoder.") for k in changed)
    assert any(k.startswith("model.head.") for k in changed)
    head_keys = {k for k in client.state_dict() if k.startswith("model.head.")}
    if cls in (FedPer, FedRep, GPFL):  # the head is the private part
        assert head_keys <= set(client.partition.private)
        assert not any(k.startswith("model.encoder.") for k in client.partition.private)
    if cls is Privatize:  # "AaB": a fresh private encoder, trained too, shared path intact
        assert any(k.startswith("private.a.") for k in changed)
        assert set(client.partition.shared) == {k for k in client.state_dict()
                                                if k.startswith("model.")}


@pytest.mark.parametrize(("name", "shape", "kwargs"), cases("alexnet_bn", "resnet20", "resnet56"))
def test_fedbn_keeps_every_batchnorm_key_private(name, shape, kwargs) -> None:
    client = make(FedBN, name, shape, kwargs)
    batch_norm_keys = client.state_keys_of_type(BATCH_NORMS)
    assert set(client.partition.private) == set(batch_norm_keys)
    assert any(".running_mean" in k for k in batch_norm_keys)
    loss, changed = one_step(client, batch(shape, kwargs))
    assert torch.isfinite(loss) and any(k in changed for k in client.partition.shared)


def test_fedpick_masks_the_alexnet_feature() -> None:
    name, shape, kwargs = cases("alexnet_bn")[0].values
    client = make(FedPick, name, shape, kwargs)
    assert client.model.feature_dim == kwargs["fc_dims"][-1]
    assert client.pfsm.mask_net[0].in_features == client.model.feature_dim
    loss, changed = one_step(client, batch(shape, kwargs))
    assert torch.isfinite(loss) and any(k.startswith("pfsm.") for k in changed)


@pytest.mark.parametrize("way", [sps_way(4, 3), ssp_way(4, 3), "aBCD"])
def test_char_lstm_fine_cut_privatization_strings(way: str) -> None:
    name, shape, kwargs = cases("char_lstm")[0].values
    client = make(Privatize, name, shape, kwargs, way=way, cut="fine")
    assert client.block_names == ["encoder.embedding", "encoder.lstm1", "encoder.lstm2", "head"]
    loss, changed = one_step(client, batch(shape, kwargs))
    assert torch.isfinite(loss)
    private = set(client.partition.private)
    if way == "AaBbCD":  # private embedding and LSTM-1 copies, merged before LSTM-2
        assert {k.split(".")[1] for k in private} == {"a", "b"}
        assert any(k.startswith("private.b.") for k in changed)
    if way == "ABCcDd":  # private LSTM-2 and head branching off the shared LSTM-1
        assert {k.split(".")[1] for k in private} == {"c", "d"}
    if way == "aBCD":  # the embedding alone is private
        assert private == {"model.encoder.embedding.weight"}


@pytest.mark.parametrize(("name", "shape", "kwargs"), cases("fasttext", "char_lstm", "har_cnn"))
def test_autosa_fuses_two_encoders_of_non_image_backbones(name, shape, kwargs) -> None:
    client = make(AutoSA, name, shape, kwargs)
    loss, changed = one_step(client, batch(shape, kwargs))
    assert torch.isfinite(loss) and "alpha" in changed and "beta" in changed
