"""fedlight.plotting, the one style of every figure: formats (PDF beside PNG on request),
integer ticks on counted axes, legends outside the data, domain names, seed bands."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.figure import Figure

from fedlight.analysis.report import RunRecord, plot_curves
from fedlight.core.errors import ConfigError
from fedlight.data.stats import save_heatmap
from fedlight.plotting import (
    FORMATS_VARIABLE,
    client_labels,
    figure_formats,
    legend_outside,
    save_figure,
)


@pytest.fixture
def drawn(monkeypatch):
    """Every figure saved meanwhile, as it was when saved."""
    figures: list[Figure] = []
    savefig = Figure.savefig

    def keep(figure, *args, **kwargs):
        figures.append(figure)
        return savefig(figure, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return figures


def test_pdf_is_written_beside_the_png_on_request(tmp_path, monkeypatch):
    def draw(axes):
        axes[0][0].plot([1, 2], [3, 4])

    assert save_figure(tmp_path / "a.png", draw, (3, 2)) == [tmp_path / "a.png"]
    written = save_figure(tmp_path / "b.png", draw, (3, 2), formats=("png", "pdf"))
    assert written == [tmp_path / "b.png", tmp_path / "b.pdf"]
    assert (tmp_path / "b.pdf").read_bytes().startswith(b"%PDF")
    monkeypatch.setenv(FORMATS_VARIABLE, "png,pdf")
    assert [p.name for p in save_figure(tmp_path / "c.png", draw, (3, 2))] == ["c.png", "c.pdf"]


def test_png_is_always_written_and_an_unknown_format_is_one_line(monkeypatch):
    assert figure_formats(("pdf",)) == ("png", "pdf") and figure_formats(()) == ("png",)
    with pytest.raises(ConfigError, match="formats: figure format 'svgz' is not known; "
                                          "valid: png, pdf"):
        figure_formats(("svgz",))
    monkeypatch.setenv(FORMATS_VARIABLE, "pdf,eps")
    with pytest.raises(ConfigError, match=f"{FORMATS_VARIABLE}: figure format 'eps'"):
        figure_formats()


def test_clients_are_named_by_their_domain_where_the_data_names_one():
    assert client_labels(3, ["mnist", None, "svhn"]) == ["mnist", "1", "svhn"]
    assert client_labels(2) == ["0", "1"]


def test_a_legend_outside_lies_right_of_the_panel(tmp_path, drawn):
    def draw(axes):
        axes[0][0].plot([0, 1], [0, 1], label="a")
        legend_outside(axes[0][0])

    save_figure(tmp_path / "a.png", draw, (3, 2))
    ax = drawn[0].axes[0]
    renderer = drawn[0].canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    assert legend.x0 >= ax.get_window_extent(renderer).x1


def run_of(seed: int, accuracies: list[float]) -> RunRecord:
    history = [{"round": float(r + 1), "personalized_accuracy": a}
               for r, a in enumerate(accuracies)]
    return RunRecord(Path(f"run{seed}"), "FedAvg", "digits/iid", seed, {"rounds": len(accuracies)},
               history)


def test_sweep_curves_are_the_mean_over_seeds_with_a_band_and_whole_rounds(tmp_path, drawn):
    plot_curves([run_of(0, [0.1, 0.3, 0.5]), run_of(1, [0.3, 0.5, 0.7])], tmp_path / "c.png")
    ax = drawn[0].axes[0]
    (line,) = ax.get_lines()
    assert list(line.get_ydata()) == pytest.approx([20, 40, 60])  # % mean of the two seeds
    assert len(ax.collections) == 1  # the band of one sample std
    ticks = [t for t in ax.get_xticks() if 1 <= t <= 3]
    assert ticks == [1, 2, 3]
    assert ax.get_legend() is not None


def test_the_partition_heatmap_names_domains_on_the_client_axis(tmp_path, drawn):
    stats = {"num_classes": 2, "client_names": ["mnist", "svhn"],
             "clients": [{"train_label_counts": [3, 1]}, {"train_label_counts": [0, 4]}]}
    written = save_heatmap(stats, tmp_path / "p.png", formats=("png", "pdf"))
    assert [p.suffix for p in written] == [".png", ".pdf"]
    labels = [t.get_text() for t in drawn[0].axes[0].get_yticklabels()]
    assert labels == ["mnist", "svhn"]


def test_points_of_up_to_20_categories_get_a_legend_and_more_a_colour_bar(tmp_path, drawn):
    import numpy as np

    from fedlight.plotting import scatter_by

    for count in (20, 21):
        xy = np.arange(2.0 * count).reshape(count, 2)

        def draw(axes, count=count, xy=xy):
            scatter_by(axes[0][0], xy, list(range(count)), {0: "mnist"}, "client")

        save_figure(tmp_path / f"{count}.png", draw, (4, 3))
    twenty, more = drawn
    texts = [t.get_text() for t in twenty.axes[0].get_legend().get_texts()]
    assert texts == ["mnist", *map(str, range(1, 20))]
    assert more.axes[0].get_legend() is None and len(more.axes) == 2  # the panel, its bar


def test_curve_labels_keep_what_differs_and_title_what_all_share():
    from fedlight.analysis.report import curve_labels

    keys = [("FedAvg", "digits/iid", "5 rounds"), ("GPFL", "digits/iid", "5 rounds")]
    assert curve_labels(keys) == ({keys[0]: "FedAvg", keys[1]: "GPFL"},
                                  ["digits/iid", "5 rounds"])
    one = [("FedAvg", "digits/iid", "5 rounds")]
    assert curve_labels(one) == ({one[0]: "FedAvg"}, ["FedAvg", "digits/iid", "5 rounds"])
