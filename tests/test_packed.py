"""benchmarks/pack_data.py and the ``packed`` source: a packed subset of a folder gives the
tensors the folder source gives with the same selection, domains survive, the file is the same
byte for byte on a second packing, and bad files are one-line errors."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import dataset_files
import pytest
import torch

from fedlight.core.errors import ConfigError, DamagedFileError, MissingFileError
from fedlight.data import FederatedDataModule
from fedlight.data.partitions.domains import Domains
from fedlight.data.sources.imagefolder import ImageFolder
from fedlight.data.sources.office_caltech10 import OfficeCaltech10
from fedlight.data.sources.packed import Packed

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "pack_data.py"
spec = importlib.util.spec_from_file_location("pack_data", SCRIPT)
pack_data = importlib.util.module_from_spec(spec)
sys.modules["pack_data"] = pack_data
spec.loader.exec_module(pack_data)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDLIGHT_CACHE", str(tmp_path / "cache"))


def same(a, b) -> None:
    for key in ("x_train", "y_train", "x_test", "y_test"):
        assert torch.equal(getattr(a, key), getattr(b, key)), key
    assert a.num_classes == b.num_classes
    for left, right in zip(a.pixel_standardization, b.pixel_standardization, strict=True):
        assert torch.equal(left, right)


@pytest.mark.parametrize("xz", [False, True])
def test_a_packed_imagefolder_subset_loads_as_the_folder_source_does(tmp_path, xz):
    root = dataset_files.imagefolder(tmp_path / "cifar", classes=3, per_class=4)
    path = pack_data.pack("cifar", root, tmp_path / "gpu_data", (3, 1), None, xz)
    assert path.name == "cifar_3_1.pt" + (".xz" if xz else "")
    packed = Packed(root=path).load()
    same(packed, ImageFolder(root=root, first_per_class=[3, 1]).load())
    assert len(packed.y_train) == 9 and len(packed.y_test) == 3
    resized = Packed(root=path, image_size=4).load()  # options of every image source
    assert resized.input_shape == (3, 4, 4)


def test_packing_twice_writes_the_same_bytes(tmp_path):
    root = dataset_files.imagefolder(tmp_path / "cifar")
    first = pack_data.pack("cifar", root, tmp_path / "a", (2, 2)).read_bytes()
    assert pack_data.pack("cifar", root, tmp_path / "b", (2, 2)).read_bytes() == first


def test_a_packed_cross_domain_set_keeps_its_domains(tmp_path):
    root = dataset_files.office_caltech10(tmp_path / "office", per_class=2)
    path = pack_data.pack("office_caltech10", root, tmp_path / "gpu_data", image_size=8)
    assert path.name == "office_caltech10_8px.pt"
    packed = Packed(root=path).load()
    same_domains = OfficeCaltech10(root=root, image_size=8).load()
    assert torch.equal(packed.x_train, same_domains.x_train)
    assert packed.domains_train.tolist() == same_domains.domains_train.tolist()
    assert packed.domain_names == same_domains.domain_names
    data = FederatedDataModule(source=Packed(root=str(path)), partition=Domains(), num_clients=4,
                               train_fraction=0.5)
    data.setup()
    assert [len(set(data.data.domains_train[s.train])) for s in data.splits] == [1] * 4
    with pytest.raises(SystemExit, match="give --image-size"):
        pack_data.pack("office_caltech10", root, tmp_path / "gpu_data")


def test_the_script_prints_what_it_wrote(tmp_path, monkeypatch, capsys):
    root = dataset_files.imagefolder(tmp_path / "cifar")
    monkeypatch.setattr(sys, "argv", ["pack_data.py", "cifar", "--root", str(root),
                                      "--first-per-class", "2", "1", "--out",
                                      str(tmp_path / "out")])
    pack_data.main()
    printed = capsys.readouterr().out
    assert "cifar_2_1.pt" in printed and "6 train / 3 test images" in printed


def test_a_missing_or_foreign_file_is_a_one_line_error(tmp_path):
    with pytest.raises(MissingFileError, match="does not exist; write it with"):
        Packed(root=tmp_path / "none.pt").load()
    foreign = tmp_path / "foreign.pt"
    torch.save({"x": torch.zeros(2)}, foreign)
    with pytest.raises(DamagedFileError, match="has format None, not 'fedlight-packed-1'"):
        Packed(root=foreign).load()
    broken = tmp_path / "broken.pt.xz"
    broken.write_bytes(b"not xz")
    with pytest.raises(DamagedFileError, match="is not a packed dataset"):
        Packed(root=broken).load()
    with pytest.raises(ConfigError, match=r"set root \(data.source.init_args.root\) to it"):
        Packed().load()
