"""Tiny dataset files in each publisher's layout, written into a test's tmp folder.

Every writer draws its pixels from a seeded generator and gives each class its own mean
brightness, so a model can learn something in one round; sizes are a few images per class.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
from PIL import Image

from fedlight.data.sources.cinic10 import CLASSES as CINIC_CLASSES
from fedlight.data.sources.digits5_real import DOMAINS as DIGITS_DOMAINS
from fedlight.data.sources.domainnet10 import CLASSES as DOMAINNET_CLASSES
from fedlight.data.sources.domainnet10 import DOMAINS as DOMAINNET_DOMAINS
from fedlight.data.sources.office_caltech10 import CLASSES as OFFICE_CLASSES
from fedlight.data.sources.office_caltech10 import DOMAINS as OFFICE_DOMAINS
from tests.text_fixtures import write_agnews, write_amazon, write_har, write_shakespeare


def pixels(rng: np.random.Generator, label: int, shape: tuple[int, ...]) -> np.ndarray:
    """uint8 noise around a brightness that depends on the label."""
    centre = 40 + 17 * (label % 12)
    return np.clip(rng.normal(centre, 20, shape), 0, 255).astype(np.uint8)


def write_image(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path)


def class_tree(folder: Path, classes: tuple[str, ...] | list[str], per_class: int,
               rng: np.random.Generator, size: int = 8, suffix: str = ".png",
               grey: bool = False, inner: str = "", vary: bool = False) -> None:
    """``folder/<class>/<inner>/<class>_<i><suffix>`` images; `vary` gives them different sizes."""
    for label, name in enumerate(classes):
        for i in range(per_class):
            side = size + (i % 3 if vary else 0)
            shape = (side, side) if grey else (side, side + (i % 2 if vary else 0), 3)
            write_image(folder / name / inner / f"{name}_{i}{suffix}", pixels(rng, label, shape))


def imagefolder(root: Path, classes: int = 3, per_class: int = 4, grey: bool = False) -> Path:
    rng = np.random.default_rng(0)
    names = [f"class{c}" for c in range(classes)]
    class_tree(root / "train", names, per_class, rng, grey=grey)
    class_tree(root / "test", names, max(1, per_class // 2), rng, grey=grey)
    return root


def tinyimagenet(root: Path, classes: int = 4, per_class: int = 6) -> Path:
    """``root/tiny-imagenet-200`` with wnids.txt, train/<wnid>/images and val annotations."""
    rng = np.random.default_rng(1)
    folder = root / "tiny-imagenet-200"
    wnids = [f"n0{1440764 + 7 * c}" for c in range(classes)]
    folder.mkdir(parents=True)
    (folder / "wnids.txt").write_text("\n".join(reversed(wnids)) + "\n")
    class_tree(folder / "train", wnids, per_class, rng, size=16, suffix=".JPEG", inner="images")
    (folder / "train" / wnids[0] / f"{wnids[0]}_boxes.txt").write_text("")
    lines = []
    for i in range(2 * classes):
        label = i % classes
        name = f"val_{i}.JPEG"
        image = pixels(rng, label, (16, 16) if i == 0 else (16, 16, 3))  # one grey, as in the set
        write_image(folder / "val" / "images" / name, image)
        lines.append(f"{name}\t{wnids[label]}\t0\t0\t15\t15")
    (folder / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    return root


def cinic10(root: Path, per_class: int = 3) -> Path:
    rng = np.random.default_rng(2)
    for split in ("train", "valid", "test"):
        class_tree(root / split, CINIC_CLASSES, per_class, rng)
    return root


def leaf_file(path: Path, users: list[str], counts: list[int], rng: np.random.Generator) -> None:
    data = {}
    for user, count in zip(users, counts, strict=True):
        labels = rng.integers(0, 62, count)
        x = [(pixels(rng, int(y), (784,)) / 255).round(6).tolist() for y in labels]
        data[user] = {"x": x, "y": labels.tolist()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"users": users, "num_samples": counts, "user_data": data}))


def femnist(root: Path, writers: int = 6) -> Path:
    """LEAF's ``data/train`` and ``data/test`` (two JSON files each, writers split across them)."""
    rng = np.random.default_rng(3)
    users = [f"f{3000 + w}_{w % 10:02d}" for w in range(writers)]
    half = writers // 2
    for split, count in (("train", 9), ("test", 3)):
        for part, block in enumerate((users[:half], users[half:])):
            leaf_file(root / "data" / split / f"all_data_{part}_niid_1_keep_0_{split}_9.json",
                      block, [count + i for i in range(len(block))], rng)
    return root


def office_caltech10(root: Path, per_class: int = 3) -> Path:
    rng = np.random.default_rng(4)
    for domain in OFFICE_DOMAINS:
        class_tree(root / domain, OFFICE_CLASSES, per_class, rng, suffix=".jpg", vary=True)
    return root


def domainnet10(root: Path, per_class: int = 3) -> Path:
    """Six domains with the 10 classes plus one other class the loader must skip."""
    rng = np.random.default_rng(5)
    classes = [*DOMAINNET_CLASSES, "aircraft_carrier"]
    official = sorted(classes)  # DomainNet's labels number its 345 classes alphabetically
    for domain in DOMAINNET_DOMAINS:
        class_tree(root / domain, classes, per_class, rng, suffix=".jpg", vary=True)
        for split, picks in (("train", range(per_class - 1)), ("test", [per_class - 1])):
            lines = [f"{domain}/{name}/{name}_{i}.jpg {official.index(name)}"
                     for name in classes for i in picks]
            (root / f"{domain}_{split}.txt").write_text("\n".join(lines) + "\n")
    return root


def digits5_real(root: Path, per_class: int = 3) -> Path:
    """FedBN's pickled (images, labels) pairs: grey 28 / 16 px and colour 32 / 28 px; MNIST as
    one train.pkl, the others as two partitions/train_part<k>.pkl slices."""
    rng = np.random.default_rng(6)
    shapes = {"MNIST": (28, 28), "SVHN": (32, 32, 3), "USPS": (16, 16),
              "SynthDigits": (32, 32, 3), "MNIST_M": (28, 28, 3)}
    for domain in DIGITS_DOMAINS:
        labels = np.repeat(np.arange(10), per_class)
        trains = (["train.pkl"] if domain == "MNIST" else  # FedBN's whole split, or its slices
                  ["partitions/train_part0.pkl", "partitions/train_part1.pkl"])
        for name in (*trains, "test.pkl"):
            images = np.stack([pixels(rng, int(y), shapes[domain]) for y in labels])
            path = root / domain / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(pickle.dumps((images, labels)))
    return root


WRITERS = {
    "imagefolder": imagefolder, "tinyimagenet": tinyimagenet, "cinic10": cinic10,
    "femnist": femnist, "office_caltech10": office_caltech10, "domainnet10": domainnet10,
    "digits5_real": digits5_real,
    # text, character sequences, sensor signals, review features (tests/text_fixtures.py)
    "agnews": write_agnews, "shakespeare": write_shakespeare, "har": write_har,
    "amazon_review": write_amazon,
}
"""Source name -> writer of its tiny files (``writer(root) -> root``)."""
