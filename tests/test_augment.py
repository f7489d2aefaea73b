"""Training-batch augmentation: each operation does what it says, draws only from the
generator it is given (same state, same batch; another client or round, another batch), keeps
the batch's shape, dtype, device and memory format, and is off unless asked for."""

from __future__ import annotations

import pytest
import torch
from torchvision.transforms.v2 import functional as TF

from fedlight.core.errors import ConfigError
from fedlight.data import FederatedDataModule
from fedlight.data.augment import Augment, BatchAugmentation, affine_resample, jitter_pixels
from fedlight.data.partitions.iid import IID
from fedlight.data.sources.mnist5k import MNIST5k
from fedlight.data.sources.synthetic import Synthetic

SHAPE = (3, 8, 8)
MEAN = torch.tensor([0.5, 0.4, 0.3]).view(1, 3, 1, 1)
STD = torch.tensor([0.2, 0.25, 0.3]).view(1, 3, 1, 1)


def batch(n: int = 16, seed: int = 0) -> torch.Tensor:
    """Standardized pixels of n random colour images."""
    pixels = torch.rand((n, *SHAPE), generator=torch.Generator().manual_seed(seed))
    return (pixels - MEAN) / STD


def augmentation(**options) -> BatchAugmentation:
    return BatchAugmentation(Augment(**options), SHAPE, (MEAN, STD))


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


ALL_ON = dict(crop_padding=2, hflip=True, rotation=20.0, color_jitter=[0.4, 0.4, 0.4])


@pytest.mark.parametrize("options", [ALL_ON, {"hflip": True}, {"crop_padding": 2},
                                     {"color_jitter": [0.3, 0.3, 0.3]}], ids=str)
def test_same_generator_state_same_batch_other_seed_other_batch(options) -> None:
    augment, x = augmentation(**options), batch()
    first = augment(x, generator(7))
    assert torch.equal(first, augment(x, generator(7)))
    assert not torch.equal(first, augment(x, generator(8)))  # another client or round
    assert not torch.equal(first, x)


def test_draws_come_only_from_the_given_generator() -> None:
    augment, x = augmentation(**ALL_ON), batch()
    torch.manual_seed(0)
    first = augment(x, generator(3))
    torch.manual_seed(1)  # the global RNG plays no part
    assert torch.equal(first, augment(x, generator(3)))
    stream = generator(3)  # a resumed stream continues where it was
    augment(x, stream)
    state = stream.get_state()
    second = augment(x, stream)
    resumed = torch.Generator()
    resumed.set_state(state)
    assert torch.equal(second, augment(x, resumed))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_shape_dtype_and_memory_format_are_kept(dtype) -> None:
    augment = augmentation(**ALL_ON)
    x = batch().to(dtype)
    out = augment(x, generator(0))
    assert out.shape == x.shape and out.dtype == dtype and out.device == x.device
    last = x.contiguous(memory_format=torch.channels_last)
    out = augment(last, generator(0))
    assert out.is_contiguous(memory_format=torch.channels_last)
    stacked = x.reshape(2, 8, *SHAPE)  # leading dimensions (clients of a batched step)
    assert augment(stacked, generator(0)).shape == stacked.shape


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_runs_on_the_device_of_the_batch() -> None:
    augment, x = augmentation(**ALL_ON), batch().cuda()
    out = augment(x, generator(0))
    assert out.device == x.device
    torch.testing.assert_close(out.cpu(), augment(x.cpu(), generator(0)), atol=1e-5, rtol=0)


def test_hflip_flips_about_half_of_the_images_and_nothing_else() -> None:
    x = batch(64)
    out = augmentation(hflip=True)(x, generator(0))
    flipped = [torch.equal(o, i.flip(-1)) for o, i in zip(out, x, strict=True)]
    kept = [torch.equal(o, i) for o, i in zip(out, x, strict=True)]
    assert all(f or k for f, k in zip(flipped, kept, strict=True))
    assert 16 < sum(flipped) < 48


def test_crop_with_padding_shifts_content_and_fills_black() -> None:
    x = batch(32)
    out = augmentation(crop_padding=2)(x, generator(0))
    black = (-MEAN / STD)[0]
    shifted = 0
    for o, i in zip(out, x, strict=True):
        matches = [(dy, dx) for dy in range(-2, 3) for dx in range(-2, 3)
                   if torch.equal(o, shift_reference(i, dy, dx, black))]
        assert len(matches) == 1
        shifted += matches[0] != (0, 0)
    assert shifted > 20  # 24 of 25 offsets move the image


