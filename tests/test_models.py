"""Conformance of every backbone in the zoo, plus the exact layouts the papers fix."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedlight.models import BACKBONES, Backbone, build_backbone

NUM_CLASSES = 7
BATCH = 2

# (name, input shape, constructor kwargs): every backbone at least once, on the inputs it is for.
CASES = [
    ("cnn", (1, 28, 28), {}),
    ("cnn", (3, 32, 32), {}),
    ("cnn_bn", (1, 28, 28), {}),
    ("digit_cnn", (3, 32, 32), {}),
    ("digit_cnn", (3, 32, 32), {"all_fc_head": True}),
    ("lenet", (1, 28, 28), {}),
    ("lenet", (3, 32, 32), {}),
    ("mlp", (64,), {}),
    ("mlp", (1, 28, 28), {"hidden": (32, 16)}),
    ("tfcnn", (3, 32, 32), {}),
    ("resnet18", (3, 32, 32), {}),
    ("resnet18", (1, 28, 28), {}),
    ("vgg8", (3, 32, 32), {}),
    ("vgg8_bn", (3, 32, 32), {}),
    ("vgg11", (3, 32, 32), {}),
    ("vgg11", (3, 32, 32), {"all_fc_head": True}),
]
IDS = [f"{n}-{'x'.join(map(str, s))}{'-' + ','.join(k) if k else ''}" for n, s, k in CASES]


def build(name: str, shape: tuple[int, ...], kwargs: dict) -> tuple[Backbone, torch.Tensor]:
    """A seeded backbone and a seeded input batch for it."""
    torch.manual_seed(0)
    model = build_backbone(name, shape, NUM_CLASSES, **kwargs)
    return model, torch.randn(BATCH, *shape)


def owners(key: str, prefixes: list[str]) -> list[str]:
    return [p for p in prefixes if key.startswith(p + ".")]


def count(module: nn.Module, kind: type[nn.Module]) -> int:
    return sum(isinstance(m, kind) for m in module.modules())


def test_every_backbone_is_covered() -> None:
    assert {name for name, _, _ in CASES} == set(BACKBONES)


@pytest.mark.parametrize(("name", "shape", "kwargs"), CASES, ids=IDS)
def test_output_and_feature_shapes(name: str, shape: tuple, kwargs: dict) -> None:
    model, x = build(name, shape, kwargs)
    assert model(x).shape == (BATCH, NUM_CLASSES)
    assert model.encoder(x).shape == (BATCH, model.feature_dim)
    assert (model.num_classes, model.input_shape, model.name) == (NUM_CLASSES, shape, name)


@pytest.mark.parametrize(("name", "shape", "kwargs"), CASES, ids=IDS)
def test_blocks_compose_to_forward(name: str, shape: tuple, kwargs: dict) -> None:
    model, x = build(name, shape, kwargs)
    model.eval()
    assert len(model.blocks()) == 2
    for cut in model.cuts:
        h = x
        for block in model.blocks(cut):
            h = block(h)
        torch.testing.assert_close(h, model(x), rtol=0, atol=0)


@pytest.mark.parametrize(("name", "shape", "kwargs"), CASES, ids=IDS)
def test_state_dict_is_encoder_or_head(name: str, shape: tuple, kwargs: dict) -> None:
    model, _ = build(name, shape, kwargs)
    keys = list(model.state_dict())
    assert keys and all(k.startswith(("encoder.", "head.")) for k in keys)
    if not kwargs.get("all_fc_head"):
        assert isinstance(model.head, nn.Linear)
        assert (model.head.in_features, model.head.out_features) == (
            model.feature_dim,
            NUM_CLASSES,
        )
        assert {k for k in keys if k.startswith("head.")} == {"head.weight", "head.bias"}


@pytest.mark.parametrize(("name", "shape", "kwargs"), CASES, ids=IDS)
def test_block_names_partition_state_dict(name: str, shape: tuple, kwargs: dict) -> None:
    model, _ = build(name, shape, kwargs)
    keys = list(model.state_dict())
    for cut in model.cuts:
        prefixes = model.block_names(cut)
        assert all(len(owners(k, prefixes)) == 1 for k in keys), cut
        assert all(any(owners(k, [p]) for k in keys) for p in prefixes), f"empty block in {cut}"
        blocks = model.blocks(cut)
        assert all(b is model.get_submodule(p) for b, p in zip(blocks, prefixes, strict=True))


@pytest.mark.parametrize(("name", "shape", "kwargs"), CASES, ids=IDS)
def test_backward_reaches_every_parameter(name: str, shape: tuple, kwargs: dict) -> None:
    model, x = build(name, shape, kwargs)
    F.cross_entropy(model(x), torch.arange(BATCH) % NUM_CLASSES).backward()
    for pname, param in model.named_parameters():
        assert param.grad is not None, pname
        assert torch.isfinite(param.grad).all() and param.grad.abs().sum() > 0, pname


def test_same_seed_same_weights() -> None:
    first, _ = build("cnn_bn", (1, 28, 28), {})
    second, _ = build("cnn_bn", (1, 28, 28), {})
    for (k, a), b in zip(first.state_dict().items(), second.state_dict().values(), strict=True):
        assert torch.equal(a, b), k


def conv_params(c_in: int, c_out: int, k: int) -> int:
    return c_in * c_out * k * k + c_out


def linear_params(n_in: int, n_out: int) -> int:
    return n_in * n_out + n_out


def test_cnn_is_the_fedavg_cnn_of_methods_md() -> None:
    model, _ = build("cnn", (1, 28, 28), {})
    # 28 -conv5-> 24 -pool-> 12 -conv5-> 8 -pool-> 4: flatten 64 * 4 * 4 = 1024
    expected = (
        conv_params(1, 32, 5)
        + conv_params(32, 64, 5)
        + linear_params(64 * 4 * 4, 512)
        + linear_params(512, NUM_CLASSES)
    )
    assert sum(p.numel() for p in model.parameters()) == expected
    assert model.feature_dim == 512
    assert count(model, nn.BatchNorm2d) + count(model, nn.BatchNorm1d) == 0
    assert all(m.padding == (0, 0) for m in model.modules() if isinstance(m, nn.Conv2d))
    # 32 -> 28 -> 14 -> 10 -> 5: flatten 64 * 5 * 5 = 1600
    rgb, _ = build("cnn", (3, 32, 32), {})
    assert rgb.encoder.fc[0].in_features == 1600


def test_cnn_param_count_for_mnist_ten_classes() -> None:
    model = build_backbone("cnn", [1, 28, 28], 10)  # a YAML list is fine too
    assert model.input_shape == (1, 28, 28)
    # 832 + 51264 + 524800 + 5130
    assert sum(p.numel() for p in model.parameters()) == 582_026


def test_cnn_bn_puts_batchnorm_before_each_relu() -> None:
    model, _ = build("cnn_bn", (1, 28, 28), {})
    layers = [*model.encoder.features, *model.encoder.fc]
    kinds = [type(m) for m in layers]
    assert kinds.count(nn.BatchNorm2d) == 2 and kinds.count(nn.BatchNorm1d) == 1
    for i, kind in enumerate(kinds):
        if kind in (nn.BatchNorm2d, nn.BatchNorm1d):
            assert kinds[i - 1] in (nn.Conv2d, nn.Linear) and kinds[i + 1] is nn.ReLU
    assert "encoder.features.1.running_mean" in model.state_dict()


def test_lenet_pads_mnist_to_the_lenet5_size() -> None:
    for shape, padding in (((1, 28, 28), (2, 2)), ((3, 32, 32), (0, 0))):
        model, _ = build("lenet", shape, {})
        assert model.encoder.features[0].padding == padding
        assert model.encoder.fc[0].in_features == 16 * 5 * 5
        assert [m.out_features for m in model.modules() if isinstance(m, nn.Linear)] == [
            120,
            84,
            NUM_CLASSES,
        ]


def test_tfcnn_layout() -> None:
    model, _ = build("tfcnn", (3, 32, 32), {})
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.padding) for c in convs] == [
        (32, (3, 3), (0, 0)),
        (64, (3, 3), (0, 0)),
        (64, (3, 3), (0, 0)),
    ]
    assert model.encoder.fc[0].in_features == 64 * 4 * 4 and model.feature_dim == 64


def test_mlp_hidden_sizes() -> None:
    assert build("mlp", (64,), {})[0].feature_dim == 200
    assert build("mlp", (64,), {"hidden": ()})[0].feature_dim == 64


def test_vgg11_fine_cut_is_the_papers_six_blocks() -> None:
    model, _ = build("vgg11", (3, 32, 32), {})
    assert model.block_names("fine") == [f"encoder.{i}" for i in range(5)] + ["head"]
    blocks = model.blocks("fine")
    assert [count(b, nn.Conv2d) for b in blocks] == [2, 2, 2, 2, 0, 0]
    assert [count(b, nn.MaxPool2d) for b in blocks] == [2, 1, 1, 1, 0, 0]
    linears = [(m.in_features, m.out_features) for m in model.modules() if isinstance(m, nn.Linear)]
    assert linears == [(512, 256), (256, NUM_CLASSES)]
    assert count(model, nn.BatchNorm2d) == 0 and count(model, nn.Dropout) == 0


def test_vgg11_all_fc_head_is_the_papers_coarse_cut() -> None:
    default, _ = build("vgg11", (3, 32, 32), {})
    paper, _ = build("vgg11", (3, 32, 32), {"all_fc_head": True})
    assert isinstance(paper.head, nn.Sequential) and count(paper.head, nn.Linear) == 2
    assert count(paper.encoder, nn.Linear) == 0 and paper.feature_dim == 512
    assert paper.block_names("fine") == [f"encoder.{i}" for i in range(4)] + ["head.0", "head.1"]
    assert sum(p.numel() for p in paper.parameters()) == sum(
        p.numel() for p in default.parameters()
    )


def test_resnet18_has_a_small_image_stem() -> None:
    model, _ = build("resnet18", (1, 28, 28), {})
    stem = model.encoder.conv1
    assert (stem.in_channels, stem.kernel_size, stem.stride) == (1, (3, 3), (1, 1))
    assert count(model.encoder, nn.MaxPool2d) == 0 and model.feature_dim == 512


def test_unknown_backbone_names_the_bad_value_and_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"'resnet19'.*'resnet18'"):
        build_backbone("resnet19", (3, 32, 32), NUM_CLASSES)


@pytest.mark.parametrize(
    ("name", "shape"),
    [("cnn", (1, 8, 8)), ("resnet18", (64,)), ("tfcnn", (3, 16, 16)), ("vgg11", (3, 28, 28))],
)
def test_input_shape_it_cannot_take_is_named(name: str, shape: tuple) -> None:
    with pytest.raises(ValueError, match=re.escape(str(shape))):
        build_backbone(name, shape, NUM_CLASSES)


def test_too_small_input_says_what_size_fits() -> None:
    with pytest.raises(ValueError, match="at least 16"):
        build_backbone("cnn", (1, 8, 8), NUM_CLASSES)


def test_num_classes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="num_classes"):
        build_backbone("cnn", (1, 28, 28), 0)


def test_unknown_keyword_is_named() -> None:
    with pytest.raises(ValueError, match=r"'depth'.*'hidden'"):
        build_backbone("mlp", (64,), NUM_CLASSES, depth=3)


def test_fine_cut_where_none_exists_and_unknown_cut_raise() -> None:
    model, _ = build("cnn", (1, 28, 28), {})
    with pytest.raises(ValueError, match="'cnn' has no 'fine' cut"):
        model.blocks("fine")
    with pytest.raises(ValueError, match="'medium'"):
        build("vgg11", (3, 32, 32), {})[0].block_names("medium")
