"""Why a privatization way's shared model scores what it does: a diagnosis of finished runs.

Reads run folders of ``Privatize`` (ways with a complete shared model: AB, AaB, ABb, AaBb) and
Auto* clients, e.g. those of ``fedlight sweep benchmarks/sweeps/privatize_ways.yaml``, and
prints per way, mean +- std (population) over the runs given:

* ``shared model B(A(x))``: the shared model on the global test set (the aggregation accuracy);
* ``linear probe on A(x)``: a linear classifier refitted on the frozen shared encoder's features
  of every client's training data (how much of the task A's features carry, whatever B learned);
* for ways with a private encoder copy ("AaB", "AaBb"): B scored on (A(x) + mean_k a_k(x)) / 2,
  the global test set through every client's private encoder (B is trained on
  (A(x) + a_k(x)) / 2 but scored on A(x) alone), the norm ratio ||a_k(x)|| / ||A(x)|| and their
  cosine, means over clients;
* for Auto* runs, the learned coefficients of the last evaluated round (``train/coef/*``).

    python benchmarks/privatize_diagnosis.py sweeps/privatize_ways/runs/*-s*-*/
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F
import yaml
from torch import Tensor, nn

from fedlight.analysis.runs import load_finished_run
from fedlight.clients.privatize import Privatize

COLUMNS = {"global": "shared model B(A(x)) %", "probe": "linear probe on A(x) %",
           "avg_private": "B((A(x) + mean_k a_k(x)) / 2) %",
           "norm_ratio": "norm a_k(x) / A(x)", "cosine": "cos(A(x), a_k(x))"}


def linear_probe(features: Tensor, labels: Tensor, num_classes: int, steps: int = 300) -> nn.Linear:
    """A fresh linear classifier fitted to frozen features (full-batch Adam, fixed seed)."""
    torch.manual_seed(0)
    probe = nn.Linear(features.shape[1], num_classes)
    optimizer = torch.optim.Adam(probe.parameters(), lr=0.01)
    for _ in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(probe(features), labels).backward()
        optimizer.step()
    return probe


def _accuracy(logits: Tensor, labels: Tensor) -> float:
    return (logits.argmax(-1) == labels).float().mean().item()


@torch.no_grad()
def diagnose(run_dir: Path) -> dict[str, float] | None:
    """The diagnosis of one run's final state; None for a way without a complete shared model."""
    run = load_finished_run(run_dir)
    client, data = run.model, run.datamodule
    if not isinstance(client, Privatize) or not {"A", "B"} <= set(getattr(client, "way", "")):
        return None
    run.runtime.load_global(run.global_state).eval()
    x_test, y_test = data.global_test()
    train = [data.client_train(i) for i in range(data.num_clients)]
    x_train, y_train = torch.cat([t[0] for t in train]), torch.cat([t[1] for t in train])
    encoder, head = client.primary_blocks
    shared_test = encoder(x_test)
    result = {"global": _accuracy(head(shared_test), y_test)}
    train_features = encoder(x_train)  # frozen: computed without a graph
    with torch.enable_grad():
        probe = linear_probe(train_features, y_train, client.num_classes)
    result["probe"] = _accuracy(probe(shared_test), y_test)
    if "a" not in client.private:
        return result
    privates, ratios, cosines = [], [], []
    for client_id in range(data.num_clients):
        run.load_client(client_id)
        private_test = client.private["a"](x_test)
        privates.append(private_test)
        ratios.append((private_test.norm(dim=1) / shared_test.norm(dim=1)).mean().item())
        cosines.append(F.cosine_similarity(private_test, shared_test, dim=1).mean().item())
    result["avg_private"] = _accuracy(head((shared_test + torch.stack(privates).mean(0)) / 2),
                                      y_test)
    result["norm_ratio"] = statistics.fmean(ratios)
    result["cosine"] = statistics.fmean(cosines)
    return result


def coefficients(run_dir: Path) -> dict[str, float]:
    """The ``train/coef/*`` columns of the run's last metrics row (Auto* clients)."""
    with (run_dir / "metrics.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    last = rows[-1] if rows else {}
    return {k[len("train/coef/"):]: float(v) for k, v in last.items()
            if k.startswith("train/coef/") and v not in ("", None)}


def mean_std(values: list[float], scale: float) -> str:
    if not values:
        return "-"
    std = statistics.pstdev(values) if len(values) > 1 else 0.0
    return f"{scale * statistics.fmean(values):.2f} +- {scale * std:.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (Privatize / Auto*)")
    args = parser.parse_args(argv)
    diagnoses: dict[str, list[dict[str, float]]] = defaultdict(list)
    coefs: list[str] = []
    for run_dir in args.runs:
        model = (yaml.safe_load((run_dir / "config.yaml").read_text()) or {})["model"]
        name = model["class_path"].rsplit(".", 1)[-1]
        label = model.get("init_args", {}).get("way", "") if name == "Privatize" else name
        values = coefficients(run_dir)
        if values:
            coefs.append(f"- {label} ({run_dir.name}): " + ", ".join(
                f"{k} = {v:.3f}" for k, v in sorted(values.items())))
        diagnosis = diagnose(run_dir) if name == "Privatize" else None
        if diagnosis is not None:
            diagnoses[label].append(diagnosis)
    lines = ["| way | runs | " + " | ".join(COLUMNS.values()) + " |",
             "| --- | --- |" + " --- |" * len(COLUMNS)]
    for way, found in diagnoses.items():
        lines.append(f"| {way} | {len(found)} | " + " | ".join(
            mean_std([d[key] for d in found if key in d], 100 if title.endswith("%") else 1)
            for key, title in COLUMNS.items()) + " |")
    print("\n".join(lines))
    if coefs:
        print("\nLearned coefficients (last evaluated round; index 0 = shared side):")
        print("\n".join(coefs))


if __name__ == "__main__":
    main()
