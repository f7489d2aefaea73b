"""Conformance of every backbone in the zoo, plus the exact layouts the papers fix."""

from __future__ import annotations

import itertools
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
    ("femnist_cnn", (1, 28, 28), {}),
    ("femnist_cnn", (1, 28, 28), {"all_fc_head": True}),
    ("femnist_cnn", (1, 28, 28), {"fc_dims": ()}),
    ("lenet", (1, 28, 28), {}),
    ("lenet", (3, 32, 32), {}),
    ("lenet", (1, 28, 28), {"hidden": (120, 2), "feature_relu": False}),
    ("mlp", (64,), {}),
    ("mlp", (1, 28, 28), {"hidden": (32, 16)}),
    ("mlp3", (50,), {}),
    ("tfcnn", (3, 32, 32), {}),
    ("resnet18", (3, 32, 32), {}),
    ("resnet18", (1, 28, 28), {}),
    ("resnet20", (3, 32, 32), {}),
    ("resnet20", (1, 12, 12), {"shortcut": "padding"}),
    ("resnet56", (3, 8, 8), {}),
    # AlexNet's FC layers narrowed: the full 57M-parameter net has its own test below
    ("alexnet_bn", (3, 63, 63), {"fc_dims": (24, 16)}),
    ("alexnet_bn", (3, 64, 80), {"fc_dims": (24, 16), "all_fc_head": True}),
    ("vgg8", (3, 32, 32), {}),
    ("vgg8_bn", (3, 32, 32), {}),
    ("vgg11", (3, 32, 32), {}),
    ("vgg11", (3, 32, 32), {"all_fc_head": True}),
    ("vgg11", (3, 32, 32), {"fc_dims": ()}),  # MAP's VGG11: the head on the conv feature
    ("vgg11_bn", (3, 32, 32), {}),
    ("vgg16_bn", (3, 32, 32), {}),
    ("fasttext", (12,), {"vocab_size": 30}),
    ("fasttext", (12,), {"vocab_size": 30, "count_padding": True}),
    ("char_lstm", (20,), {"vocab_size": 81}),
    ("har_cnn", (9, 128), {}),
    ("har_cnn", (3, 40), {"all_fc_head": True}),
]
IDS = [f"{n}-{'x'.join(map(str, s))}{'-' + ','.join(k) if k else ''}" for n, s, k in CASES]


def build(name: str, shape: tuple[int, ...], kwargs: dict) -> tuple[Backbone, torch.Tensor]:
    """A seeded backbone and a seeded input batch for it (token ids where it takes a vocab)."""
    torch.manual_seed(0)
    model = build_backbone(name, shape, NUM_CLASSES, **kwargs)
    if "vocab_size" in kwargs:
        return model, torch.randint(0, kwargs["vocab_size"], (BATCH, *shape))
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


def test_lenet_with_a_2d_feature_without_relu_is_maps_visualization_net() -> None:
    model, x = build("lenet", (1, 28, 28), {"hidden": (120, 2), "feature_relu": False})
    assert model.feature_dim == 2 and isinstance(model.encoder.fc[-1], nn.Linear)
    with_relu, _ = build("lenet", (1, 28, 28), {"hidden": (120, 2)})
    assert isinstance(with_relu.encoder.fc[-1], nn.ReLU)
    for net in (model, with_relu):
        nn.init.constant_(net.encoder.fc[2].bias, -10.0)
    assert (model.encoder(x) < 0).all() and (with_relu.encoder(x) == 0).all()


@pytest.mark.parametrize(("name", "convs"), [("vgg11_bn", [64, 128, 256, 256, 512, 512, 512, 512]),
                                             ("vgg16_bn", [64, 64, 128, 128, 256, 256, 256, 512,
                                                           512, 512, 512, 512, 512])])
def test_vgg_bn_are_torchvisions_configs_with_batchnorm_after_each_conv(name, convs) -> None:
    from torchvision.models import vgg11_bn, vgg16_bn

    model = build_backbone(name, (3, 32, 32), 100)
    ours = [m.out_channels for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert ours == convs and count(model, nn.BatchNorm2d) == len(convs)
    assert count(model, nn.MaxPool2d) == 5 and model.feature_dim == 512
    reference = {"vgg11_bn": vgg11_bn, "vgg16_bn": vgg16_bn}[name](weights=None).features
    assert [type(m) for m in model.encoder.features] == [type(m) for m in reference]
    expected = sum(p.numel() for p in reference.parameters()) + linear_params(512, 100)
    assert sum(p.numel() for p in model.parameters()) == expected
    assert isinstance(model.head, nn.Linear) and model.head.in_features == 512


def test_femnist_cnn_is_the_papers_femnistnet() -> None:
    model = build_backbone("femnist_cnn", (1, 28, 28), 62)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.padding) for c in convs] == [
        (32, (5, 5), (2, 2)),
        (64, (5, 5), (2, 2)),
    ]
    # 28 -pool-> 14 -pool-> 7: flatten 64 * 7 * 7 = 3136; first FC narrowed from 2048 to 512
    expected = conv_params(1, 32, 5) + conv_params(32, 64, 5) + linear_params(3136, 512)
    assert sum(p.numel() for p in model.parameters()) == expected + linear_params(512, 62)
    assert expected + linear_params(512, 62) == 1_690_046 and model.feature_dim == 512
    paper = build_backbone("femnist_cnn", (1, 28, 28), 62, all_fc_head=True)
    assert paper.feature_dim == 3136 and count(paper.head, nn.Linear) == 2
    assert count(paper.encoder, nn.Linear) == 0
    one_fc = build_backbone("femnist_cnn", (1, 28, 28), 62, fc_dims=())  # MAP's FEMNIST net
    assert count(one_fc, nn.Conv2d) == 2 and count(one_fc, nn.Linear) == 1
    assert one_fc.feature_dim == 3136