def shift_reference(image: torch.Tensor, dy: int, dx: int, fill: torch.Tensor) -> torch.Tensor:
    """Pad by 2 with fill, crop at (2 + dy, 2 + dx): torchvision's RandomCrop at that offset."""
    padded = fill.expand(3, 12, 12).clone()
    padded[:, 2:10, 2:10] = image
    return padded[:, 2 + dy:10 + dy, 2 + dx:10 + dx]


def test_rotation_zero_is_identity_and_rotations_match_torchvision() -> None:
    x = batch(4)
    none = torch.zeros(4)
    fill = torch.zeros(1, 3, 1, 1)
    assert torch.equal(affine_resample(x, fill, angle=none), x)
    angles = torch.tensor([90.0, -90.0, 30.0, 180.0])
    out = affine_resample(x, fill, angle=angles)
    for o, i, a in zip(out, x, angles.tolist(), strict=True):
        assert torch.equal(o, TF.rotate(i, a))  # nearest pixel, zero fill, counter-clockwise
    assert torch.equal(out[0], torch.rot90(x[0], 1, (1, 2)))


def test_random_rotation_stays_within_its_range() -> None:
    x = batch(8)
    out = augmentation(rotation=10.0)(x, generator(0))
    assert not torch.equal(out, x)
    # rotations of at most 10 degrees keep the centre pixels where they were
    for o, i in zip(out, x, strict=True):
        assert torch.equal(o[:, 3:5, 3:5], i[:, 3:5, 3:5])


def test_color_jitter_matches_torchvisions_formulas_image_by_image() -> None:
    pixels = torch.rand(6, 3, 5, 5, generator=generator(0))
    factors = torch.tensor([[1.3, 0.7, 1.5], [0.6, 1.4, 0.2], [1.0, 1.0, 1.0]] * 2)
    out = jitter_pixels(pixels.clone(), factors)
    for o, p, (b, c, s) in zip(out, pixels, factors.tolist(), strict=True):
        reference = TF.adjust_saturation(TF.adjust_contrast(TF.adjust_brightness(p, b), c), s)
        torch.testing.assert_close(o, reference, atol=1e-6, rtol=0)
    torch.testing.assert_close(out[2], pixels[2])  # factors 1: unchanged


def test_color_jitter_keeps_pixels_in_range_and_changes_colours() -> None:
    x = batch()
    out = augmentation(color_jitter=[0.5, 0.5, 0.5])(x, generator(0))
    pixels = out * STD + MEAN
    assert pixels.min() >= -1e-6 and pixels.max() <= 1 + 1e-6
    assert not torch.allclose(out, x)


def test_bad_options_are_one_line_errors() -> None:
    with pytest.raises(ConfigError, match="crop_padding=-1"):
        Augment(crop_padding=-1)
    with pytest.raises(ConfigError, match="rotation=200"):
        Augment(rotation=200)
    with pytest.raises(ConfigError, match=r"color_jitter=\[0.4\]"):
        Augment(color_jitter=[0.4])
    with pytest.raises(ConfigError, match="needs image inputs"):
        BatchAugmentation(Augment(hflip=True), (20,), None)
    with pytest.raises(ConfigError, match="color_jitter needs a source of image pixels"):
        BatchAugmentation(Augment(color_jitter=[0.1, 0.1, 0.1]), SHAPE, None)


def test_the_data_module_is_off_by_default_and_builds_it_when_asked() -> None:
    options = dict(source=MNIST5k(), partition=IID(), num_clients=4)
    assert FederatedDataModule(**options).augmentation is None
    assert FederatedDataModule(**options, augment={"hflip": False}).augmentation is None
    data = FederatedDataModule(**options, augment={"crop_padding": 2, "hflip": True})
    augment = data.augmentation
    assert isinstance(augment, BatchAugmentation)
    assert data.hparams["augment"] == {"crop_padding": 2, "hflip": True, "rotation": 0.0,
                                       "color_jitter": None}
    x, _ = data.client_train(0)
    out = augment(x[:10], generator(0))
    black = float(-data.data.pixel_standardization[0][0, 0, 0, 0]
                  / data.data.pixel_standardization[1][0, 0, 0, 0])
    assert out.shape == x[:10].shape and (out == black).any()  # padding is a black pixel
    with pytest.raises(ConfigError, match="unknown option 'flip'"):
        FederatedDataModule(**options, augment={"flip": True})


def test_the_data_module_refuses_augmenting_non_images() -> None:
    data = FederatedDataModule(source=Synthetic(shape=(20,)), partition=IID(), num_clients=4,
                               augment={"hflip": True})
    with pytest.raises(ConfigError, match="needs image inputs"):
        data.setup()
