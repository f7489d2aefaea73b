"""trainer.memory_format: which format auto picks, that image batches and weights really are
in it, and that it changes results only to float tolerance."""

import pytest
import torch

from fedlight.clients import GPFL, FedAvg
from fedlight.data.datamodule import iterate_batches
from fedlight.federation.memory_format import resolve_memory_format
from fedlight.federation.trainer import FederatedTrainer
from fedlight.models import build_backbone
from tests.conftest import tiny_data, tiny_trainer

CPU = torch.device("cpu")
IMAGES = dict(shape=(3, 16, 16))


def image_client(cls=FedAvg, backbone="cnn", **kwargs):
    torch.manual_seed(0)
    return cls(backbone=backbone, num_classes=4, input_shape=(3, 16, 16), lr=0.05, **kwargs)


@pytest.mark.parametrize("backbone, expected", [
    ("cnn", torch.channels_last), ("lenet", torch.channels_last), ("vgg11", torch.channels_last),
    ("vgg8", torch.channels_last), ("vgg16_bn", torch.channels_last),
    ("resnet18", torch.contiguous_format), ("mlp", torch.contiguous_format)])
def test_auto_follows_what_each_backbone_measured_faster_in(backbone, expected):
    model = build_backbone(backbone, (3, 32, 32), 10)
    assert resolve_memory_format("auto", model, CPU) == expected


def test_auto_keeps_the_default_format_off_the_cpu_and_explicit_values_win():
    model = build_backbone("cnn", (3, 32, 32), 10)
    assert resolve_memory_format("auto", model, torch.device("cuda")) == torch.contiguous_format
    assert resolve_memory_format("contiguous", model, CPU) == torch.contiguous_format
    resnet = build_backbone("resnet18", (3, 32, 32), 10)
    assert resolve_memory_format("channels_last", resnet, CPU) == torch.channels_last


def test_auto_needs_every_backbone_of_a_client_to_ask_for_it():
    mixed = torch.nn.ModuleList([build_backbone("cnn", (3, 32, 32), 10),
                                 build_backbone("resnet18", (3, 32, 32), 10)])
    assert resolve_memory_format("auto", mixed, CPU) == torch.contiguous_format


def test_an_unknown_memory_format_is_one_line_naming_the_valid_ones(tmp_path):
    with pytest.raises(ValueError, match=r"^trainer.memory_format: unknown memory_format 'nhwc'; "
                                         r"valid: auto, channels_last, contiguous$"):
        FederatedTrainer(memory_format="nhwc", default_root_dir=str(tmp_path))


def test_shuffled_batches_keep_channels_last_and_ordered_ones_are_views():
    x = torch.randn(7, 3, 4, 4).contiguous(memory_format=torch.channels_last)
    y = torch.arange(7)
    shuffled = list(iterate_batches(x, y, 3, torch.Generator().manual_seed(0)))
    assert all(b.is_contiguous(memory_format=torch.channels_last) for b, _ in shuffled)
    assert [len(t) for _, t in shuffled] == [3, 3]  # the trailing single sample is dropped
    assert len(set(torch.cat([t for _, t in shuffled]).tolist())) == 6
    ordered = list(iterate_batches(x, y, 3, drop_single=False))
    assert [t.tolist() for _, t in ordered] == [[0, 1, 2], [3, 4, 5], [6]]
    assert ordered[0][0].data_ptr() == x.data_ptr()


def run_recording_formats(tmp_path, memory_format, cls=FedAvg):
    """A 2-round run; returns its history and whether every training and scoring batch and
    every conv weight was channels_last."""
    client = image_client(cls)
    seen = []
    client.model.encoder.register_forward_pre_hook(
        lambda _, args: seen.append(args[0].is_contiguous(memory_format=torch.channels_last)))
    trainer = tiny_trainer(tmp_path / memory_format, memory_format=memory_format)
    trainer.fit(client, tiny_data(**IMAGES))
    conv = client.model.encoder.features[0].weight
    return trainer.history, set(seen), conv.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("cls", [FedAvg, GPFL])
def test_channels_last_changes_results_only_to_float_tolerance(tmp_path, cls):
    nhwc, nhwc_seen, nhwc_conv = run_recording_formats(tmp_path, "channels_last", cls)
    nchw, nchw_seen, nchw_conv = run_recording_formats(tmp_path, "contiguous", cls)
    assert (nhwc_seen, nhwc_conv) == ({True}, True)
    assert (nchw_seen, nchw_conv) == ({False}, False)
    for fast, plain in zip(nhwc, nchw, strict=True):
        assert fast["train_loss"] == pytest.approx(plain["train_loss"], rel=1e-4)
        assert fast["personalized_accuracy"] == pytest.approx(plain["personalized_accuracy"],
                                                              abs=0.02)


def test_auto_trains_a_conv_backbone_channels_last_on_the_cpu(tmp_path):
    _, seen, conv = run_recording_formats(tmp_path, "auto")
    assert (seen, conv) == ({True}, True)


def test_resuming_in_another_memory_format_is_refused(tmp_path):
    data = tiny_data(**IMAGES)
    tiny_trainer(tmp_path, rounds=1, run_name="run", memory_format="channels_last").fit(
        image_client(), data)
    with pytest.raises(ValueError, match="memory_format"):
        tiny_trainer(tmp_path, rounds=2, run_name="run", memory_format="contiguous").fit(
            image_client(), data, ckpt_path="last")
    summary = tiny_trainer(tmp_path, rounds=2, run_name="run", memory_format="auto").fit(
        image_client(), data, ckpt_path="last")
    assert summary["rounds"] == 2