def test_mlp_with_two_hidden_512_is_maps_mlpnet() -> None:
    model = build_backbone("mlp", (1, 28, 28), 10, hidden=[512, 512])
    linears = [(m.in_features, m.out_features) for m in model.modules() if isinstance(m, nn.Linear)]
    assert linears == [(784, 512), (512, 512), (512, 10)]
    assert sum(p.numel() for p in model.parameters()) == 669_706


def test_mlp3_is_the_amazon_review_mlp() -> None:
    model = build_backbone("mlp3", (5000,), 2)
    linears = [(m.in_features, m.out_features) for m in model.modules() if isinstance(m, nn.Linear)]
    assert linears == [(5000, 1000), (1000, 500), (500, 100), (100, 2)]
    assert sum(p.numel() for p in model.parameters()) == 5_551_802
    assert model.feature_dim == 100 and count(model, nn.ReLU) == 3


def cifar_resnet_params(blocks: int, classes: int, projection: bool) -> int:
    """He et al.'s CIFAR ResNet counted by hand: bias-free convs, BN weight + bias each."""
    total = 3 * 16 * 9 + 2 * 16 + linear_params(64, classes)
    widths = [16] + [16] * blocks + [32] * blocks + [64] * blocks
    for c_in, c_out in itertools.pairwise(widths):
        total += 9 * c_in * c_out + 2 * c_out + 9 * c_out * c_out + 2 * c_out
        if projection and c_in != c_out:
            total += c_in * c_out + 2 * c_out
    return total


@pytest.mark.parametrize(("name", "blocks"), [("resnet20", 3), ("resnet56", 9)])
@pytest.mark.parametrize("shortcut", ["projection", "padding"])
def test_cifar_resnets_have_he_et_al_sizes(name: str, blocks: int, shortcut: str) -> None:
    model = build_backbone(name, (3, 32, 32), 10, shortcut=shortcut)
    expected = cifar_resnet_params(blocks, 10, shortcut == "projection")
    assert sum(p.numel() for p in model.parameters()) == expected
    assert [len(model.encoder.get_submodule(f"layer{i}")) for i in (1, 2, 3)] == [blocks] * 3
    assert model.feature_dim == 64
    # 6n + 2 weighted layers: the stem, two convs per block, the head (shortcuts not counted)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d) and m.kernel_size == (3, 3)]
    assert len(convs) + 1 == 6 * blocks + 2


def test_cifar_resnet_halves_the_map_at_stages_two_and_three() -> None:
    model, x = build("resnet20", (3, 32, 32), {})
    h = model.encoder.relu(model.encoder.bn1(model.encoder.conv1(x)))
    sizes = []
    for stage in ("layer1", "layer2", "layer3"):
        h = model.encoder.get_submodule(stage)(h)
        sizes.append(tuple(h.shape[1:]))
    assert sizes == [(16, 32, 32), (32, 16, 16), (64, 8, 8)]
    assert model.encoder.layer2[0].shortcut[0].stride == (2, 2)


def test_unknown_shortcut_is_named() -> None:
    with pytest.raises(ValueError, match=r"'zero'.*projection, padding"):
        build_backbone("resnet20", (3, 32, 32), 10, shortcut="zero")


def test_alexnet_bn_is_fedbns_alexnet() -> None:
    torch.manual_seed(0)
    model = build_backbone("alexnet_bn", (3, 256, 256), 10)
    convs = [(m.out_channels, m.kernel_size[0], m.stride[0], m.padding[0])
             for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert convs == [(64, 11, 4, 2), (192, 5, 1, 2), (384, 3, 1, 1), (256, 3, 1, 1),
                     (256, 3, 1, 1)]
    linears = [(m.in_features, m.out_features) for m in model.modules() if isinstance(m, nn.Linear)]
    assert linears == [(9216, 4096), (4096, 4096), (4096, 10)]
    kinds = [type(m) for m in [*model.encoder.features, *model.encoder.fc]]
    for i, kind in enumerate(kinds):  # BatchNorm right after every conv and hidden FC
        if kind in (nn.Conv2d, nn.Linear):
            assert kinds[i + 1] in (nn.BatchNorm2d, nn.BatchNorm1d)
    assert count(model, nn.BatchNorm2d) == 5 and count(model, nn.BatchNorm1d) == 2
    assert count(model, nn.Dropout) == 0 and count(model, nn.MaxPool2d) == 3
    assert sum(p.numel() for p in model.parameters()) == 57_063_498
    assert model.feature_dim == 4096
    model.eval()
    with torch.no_grad():
        assert model.encoder(torch.randn(1, 3, 256, 256)).shape == (1, 4096)


def test_alexnet_bn_too_small_input_says_what_size_fits() -> None:
    with pytest.raises(ValueError, match=r"\(3, 62, 62\).*at least 63"):
        build_backbone("alexnet_bn", (3, 62, 62), 10)
