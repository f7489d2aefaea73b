"""Partition statistics: per-client sample counts and label histograms, as a JSON-ready
dict, a plain-text table and a clients x classes heatmap."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from fedlight.core.errors import ConfigError
from fedlight.plotting import client_labels, integer_axis, save_figure

__all__ = ["format_stats_table", "partition_stats", "save_heatmap"]

_SPARK = "·▁▂▃▄▅▆▇█"  # "·" is an absent class
_SPARK_MAX_CLASSES = 40  # above this the histogram column lists the largest classes instead
_TOP_CLASSES = 4


def _label_counts(labels: np.ndarray, num_classes: int, which: str, client: int) -> list[int]:
    labels = np.asarray(labels, dtype=np.int64).reshape(-1)
    bad = labels[(labels < 0) | (labels >= num_classes)]
    if len(bad):
        raise ConfigError(
            f"client {client} has {which} label {bad[0]} outside 0..{num_classes - 1} "
            f"(num_classes={num_classes})"
        )
    return [int(n) for n in np.bincount(labels, minlength=num_classes)]


def partition_stats(
    train_labels: list[np.ndarray], test_labels: list[np.ndarray], num_classes: int
) -> dict[str, Any]:
    """Count samples and labels per client.

    Args:
        train_labels: the labels of each client's train samples, one array per client.
        test_labels: the same for each client's test samples.
        num_classes: length of every label histogram.

    Returns:
        A JSON-serializable dict (Python ints only): ``num_clients``, ``num_classes``,
        ``clients`` (one dict per client: ``client``, ``train_samples``, ``test_samples``,
        ``train_label_counts``, ``test_label_counts``), ``total_train`` and ``total_test``.
    """
    if len(train_labels) != len(test_labels):
        raise ValueError(
            f"got train labels for {len(train_labels)} clients but test labels for "
            f"{len(test_labels)}; give one array of each per client"
        )
    clients = []
    for i, (train, test) in enumerate(zip(train_labels, test_labels, strict=True)):
        train_counts = _label_counts(train, num_classes, "train", i)
        test_counts = _label_counts(test, num_classes, "test", i)
        clients.append(
            {
                "client": i,
                "train_samples": sum(train_counts),
                "test_samples": sum(test_counts),
                "train_label_counts": train_counts,
                "test_label_counts": test_counts,
            }
        )
    return {
        "num_clients": len(clients),
        "num_classes": int(num_classes),
        "clients": clients,
        "total_train": sum(c["train_samples"] for c in clients),
        "total_test": sum(c["test_samples"] for c in clients),
    }


def _histogram(counts: list[int]) -> str:
    """Compact label histogram: a sparkline over classes, or the largest classes."""
    if len(counts) <= _SPARK_MAX_CLASSES:
        top = max(counts) or 1
        return "".join(
            _SPARK[0] if n == 0 else _SPARK[max(1, round(n / top * (len(_SPARK) - 1)))]
            for n in counts
        )
    largest = sorted((c for c, n in enumerate(counts) if n), key=lambda c: -counts[c])
    shown = " ".join(f"{c}:{counts[c]}" for c in largest[:_TOP_CLASSES])
    more = len(largest) - _TOP_CLASSES
    return shown + (f" (+{more} classes)" if more > 0 else "")


def _row(client: dict[str, Any]) -> list[str]:
    present = sum(1 for n in client["train_label_counts"] if n)
    return [
        str(client["client"]),
        str(client["train_samples"]),
        str(client["test_samples"]),
        str(present),
        _histogram(client["train_label_counts"]),
    ]


def _summary(stats: dict[str, Any]) -> str:
    train = np.array([c["train_samples"] for c in stats["clients"]])
    present = np.array([sum(1 for n in c["train_label_counts"] if n) for c in stats["clients"]])
    return (
        f"{stats['num_clients']} clients, {stats['num_classes']} classes; "
        f"train {stats['total_train']} (per client min {train.min()}, mean {train.mean():.1f}, "
        f"max {train.max()}), test {stats['total_test']}\n"
        f"classes per client min {present.min()}, mean {present.mean():.1f}, max {present.max()}"
    )


def format_stats_table(stats: dict[str, Any], max_rows: int = 30) -> str:
    """Render `partition_stats` output as a plain-text table with a summary line.

    Columns: client, train samples, test samples, classes present in train, and a compact
    train label histogram (a sparkline over classes; the largest classes above 40 classes).
    With more than `max_rows` clients, the first and last rows are shown and the middle is
    elided.
    """
    header = ["client", "train", "test", "classes", "train labels"]
    clients = stats["clients"]
    if not clients:
        return "0 clients"
    rows = [_row(c) for c in clients]
    elided = 0
    if len(rows) > max_rows:
        head, tail = (max_rows + 1) // 2, max_rows // 2
        elided = len(rows) - head - tail
        rows = rows[:head] + [["..."] * 4 + [""]] + (rows[-tail:] if tail else [])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]

    def line(cells: list[str]) -> str:
        numbers = "  ".join(cell.rjust(width) for cell, width in zip(cells, widths, strict=False))
        return f"{numbers}  {cells[-1]}".rstrip()

    out = [line(header), line(["-" * w for w in widths] + ["-" * len(header[-1])])]
    out += [line(r) for r in rows]
    if elided:
        out.append(f"({elided} clients not shown)")
    out.append(_summary(stats))
    return "\n".join(out)


def save_heatmap(stats: dict[str, Any], path: str | Path,
                 formats: Iterable[str] | None = None) -> list[Path]:
    """Draw the clients x classes train-sample counts of `partition_stats` output as a heatmap
    (with a colorbar) at `path`, creating its folder, in each of `formats` (default PNG; see
    :mod:`fedlight.plotting`). Clients are named by ``stats["client_names"]`` where the data
    names them (domains), else numbered. Returns the files written."""
    counts = np.array([c["train_label_counts"] for c in stats["clients"]], dtype=np.int64).reshape(
        len(stats["clients"]), stats["num_classes"]
    )
    names = client_labels(counts.shape[0], stats.get("client_names"))
    named = names != [str(k) for k in range(counts.shape[0])]

    def draw(axes: Any) -> None:
        ax = axes[0][0]
        image = ax.imshow(counts, aspect="auto", interpolation="nearest", cmap="viridis")
        ax.figure.colorbar(image, ax=ax, label="train samples")
        integer_axis(ax.xaxis)
        if named:
            ax.set_yticks(range(len(names)), names)
        else:
            integer_axis(ax.yaxis)
        ax.set_xlabel("class")
        ax.set_ylabel("client")
        ax.set_title(f"train samples per client and class ({counts.shape[0]} clients)")
        ax.grid(False)

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    width = min(16.0, 3.0 + 0.25 * counts.shape[1])
    height = min(16.0, 2.0 + 0.2 * counts.shape[0])
    return save_figure(path, draw, (width, height), formats=formats)
