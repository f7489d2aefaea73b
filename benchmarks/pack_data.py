"""Pack a real-data subset of ../shared/data into one uint8 file for a GPU machine.

A GPU machine receives the project's working tree (at most 64 MiB), not ../shared/data; this
writes a subset, chosen reproducibly, into the ignored folder gpu_data/ as a file the
``packed`` data source reads (``data: {source: packed, root: gpu_data/<file>}``), so the same
configs and sweep files run there:

    python benchmarks/pack_data.py cifar10 --first-per-class 500 100   # 6,000 images
    python benchmarks/pack_data.py cifar100 --xz                        # the shared 25,000
    python benchmarks/pack_data.py office_caltech10 --image-size 64    # all 2,533, 64 x 64

Folders in ``root/train/<class>/*`` + ``root/test/<class>/*`` (cifar10, cifar100, any
imagefolder) keep the first N train and M test files of each class in file-name order
(``data.first_per_class: [N, M]`` selects the same from the folder); Office-Caltech-10 keeps
its four domains (the ``Domains`` partition) and needs ``--image-size``. The file is named after
what it holds (``cifar10_500_100.pt``, ``office_caltech10_64px.pt``); ``.xz`` compresses it
(CIFAR pixels to about 74 %). Printed: the file, its size, the image counts and the SHA-256 of
its pixels (the same on every machine).
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import numpy as np
import torch

from fedlight.data.sources.images import class_folders, decode_images
from fedlight.data.sources.packed import read_packed, write_packed

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
DOMAIN_SOURCES = {"office_caltech10"}


def pack_imagefolder(root: Path, first: tuple[int, int] | None, image_size: int | None
                     ) -> dict[str, object]:
    """The train and test splits of ``root/{train,test}/<class>/*``, the first files of each
    class in file-name order."""
    layout = "root/train/<class>/* and root/test/<class>/*"
    record: dict[str, object] = {}
    classes: list[str] = []
    for split, count in zip(("train", "test"), first or (None, None), strict=True):
        files, labels, classes = class_folders(root / split, "pack_data", layout,
                                               classes or None, first=count)
        images = decode_images(f"pack-{root.name}-{split}", files, image_size, layout)
        record[f"x_{split}"] = torch.from_numpy(images)
        record[f"y_{split}"] = torch.from_numpy(labels)
    record["classes"] = classes
    return record


def pack_domains(root: Path, image_size: int) -> dict[str, object]:
    """Every image of ``root/<domain>/<class>/*`` (Office-Caltech-10's layout) as the train
    split, with its domain id."""
    from fedlight.data.sources.office_caltech10 import CLASSES, DOMAINS, LAYOUT

    images, labels, domains = [], [], []
    for index, domain in enumerate(DOMAINS):
        files, domain_labels, _ = class_folders(root / domain, "pack_data", LAYOUT, CLASSES)
        images.append(decode_images(f"pack-{root.name}-{domain}", files, image_size, LAYOUT))
        labels.append(domain_labels)
        domains.append(np.full(len(files), index, np.int64))
    return {"x_train": torch.from_numpy(np.concatenate(images)),
            "y_train": torch.from_numpy(np.concatenate(labels)),
            "domains_train": torch.from_numpy(np.concatenate(domains)),
            "domain_names": list(DOMAINS), "classes": list(CLASSES)}


def file_name(dataset: str, first: tuple[int, int] | None, image_size: int | None,
              xz: bool) -> str:
    parts = [dataset, *(map(str, first) if first else []),
             *([f"{image_size}px"] if image_size else [])]
    return "_".join(parts) + ".pt" + (".xz" if xz else "")


def pixels_digest(record: dict[str, object]) -> str:
    digest = hashlib.sha256()
    for key in ("x_train", "y_train", "x_test", "y_test"):
        value = record.get(key)
        if isinstance(value, torch.Tensor):
            digest.update(value.numpy().tobytes())
    return digest.hexdigest()


def pack(dataset: str, root: Path, out: Path, first: tuple[int, int] | None = None,
         image_size: int | None = None, xz: bool = False) -> Path:
    """Pack ``dataset`` read from ``root`` into ``out``/<name>; returns the file written."""
    if dataset in DOMAIN_SOURCES:
        if image_size is None or first is not None:
            raise SystemExit(f"{dataset}: give --image-size (its images differ in size); "
                             "--first-per-class applies to train/test class folders")
        record = pack_domains(root, image_size)
    else:
        record = pack_imagefolder(root, first, image_size)
    record["packed_from"] = {"dataset": dataset, "folder": root.name,
                             "first_per_class": list(first) if first else None,
                             "image_size": image_size}
    return write_packed(out / file_name(dataset, first, image_size, xz), record)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="a folder of ../shared/data (cifar10, cifar100, "
                        "office_caltech10) or any name with --root")
    parser.add_argument("--root", type=Path, help="the dataset's folder (default: "
                        "../shared/data/<dataset>)")
    parser.add_argument("--first-per-class", type=int, nargs=2, metavar=("TRAIN", "TEST"),
                        help="keep the first TRAIN / TEST files of each class (file-name order)")
    parser.add_argument("--image-size", type=int, help="resize to this square side")
    parser.add_argument("--xz", action="store_true", help="compress the file (xz)")
    parser.add_argument("--out", type=Path, default=ROOT / "gpu_data")
    args = parser.parse_args()
    root = args.root or SHARED / args.dataset
    first = tuple(args.first_per_class) if args.first_per_class else None
    path = pack(args.dataset, root, args.out, first, args.image_size, args.xz)
    record = read_packed(path)
    tests = record.get("y_test")
    print(f"{path}: {path.stat().st_size / 2**20:.1f} MiB, {len(record['y_train'])} train / "
          f"{0 if tests is None else len(tests)} test images, "
          f"pixels sha256 {pixels_digest(record)[:16]}")

if __name__ == "__main__":
    main()
