"""Backbones beyond the zoo: a constructor registered by name where it is defined, and a
user's own ``nn.Module`` passed as ``backbone`` (Python API, YAML ``class_path`` and a plain
``lightning.Trainer``)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import lightning as L
import pytest
import torch
from torch import nn

from fedlight.cli import main
from fedlight.clients import GPFL, FedAvg, FedPer, Privatize
from fedlight.core.errors import ConfigError
from fedlight.models import BACKBONES, Backbone, build_backbone, register_backbone
from tests.conftest import tiny_data, tiny_trainer

SHAPE, CLASSES = (1, 8, 8), 4  # tiny_data's samples
MNIST5K = "configs/fedavg/mnist5k_dirichlet.yaml"


class TinyNet(nn.Module):
    """A user's own classifier cut as ``encoder`` + ``head``, with no ``feature_dim``."""

    def __init__(self, in_features: int = 64, hidden: int = 12, num_classes: int = CLASSES):
        super().__init__()
        self.encoder = nn.Sequential(nn.Flatten(), nn.Linear(in_features, hidden),
                                     nn.BatchNorm1d(hidden), nn.ReLU())
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


class TokenNet(nn.Module):
    """An encoder that cannot run on float zeros (a token embedding)."""

    def __init__(self, feature_dim: int | None = None):
        super().__init__()
        self.encoder = nn.Sequential(nn.Flatten(), nn.Embedding(10, 6))
        self.head = nn.Linear(6, CLASSES)
        if feature_dim is not None:
            self.feature_dim = feature_dim


