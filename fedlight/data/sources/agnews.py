"""AG News (Zhang, Zhao and LeCun, NeurIPS 2015) read from its distributed CSV files.

``root`` holds ``train.csv`` (120,000 rows) and ``test.csv`` (7,600 rows) of the
``ag_news_csv`` distribution; ``download: true`` fetches them from :data:`URLS`. Each row is
three quoted fields: the class index 1-4 (World, Sports, Business, Sci/Tech), the title and
the description. A row with another number of fields, a class index outside 1-4 or broken
quoting is a one-line error naming the file and line.

Text to token ids, deterministically (nothing depends on the seed, the machine or the order
in which files are listed):

* the text of a row is ``title + " " + description``;
* tokenizer (:func:`tokenize`): the rules of torchtext's ``basic_english``, which GPFL's and
  PFLlib's AG News generator uses: lower-case; ``'``, ``.``, ``,``, ``(``, ``)``, ``!``, ``?``
  become separate tokens; ``"`` is dropped; ``;``, ``:`` and ``<br />`` become spaces; split
  on white space;
* vocabulary (:func:`build_vocabulary`): id 0 is the padding token ``<pad>``; ids 1, 2, ...
  are every token of both splits (as that generator builds it, so its size is GPFL's 98,635
  tokens plus the padding token), most frequent first, ties in code-point order;
* a row becomes its first :data:`MAX_TOKENS` (200, GPFL's ``max_len``) token ids, padded
  with 0 to that length: ``x`` is int64 ``(N, 200)``.

Padded ids, not EmbeddingBag offsets: every sample is then one fixed-shape row, so the
in-memory batching by index, the partitioners, device transfers, checkpoints and the Flower
path handle text exactly as they handle images; a bag-of-embeddings backbone skips the
padding (``padding_idx=0``). AG News rows average about 45 tokens, so most of a row is
padding, which costs memory (200 MB for the whole set) but no accuracy.

The run folder of a run on this source holds ``vocab.json`` (the id -> token list) and its
checkpoints record the vocabulary's size and SHA-256, so a resumed or evaluated run is
refused if its files would give another vocabulary.
"""

from __future__ import annotations

import csv
import functools
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch

from fedlight.data.sources.base import DownloadableSource, SourceData
from fedlight.data.sources.files import DataFormatError, download_files, missing_files, require_root

NAME = "agnews"
FILES = ("train.csv", "test.csv")
#: Where ``download: true`` fetches the CSV files (the ag_news_csv files torchtext reads).
URLS = {f: f"https://raw.githubusercontent.com/mhjabreel/CharCnn_Keras/master/data/"
           f"ag_news_csv/{f}" for f in FILES}
CLASSES = ("World", "Sports", "Business", "Sci/Tech")
MAX_TOKENS = 200
PAD = "<pad>"

# basic_english: characters split off as their own token, and characters that become spaces.
_SPLIT_OFF = "'.,()!?"
_TO_SPACE = ";:"
_TOKEN_TABLE = str.maketrans({**{c: f" {c} " for c in _SPLIT_OFF},
                              **{c: " " for c in _TO_SPACE}, '"': ""})


def tokenize(text: str) -> list[str]:
    """The tokens of ``text`` by torchtext's ``basic_english`` rules (see the module doc)."""
    return text.lower().replace("<br />", " ").translate(_TOKEN_TABLE).split()


def build_vocabulary(documents: Iterable[list[str]]) -> list[str]:
    """``<pad>`` followed by every token of ``documents``, most frequent first, ties in
    code-point order: the same list for the same documents in any order."""
    counts = Counter(token for tokens in documents for token in tokens)
    return [PAD, *sorted(counts, key=lambda token: (-counts[token], token))]


def encode(documents: list[list[str]], vocab: list[str], length: int = MAX_TOKENS) -> np.ndarray:
    """int64 ``(N, length)``: each document's first ``length`` token ids, 0-padded."""
    index = {token: i for i, token in enumerate(vocab)}
    ids = np.zeros((len(documents), length), dtype=np.int64)
    for row, tokens in enumerate(documents):
        kept = [index[t] for t in tokens[:length]]
        ids[row, :len(kept)] = kept
    return ids


def read_csv(path: Path) -> tuple[np.ndarray, list[list[str]]]:
    """Labels 0-3 and tokenized ``title description`` of one AG News CSV file.

    Raises:
        DataFormatError: a row that is not ``class index 1-4, title, description``.
    """
    labels: list[int] = []
    documents: list[list[str]] = []
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, strict=True)
        while True:
            line = reader.line_num + 1  # where the next row starts (a row may span lines)
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error as err:
                raise DataFormatError(path, line, f"malformed CSV ({err}); expected three "
                                      "quoted fields: class index 1-4, title, description"
                                      ) from err
            labels.append(_label(path, line, row))
            documents.append(tokenize(f"{row[1]} {row[2]}"))
    if not labels:
        raise DataFormatError(path, None, "holds no rows; expected one row per news item: "
                              "class index 1-4, title, description")
    return np.asarray(labels, dtype=np.int64), documents


def _label(path: Path, line: int, row: list[str]) -> int:
    if len(row) != 3:
        raise DataFormatError(path, line, f"expected 3 fields (class index 1-4, title, "
                              f"description), got {len(row)}")
    if row[0].strip() not in ("1", "2", "3", "4"):
        raise DataFormatError(path, line, f"class index {row[0]!r} is invalid; valid: 1-4")
    return int(row[0]) - 1


@functools.lru_cache(maxsize=1)
def _load(root: str | None, download: bool) -> SourceData:
    folder = require_root(NAME, root, "AG News's train.csv and test.csv")
    if download:
        download_files(NAME, URLS, folder)
    if not all((folder / f).is_file() for f in FILES):
        raise missing_files(NAME, folder, FILES, "set `download: true` "
                            "(data.source.init_args.download) to fetch them, or put the "
                            "ag_news_csv files there")
    y_train, train_docs = read_csv(folder / FILES[0])
    y_test, test_docs = read_csv(folder / FILES[1])
    vocab = build_vocabulary([*train_docs, *test_docs])
    return SourceData(
        x_train=torch.from_numpy(encode(train_docs, vocab)), y_train=torch.from_numpy(y_train),
        x_test=torch.from_numpy(encode(test_docs, vocab)), y_test=torch.from_numpy(y_test),
        num_classes=len(CLASSES), vocab=vocab,
    )


class AGNews(DownloadableSource):
    """AG News: four classes of news, title and description as token ids.

    root: the folder of the dataset's files (see the module doc).
    """

    name = NAME

    def read(self, seed: int) -> SourceData:
        return _load(self.root, bool(self.download))


__all__ = ["CLASSES", "MAX_TOKENS", "URLS", "build_vocabulary", "encode", "AGNews", "read_csv",
           "tokenize"]
