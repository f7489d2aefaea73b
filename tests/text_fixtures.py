"""Tiny data files in the publishers' formats of the text, sequence and signal sources, written
into a test's tmp folder: AG News CSVs, LEAF Shakespeare JSON, a UCI HAR folder and an
``amazon.npz``. The contents are made up here (seeded), the layouts are the real ones."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from fedlight.data.sources.amazon_review import DOMAINS
from fedlight.data.sources.har import SIGNALS
from fedlight.data.sources.shakespeare import LEAF_LETTERS

_TOPICS = (
    ("talks", "minister", "election", "troops", "capital", "border"),
    ("match", "coach", "season", "striker", "league", "title"),
    ("shares", "profit", "market", "bank", "oil", "quarter"),
    ("software", "chip", "space", "web", "study", "phone"),
)


def write_agnews(folder: Path, train_per_class: int = 12, test_per_class: int = 3,
                 seed: int = 0, vocabulary: int | None = None) -> Path:
    """``train.csv`` / ``test.csv`` as in ag_news_csv: quoted class index 1-4, title,
    description; words drawn from a per-class list, punctuation included. With
    ``vocabulary``, articles of about 40 words drawn from that many made-up words with
    Zipf-like frequencies instead (AG News's size and length, for timing)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    if vocabulary:
        words_of = np.array([f"w{k}" for k in range(vocabulary)])
        frequency = 1.0 / np.arange(1, vocabulary + 1)
        frequency /= frequency.sum()
    for name, per_class in (("train.csv", train_per_class), ("test.csv", test_per_class)):
        with open(folder / name, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle, quoting=csv.QUOTE_ALL)
            for i in range(per_class * 4):
                label = i % 4
                words = (rng.choice(words_of, size=rng.poisson(40) + 3, p=frequency)
                         if vocabulary else rng.choice(_TOPICS[label], size=rng.integers(3, 9)))
                title = " ".join(words[:3]).title() + " (AP)"
                body = f"AP - {' '.join(words)}, said the \"{words[0]}\"; it's {i}."
                writer.writerow([str(label + 1), title, body])
    return folder


def write_shakespeare(folder: Path, roles: int = 4, samples: int = 10, seed: int = 0) -> Path:
    """LEAF's ``train/`` and ``test/`` JSON (80/20 per role) of next-character samples cut
    from a made-up text over LEAF's alphabet."""
    rng = np.random.default_rng(seed)
    letters = np.array(list(LEAF_LETTERS[1:]))  # no newline: readable fixtures
    splits: dict[str, dict] = {"train": {}, "test": {}}
    for r in range(roles):
        user = f"PLAY_ROLE{r}"
        text = "".join(rng.choice(letters, size=samples + 80))
        x = [text[i:i + 80] for i in range(samples)]
        y = [text[i + 80] for i in range(samples)]
        cut = int(0.8 * samples)
        for split, part in (("train", slice(0, cut)), ("test", slice(cut, samples))):
            splits[split][user] = {"x": x[part], "y": y[part]}
    for split, users in splits.items():
        (folder / split).mkdir(parents=True, exist_ok=True)
        record = {"users": list(users), "num_samples": [len(u["y"]) for u in users.values()],
                  "user_data": users, "hierarchies": []}
        (folder / split / f"all_data_niid_0_keep_0_{split}_8.json").write_text(
            json.dumps(record))
    return folder


def write_har(folder: Path, train_subjects: tuple[int, ...] = (1, 3, 5),
              test_subjects: tuple[int, ...] = (2, 4), windows: int = 8, seed: int = 0) -> Path:
    """A ``UCI HAR Dataset`` folder: nine Inertial Signals files of 128 columns, y and subject
    files, per split; ``windows`` windows per subject, activities cycling 1-6."""
    rng = np.random.default_rng(seed)
    base = folder / "UCI HAR Dataset"
    for split, subjects in (("train", train_subjects), ("test", test_subjects)):
        (base / split / "Inertial Signals").mkdir(parents=True, exist_ok=True)
        subject_ids = np.repeat(subjects, windows)
        labels = np.arange(len(subject_ids)) % 6 + 1
        for channel, signal in enumerate(SIGNALS):
            values = rng.normal(size=(len(labels), 128)) * 0.1 + 0.05 * labels[:, None] * (
                channel % 3 + 1)
            np.savetxt(base / split / "Inertial Signals" / f"{signal}_{split}.txt", values,
                       fmt="%.7e")
        np.savetxt(base / split / f"y_{split}.txt", labels, fmt="%d")
        np.savetxt(base / split / f"subject_{split}.txt", subject_ids, fmt="%d")
    return folder


def write_amazon(folder: Path, per_domain: int = 12, features: int = 40, seed: int = 0) -> Path:
    """``amazon.npz`` laid out as the distributed file: a sparse features x samples matrix
    (xx_data, xx_row = feature, xx_col = sample, xx_shape), yy in {-1, 1}, offset."""
    rng = np.random.default_rng(seed)
    samples = per_domain * len(DOMAINS)
    dense = rng.poisson(0.3, size=(features, samples)).astype(np.float64)
    labels = np.where(np.arange(samples) % 2 == 0, 1, -1)
    dense[:5, labels == 1] += 2  # a few words that say "positive"
    rows, cols = np.nonzero(dense)
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "amazon.npz", xx_data=dense[rows, cols], xx_row=rows, xx_col=cols,
             xx_shape=np.array([features, samples]), yy=labels.reshape(-1, 1),
             offset=(np.arange(len(DOMAINS) + 1) * per_domain).reshape(-1, 1))
    return folder