def plain_module() -> nn.Module:
    """Any module mapping inputs to logits: no encoder, no head."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, CLASSES))


def client(cls, backbone, **kwargs):
    torch.manual_seed(0)
    return cls(backbone=backbone, num_classes=CLASSES, input_shape=SHAPE, lr=0.1, **kwargs)


def weights(module: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def changed(before: list[torch.Tensor], module: nn.Module) -> bool:
    return any(not torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))


@pytest.fixture
def zoo():
    """The registry as it was before the test: a backbone a test registers is gone after."""
    saved = dict(BACKBONES)
    yield BACKBONES
    BACKBONES.clear()
    BACKBONES.update(saved)


# ----------------------------------------------------------------- registered by name
def test_a_backbone_defined_in_a_test_is_usable_by_name(zoo, tmp_path):
    @register_backbone
    def two_layer_perceptron(input_shape: Sequence[int], num_classes: int, hidden: int = 16
                             ) -> Backbone:
        encoder = nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU())
        return Backbone(encoder, hidden, num_classes, input_shape, name="two_layer_perceptron")

    assert zoo["two_layer_perceptron"] is two_layer_perceptron
    fedper = client(FedPer, "two_layer_perceptron", backbone_kwargs={"hidden": 8})
    assert fedper.feature_dim == 8 and fedper.partition.private == ("model.head.weight",
                                                                    "model.head.bias")
    before = weights(fedper.model.encoder)
    tiny_trainer(tmp_path, rounds=1).fit(fedper, tiny_data(num_clients=2))
    assert changed(before, fedper.model.encoder)
    with pytest.raises(ConfigError, match=r"'two_layer_perceptron'.*\['depth'\].*\['hidden'\]"):
        build_backbone("two_layer_perceptron", SHAPE, CLASSES, depth=2)


def test_a_taken_name_is_refused_naming_both_constructors(zoo):
    def cnn(input_shape: Sequence[int], num_classes: int) -> Backbone:
        raise AssertionError("never built")

    with pytest.raises(ConfigError, match=r"'cnn' is taken by fedlight\.models\.cnn\.cnn; "
                                          r"rename .*test_backbones\..*cnn"):
        register_backbone(cnn)
    assert zoo["cnn"].__module__ == "fedlight.models.cnn"


def test_an_unknown_name_lists_the_registered_ones_and_the_module_form():
    with pytest.raises(ConfigError, match=r"unknown backbone 'cnnn'; valid names: .*'cnn'.*"
                                          r"or an nn.Module"):
        FedAvg(backbone="cnnn", num_classes=CLASSES, input_shape=SHAPE)


# ----------------------------------------------------------------- a user's own module
def test_own_module_cut_as_encoder_and_head_trains_a_feature_reading_method(tmp_path):
    gpfl = client(GPFL, TinyNet())
    assert gpfl.feature_dim == 12  # found by one dry forward of the encoder
    assert gpfl.hparams["backbone"].endswith("test_backbones.TinyNet")  # the run's record
    before = weights(gpfl.model)
    tiny_trainer(tmp_path, rounds=1).fit(gpfl, tiny_data(num_clients=2))
    assert changed(before, gpfl.model)


def test_own_plain_module_trains_federated_and_in_a_plain_lightning_trainer(tmp_path):
    fedavg = client(FedAvg, plain_module())
    before = weights(fedavg)
    tiny_trainer(tmp_path / "fed", rounds=1).fit(fedavg, tiny_data(num_clients=2))
    assert changed(before, fedavg)

    alone = client(FedAvg, plain_module())
    before = weights(alone)
    trainer = L.Trainer(max_steps=3, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=tmp_path / "plain")
    trainer.fit(alone, tiny_data(num_clients=2).client(0))
    assert trainer.global_step == 3 and changed(before, alone)


def test_own_module_from_yaml_class_path_trains_a_round(tmp_path):
    backbone = {"class_path": "tests.test_backbones.TinyNet",
                "init_args": {"in_features": 784, "hidden": 8, "num_classes": 10}}
    main(["fit", "-c", MNIST5K, "--model", "GPFL", "--model.init_args.lr", "0.05",
          "--model.init_args.backbone", json.dumps(backbone), "--data.num_clients", "2",
          "--trainer.rounds", "1", "--trainer.verbose", "false", "--trainer.progress_bar",
          "false", "--trainer.default_root_dir", str(tmp_path), "--trainer.run_name", "own"])
    config = (tmp_path / "own" / "config.yaml").read_text()
    assert "tests.test_backbones.TinyNet" in config
    assert (tmp_path / "own" / "metrics.csv").read_text().count("\n") >= 2


def test_declared_feature_dim_is_used_where_no_dry_forward_can_tell_it():
    assert client(GPFL, TokenNet(feature_dim=6)).feature_dim == 6
    with pytest.raises(ConfigError, match=r"^GPFL needs the feature size of backbone TokenNet: "
                                          r"set TokenNet\.feature_dim .*\(1, 8, 8\)"):
        client(GPFL, TokenNet())


def test_a_feature_reading_method_refuses_an_uncut_module_in_one_line():
    with pytest.raises(ConfigError, match=r"^GPFL needs backbone Sequential cut as submodules "
                                          r"`encoder` .* and `head` .*; Sequential has no "
                                          r"`encoder`$"):
        client(GPFL, plain_module())


def test_the_dry_forward_moves_no_batchnorm_statistic_and_keeps_every_mode():
    net = TinyNet()
    net.train()
    net.encoder[2].eval()  # a user's frozen BatchNorm stays frozen, the rest keeps training
    modes = [m.training for m in net.modules()]
    statistics = {k: v.clone() for k, v in net.state_dict().items() if "running" in k}
    assert client(FedPer, net).feature_dim == 12
    assert [m.training for m in net.modules()] == modes
    assert all(torch.equal(net.state_dict()[k], v) for k, v in statistics.items())


def test_backbone_kwargs_with_own_module_are_refused():
    with pytest.raises(ConfigError, match=r"backbone_kwargs \{'hidden': 3\} .* your TinyNet"):
        client(FedAvg, TinyNet(), backbone_kwargs={"hidden": 3})


def test_privatize_refuses_a_module_it_cannot_cut_into_blocks():
    with pytest.raises(ConfigError, match=r"^Privatize cuts a zoo backbone into blocks; "
                                          r"backbone TinyNet is not one"):
        client(Privatize, TinyNet())
