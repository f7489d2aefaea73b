"""The interpolation trick of "Aggregate or Not?" (Sec. 5.5, Fig. 9): evaluation only.

After training the two-branch ``"AaBb"`` model (:class:`~fedlight.clients.Privatize` with
``way="AaBb"``, or an Auto* client), for ``alpha, beta`` on a grid in ``[0, 1]``::

    h = alpha E_s(x) + (1 - alpha) E_p(x)
    p = beta softmax(C_s(h)) + (1 - beta) softmax(C_p(h))

and score ``argmax p`` on every client's local test split with that client's private copies.
``alpha = beta = 1`` is the shared model ("AB"), ``alpha = beta = 0`` the private one ("ab").

Python::

    rows = interpolation_grid(load_finished_run("runs/<run>"), step=0.1)

Command line (reads the run folder as every analysis does, with ``checkpoints/last.ckpt``, writes
``interpolation.csv`` and ``interpolation.png`` into the run folder unless ``--out`` says
otherwise)::

    fedlight interpolate runs/privatize-mnist5k-pathological-s0
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from fedlight.analysis.outputs import write_csv
from fedlight.analysis.runs import RestoredRun, load_finished_run
from fedlight.clients.base import FederatedClient
from fedlight.clients.privatize import Privatize
from fedlight.core.errors import ConfigError
from fedlight.parsing.parser import CommandParser
from fedlight.plotting import save_figure, with_pdf


def grid_values(step: float) -> list[float]:
    """``0, step, 2 step, ..., 1``; ``step`` must divide 1 (0.1, 0.05, 0.25, ...)."""
    count = round(1 / step) if step > 0 else 0
    if count < 1 or abs(count * step - 1) > 1e-6:
        raise ConfigError(f"step must be in (0, 1] and divide 1 (e.g. 0.1 or 0.25), got {step}")
    return [round(i / count, 10) for i in range(count + 1)]


def _check_model(model: FederatedClient) -> None:
    if not isinstance(model, Privatize) or model.way != "AaBb" or model.cut != "coarse":
        way = getattr(model, "way", None)
        raise ConfigError(
            "the interpolation needs the two-branch model: Privatize(way='AaBb', cut='coarse') "
            f"or an Auto* client; got {type(model).__name__} with way {way!r}"
        )


@torch.inference_mode()
def interpolation_grid(run: RestoredRun, step: float = 0.1, batch_size: int = 1024
                       ) -> list[dict[str, float]]:
    """Personalized accuracy for every ``(alpha, beta)`` of the grid, from a saved run.

    Args:
        run: the finished run (:func:`~fedlight.analysis.runs.load_finished_run`) of a
            ``Privatize`` client with ``way="AaBb"``, or of ``AutoCS`` / ``AutoSA`` /
            ``AutoHS`` (their ``psi`` is ignored); each client is loaded as it is scored after
            the checkpoint's round (the aggregated shared state, its private state).
        step: grid step; ``alpha`` and ``beta`` take ``0, step, ..., 1``.
        batch_size: evaluation batch size.

    Returns:
        One row per ``(alpha, beta)``: ``alpha``, ``beta``, ``accuracy`` (pooled over all
        clients' local test samples, as ``personalized_accuracy``) and ``accuracy_mean``
        (mean of the per-client accuracies, the paper's Def. 3.3).
    """
    _check_model(run.model)
    values = grid_values(step)
    n = len(values)
    pooled = torch.zeros(n, n, dtype=torch.float64)
    per_client_means = torch.zeros(n, n, dtype=torch.float64)
    total, clients = 0, 0
    weights = torch.tensor(values, device=run.model.device)
    for client_id in range(run.num_clients):
        model = run.load_client(client_id)
        x, y = run.runtime.population.test_data[client_id]
        if len(y) == 0:
            continue
        correct = torch.zeros(n, n, dtype=torch.float64, device=weights.device)
        for xb, yb in zip(torch.split(x, batch_size), torch.split(y, batch_size), strict=True):
            correct += _correct_counts(model, xb, yb, weights)
        pooled += correct.cpu()
        per_client_means += correct.cpu() / len(y)
        total += len(y)
        clients += 1
    if total == 0:
        raise ConfigError("no client has a local test sample")
    return [{"alpha": a, "beta": b, "accuracy": float(pooled[i, j] / total),
             "accuracy_mean": float(per_client_means[i, j] / clients)}
            for i, a in enumerate(values) for j, b in enumerate(values)]


def _correct_counts(model: Privatize, x: torch.Tensor, y: torch.Tensor,
                    weights: torch.Tensor) -> torch.Tensor:
    """Correct predictions of one batch for every (alpha, beta): shape (n, n)."""
    shared_h, private_h = model.model.encoder(x), model.private["a"](x)
    rows = []
    for alpha in weights:
        h = alpha * shared_h + (1 - alpha) * private_h
        p_shared = F.softmax(model.model.head(h), dim=-1)
        p_private = F.softmax(model.private["b"](h), dim=-1)
        mixed = (weights.view(-1, 1, 1) * p_shared + (1 - weights.view(-1, 1, 1)) * p_private)
        rows.append((mixed.argmax(-1) == y).sum(-1))
    return torch.stack(rows).double()


# ===================================================================== outputs
def plot_heatmap(rows: Sequence[dict[str, float]], path: str | Path, title: str = "",
                 metric: str = "accuracy", formats: Sequence[str] | None = None
                 ) -> list[Path]:
    """Heatmap of ``metric`` over ``alpha`` (rows) and ``beta`` (columns), as the paper's
    Fig. 9; the best cell is outlined. Written as ``path`` in each of ``formats`` (default
    PNG; see :mod:`fedlight.plotting`); returns the files."""
    from matplotlib.patches import Rectangle

    alphas = sorted({r["alpha"] for r in rows})
    betas = sorted({r["beta"] for r in rows})
    table = {(r["alpha"], r["beta"]): r[metric] for r in rows}
    grid = [[table[(a, b)] for b in betas] for a in alphas]
    size = max(4.0, 0.55 * len(betas) + 1.5)

    def draw(axes: Any) -> None:
        ax = axes[0][0]
        image = ax.imshow(grid, origin="lower", cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(betas)), [f"{b:g}" for b in betas])
        ax.set_yticks(range(len(alphas)), [f"{a:g}" for a in alphas])
        ax.set_xlabel("beta (weight of the shared classifier)")
        ax.set_ylabel("alpha (weight of the shared encoder)")
        ax.grid(False)
        if len(betas) <= 11:
            low, high = min(map(min, grid)), max(map(max, grid))
            for i, row in enumerate(grid):
                for j, value in enumerate(row):
                    bright = high > low and (value - low) / (high - low) > 0.6
                    ax.text(j, i, f"{100 * value:.1f}", ha="center", va="center", fontsize=7,
                            color="black" if bright else "white")
        best = max(range(len(rows)), key=lambda k: rows[k][metric])
        bi, bj = alphas.index(rows[best]["alpha"]), betas.index(rows[best]["beta"])
        ax.add_patch(Rectangle((bj - 0.5, bi - 0.5), 1, 1, fill=False, edgecolor="red", lw=2))
        ax.figure.colorbar(image, ax=ax, label=f"personalized {metric}")
        ax.set_title(title or "interpolation between shared and private components")

    return save_figure(Path(path), draw, (size, size * 0.85), formats=formats)


# ===================================================================== command line
def run_interpolation(run_dir: str | Path, step: float = 0.1, out: str | Path | None = None,
                      checkpoint: str | Path | None = None, device: str = "cpu",
                      formats: Sequence[str] | None = None) -> dict[str, Any]:
    """Evaluate the grid of a run folder; write ``interpolation.csv`` and the figure
    ``interpolation.png`` (and ``.pdf`` where ``formats`` asks) into ``out`` (default: the run
    folder). Returns the rows, the best cell, the CSV's path and the figure's files."""
    run_dir = Path(run_dir)
    run = load_finished_run(run_dir, str(checkpoint) if checkpoint else "last", device)
    rows = interpolation_grid(run, step=step)
    out_dir = Path(out) if out else run_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = write_csv(out_dir / "interpolation.csv", rows)
    figures = plot_heatmap(rows, out_dir / "interpolation.png", title=run_dir.name,
                           formats=formats)
    best = max(rows, key=lambda r: r["accuracy"])
    return {"rows": rows, "best": best, "csv": csv_path, "png": figures[0], "figures": figures}


def main(argv: Sequence[str] | None = None) -> None:
    """``fedlight interpolate RUN_DIR [--step 0.1] [--out DIR]``."""
    parser = CommandParser(
        prog="fedlight interpolate",
        description="Interpolation trick of 'Aggregate or Not?' (Fig. 9) on a trained AaBb run.")
    parser.add_argument("run_dir", help="run folder (holds config.yaml and checkpoints/)")
    parser.add_argument("--step", type=float, default=0.1, help="grid step of alpha and beta")
    parser.add_argument("--out", default=None, help="output folder (default: the run folder)")
    parser.add_argument("--checkpoint", default=None,
                        help="checkpoint file (default: RUN_DIR/checkpoints/last.ckpt)")
    parser.add_argument("--device", default="cpu", help="evaluation device (cpu, cuda, ...)")
    parser.add_argument("--pdf", action="store_true", help="write the figure as PDF too")
    args = parser.parse_args(argv)
    result = run_interpolation(args.run_dir, args.step, args.out, args.checkpoint, args.device,
                               with_pdf(args.pdf))
    rows = {(r["alpha"], r["beta"]): r["accuracy"] for r in result["rows"]}
    best = result["best"]
    print(f"alpha=beta=1 (shared model): {rows[(1.0, 1.0)]:.4f}   "
          f"alpha=beta=0 (private model): {rows[(0.0, 0.0)]:.4f}   "
          f"best: {best['accuracy']:.4f} at alpha={best['alpha']:g}, beta={best['beta']:g}")
    print(f"wrote {result['csv']} and {' and '.join(map(str, result['figures']))}")


if __name__ == "__main__":
    main()
