"""The look of every fedlight figure and how it is written: one module for all of them (a run's
curves, ``fedlight analyze``, ``fedlight report``, sweeps, partition heatmaps).

A figure is drawn by a function of its panels and written by :func:`save_figure`, in the style
:data:`STYLE` (paper-sized fonts, light grid), with its legend outside the data
(:func:`legend_outside`), integer ticks on axes that count rounds or clients
(:func:`integer_axis`) and clients named by their domain where the data has domains
(:func:`client_labels`). Each figure is written as PNG, and as PDF (vector, for a paper)
beside it on request: ``--pdf`` on ``fedlight analyze``, ``fedlight report`` and ``fedlight
interpolate``, or for every figure of a process (a run's, a sweep's) the environment variable
``FEDLIGHT_FIGURE_FORMATS=png,pdf``. Python::

    save_figure(Path("out/curves.png"), draw, size=(6, 4), formats=("png", "pdf"))
    # writes out/curves.png and out/curves.pdf; draw(axes) gets a 2-D array of panels
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fedlight.core.errors import ConfigError
from fedlight.core.files import atomic_write

#: The formats a figure can be written in: PNG (raster) and PDF (vector).
FORMATS = ("png", "pdf")
#: The environment variable that asks for formats of every figure of a process.
FORMATS_VARIABLE = "FEDLIGHT_FIGURE_FORMATS"
#: Resolution of the PNGs.
DPI = 150
#: matplotlib settings of every figure: fonts a paper's column can take, a light grid,
#: no top or right frame, fonts embedded as TrueType in PDFs (editable, accepted by journals).
STYLE: dict[str, Any] = {
    "font.size": 9, "axes.titlesize": 9, "axes.labelsize": 9, "legend.fontsize": 8,
    "legend.title_fontsize": 8, "xtick.labelsize": 8, "ytick.labelsize": 8,
    "axes.grid": True, "axes.axisbelow": True, "grid.alpha": 0.3, "axes.spines.top": False,
    "axes.spines.right": False, "legend.frameon": False, "pdf.fonttype": 42,
    "ps.fonttype": 42, "savefig.bbox": "tight", "savefig.pad_inches": 0.05,
}
#: Most categories a legend lists (tab20's colours); more get a colour bar.
PALETTE_SIZE = 20

Draw = Callable[[Any], Any]


def figure_formats(formats: Iterable[str] | None = None) -> tuple[str, ...]:
    """The formats to write, PNG always first (reports link to it): PNG and those of
    ``formats`` when given, else of FEDLIGHT_FIGURE_FORMATS (comma-separated). ConfigError
    (one line) for an unknown format."""
    source = "formats"
    if formats is None:
        source, formats = FORMATS_VARIABLE, os.environ.get(FORMATS_VARIABLE, "").split(",")
    asked = [f.strip().lower().lstrip(".") for f in formats if f.strip()]
    unknown = [f for f in asked if f not in FORMATS]
    if unknown:
        raise ConfigError(f"{source}: figure format {unknown[0]!r} is not known; valid: "
                          f"{', '.join(FORMATS)}")
    return tuple(dict.fromkeys(["png", *asked]))


def with_pdf(pdf: bool) -> tuple[str, ...] | None:
    """What a command's ``--pdf`` asks for: PNG and PDF, or None (the default formats)."""
    return ("png", "pdf") if pdf else None


def save_figure(path: Path, draw: Draw, size: tuple[float, float],
                shape: tuple[int, int] = (1, 1), formats: Iterable[str] | None = None,
                ) -> list[Path]:
    """A figure of ``shape`` panels, ``size`` inches, drawn in :data:`STYLE` by ``draw(axes)``
    (a 2-D array of axes), written as ``path`` with each format's suffix (each file whole or
    absent: a temporary file renamed). Returns the files written, PNG first."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    written = []
    style: Any = STYLE  # matplotlib types its keys as a Literal of every rc name
    with matplotlib.rc_context(style):
        figure = Figure(figsize=size, layout="constrained")
        FigureCanvasAgg(figure)  # files only: no display, pyplot's global state untouched
        draw(figure.subplots(*shape, squeeze=False))
        for kind in figure_formats(formats):
            def write(stream: Any, kind: str = kind) -> None:
                figure.savefig(stream, dpi=DPI, format=kind)

            target = path.with_suffix(f".{kind}")
            atomic_write(target, write)
            written.append(target)
    return written


def integer_axis(axis: Any) -> None:
    """Ticks at whole numbers only, for an axis that counts (rounds, clients, samples)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def legend_outside(ax: Any, title: str | None = None, **options: Any) -> None:
    """The panel's legend to the right of its frame, where it hides no data (nothing when
    the panel has no labelled artist). Long legends run into columns of 20 entries."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    ax.legend(handles, labels, title=title, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              borderaxespad=0.0, ncols=math.ceil(len(labels) / PALETTE_SIZE), **options)


def client_labels(count: int, names: Sequence[str | None] | None = None) -> list[str]:
    """How a figure names ``count`` clients: each client's domain or group name where the
    data names one (``mnistm``, ``dslr``), else its number."""
    names = list(names or [])
    return [str(names[k]) if k < len(names) and names[k] else str(k) for k in range(count)]


def category_colours(count: int) -> list[Any]:
    """``count`` (at most 20) colours told apart: tab10, or tab20 beyond 10."""
    from matplotlib import colormaps

    palette = colormaps["tab10" if count <= 10 else "tab20"]
    return [palette(k) for k in range(count)]


def scatter_by(ax: Any, xy: Any, categories: Sequence[int], names: Mapping[int, str],
               title: str, size: float = 6) -> None:
    """Points ``xy`` (N x 2) coloured by their integer category: up to 20 categories one
    legend entry each, in order, named by ``names`` (a class, a client's domain), outside the
    data; more on a continuous colour scale with a colour bar of whole numbers."""
    present = sorted(set(int(c) for c in categories))
    if len(present) > PALETTE_SIZE:
        points = ax.scatter(xy[:, 0], xy[:, 1], s=size, c=list(categories), cmap="viridis",
                            linewidths=0)
        bar = ax.figure.colorbar(points, ax=ax, label=title)
        integer_axis(bar.ax.yaxis)
        return
    for colour, category in zip(category_colours(len(present)), present, strict=True):
        chosen = [i for i, c in enumerate(categories) if int(c) == category]
        ax.scatter(xy[chosen, 0], xy[chosen, 1], s=size, color=colour, linewidths=0,
                   label=names.get(category, str(category)))
    legend_outside(ax, title=title, markerscale=1.5)


def mean_band(ax: Any, by_x: Mapping[float, Sequence[float]], label: str, **line: Any) -> None:
    """The mean over runs (seeds) at each x as a line, with a band of one sample standard
    deviation around it where at least two runs have a value."""
    xs = sorted(by_x)
    means = [statistics.mean(by_x[x]) for x in xs]
    (drawn,) = ax.plot(xs, means, label=label, **line)
    spread = [(x, m, statistics.stdev(by_x[x])) for x, m in zip(xs, means, strict=True)
              if len(by_x[x]) > 1]
    if spread:
        ax.fill_between([s[0] for s in spread], [s[1] - s[2] for s in spread],
                        [s[1] + s[2] for s in spread], color=drawn.get_color(), alpha=0.2,
                        linewidth=0)


__all__ = ["DPI", "FORMATS", "FORMATS_VARIABLE", "STYLE", "category_colours", "client_labels",
           "figure_formats", "integer_axis", "legend_outside", "mean_band", "save_figure",
           "scatter_by", "with_pdf"]
