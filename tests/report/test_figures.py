"""The figures carry their intervals: a speedup that is no measurable difference is drawn grey
and hatched ("n.s."), never coloured as a gain; speedups and Pareto points have error bars."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.collections import PathCollection
from matplotlib.patches import Rectangle

from quantmark.report import figures
from quantmark.report.stats import Ratio
from tests.report.synthetic import MODEL, SINGLE, SYSTEM, accuracy_run, config, study

FP32 = [100.0, 110.0, 104.0]


@pytest.fixture
def drawn(monkeypatch) -> list:
    """The matplotlib figures the report draws, kept open instead of rendered to PNG."""
    kept: list = []
    monkeypatch.setattr(figures, "_png", lambda fig: kept.append(fig) or b"png")
    yield kept
    for fig in kept:
        plt.close(fig)


def _grey_cells(ax) -> list[tuple[float, float]]:
    return [(p.get_x() + 0.5, p.get_y() + 0.5) for p in ax.patches
            if isinstance(p, Rectangle) and p.get_hatch() == figures.NOT_SIGNIFICANT["hatch"]]


def test_a_speedup_within_the_noise_is_a_grey_hatched_n_s_cell(drawn):
    made = study(config("ort-fp32", FP32), config("ort-int8", [200.0, 221.0, 207.0]),
                 config("ov-fp32", FP32), config("ov-int8", [95.0, 118.0, 104.0]))
    figure = figures.speedup_heatmap(made, SYSTEM, MODEL, "Offline")
    # 4 verdicts (each int8 vs its own FP32 and vs the other framework's): 98.75% each
    assert made.verdicts == 4
    assert figure is not None and "n.s." in figure.caption and "98.75% interval" in figure.caption
    ax = drawn[0].axes[0]
    texts = {(t.get_position()[1], t.get_position()[0]): t.get_text() for t in ax.texts}
    families, variants = ["ort", "ov"], ["fp32", "int8"]
    ov_int8 = (families.index("ov"), variants.index("int8"))
    ort_int8 = (families.index("ort"), variants.index("int8"))
    assert texts[ov_int8].endswith("\nn.s.")
    ratio = made.configs[1].derived["speedup_vs_fp32_ratio"]
    assert texts[ort_int8] == f"{ratio.point:.2f}×\n[{ratio.low:.2f}, {ratio.high:.2f}]"
    assert _grey_cells(ax) == [(ov_int8[1], ov_int8[0])]  # (x, y): only the n.s. cell
    image = ax.images[0].get_array()
    assert np.ma.is_masked(image[ov_int8]) or np.isnan(image[ov_int8])  # no colour under it
    assert np.isfinite(image[ort_int8])
    assert any("n.s." in t.get_text() for t in drawn[0].texts)  # the legend line


def test_single_runs_are_no_interval_cells(drawn):
    made = study(config("ort-fp32", [100.0]), config("ort-int8", [200.0]))
    figures.speedup_heatmap(made, SYSTEM, MODEL, "Offline")
    ax = drawn[0].axes[0]
    assert "2.00×\nn=1" in [t.get_text() for t in ax.texts]
    assert _grey_cells(ax) == [(1.0, 0.0)]


def test_speedup_bars_have_the_ratio_interval_as_error_bars(drawn):
    made = study(config("ort-fp32", FP32), config("ort-int8", [200.0, 221.0, 207.0]),
                 config("ov-fp32", FP32), config("ov-int8", [95.0, 118.0, 104.0]))
    figure = figures.speedup_bars(made, SYSTEM, MODEL, "Offline")
    assert figure is not None and figure.filename.startswith("speedup-bars-")
    ax = drawn[0].axes[0]
    ratios: list[Ratio] = [made.configs[i].derived["speedup_vs_fp32_ratio"] for i in (1, 3)]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["ort-int8", "ov-int8"]
    segments = ax.collections[0].get_segments()  # the error bars, one per SUT
    assert [x for s in segments for x in (s[0][0], s[1][0])] == pytest.approx(
        [x for r in ratios for x in (r.low, r.high)])
    bars = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_height() < 1]
    assert [b.get_hatch() for b in bars] == [None, figures.NOT_SIGNIFICANT["hatch"]]
    assert [t.get_text().strip() for t in ax.texts] == [r.text() for r in ratios]


def test_pareto_points_have_latency_and_accuracy_error_bars(drawn, tmp_path):
    labels = [n // 5 for n in range(20)]
    wrong = [(label + 1) % 4 if n in (5, 10, 11, 15) else label for n, label in
             enumerate(labels)]
    records = {(SYSTEM, MODEL, sut): accuracy_run(tmp_path / sut, p, labels, builtin=True)
               for sut, p in (("ort-fp32", labels), ("ort-int8", wrong))}
    made = study(config("ort-fp32", [10e6, 11e6, 10.4e6], scenario=SINGLE),
                 config("ort-int8", [5e6, 5.6e6, 5.1e6], scenario=SINGLE), accuracy=records)
    figure = figures.accuracy_vs_latency(made, SYSTEM, MODEL)
    assert figure is not None and "95% interval" in figure.caption
    ax = drawn[0].axes[0]
    x_bars, y_bars = ax.collections[0].get_segments(), ax.collections[1].get_segments()
    latency = made.configs[1].derived["metric_interval"]
    assert (x_bars[1][0][0], x_bars[1][1][0]) == pytest.approx(
        (latency.low / 1e6, latency.high / 1e6))
    change = made.configs[1].derived["quality_change"]
    top1 = records[(SYSTEM, MODEL, "ort-int8")]["top1"]
    assert (y_bars[1][0][1], y_bars[1][1][1]) == pytest.approx(
        (top1 - (change.delta_points - change.low), top1 + (change.high - change.delta_points)))
    assert y_bars[0][0][1] == y_bars[0][1][1] == 100.0  # the FP32 itself: no change to show


def test_pareto_points_of_one_run_are_hollow_with_a_legend_note(drawn, tmp_path):
    labels = [n // 5 for n in range(20)]
    records = {(SYSTEM, MODEL, sut): accuracy_run(tmp_path / sut, labels, labels, builtin=True)
               for sut in ("ort-fp32", "ort-int8")}
    made = study(config("ort-fp32", [10e6, 11e6, 10.4e6], scenario=SINGLE),
                 config("ort-int8", [5e6], scenario=SINGLE), accuracy=records)
    figure = figures.accuracy_vs_latency(made, SYSTEM, MODEL)
    assert figure is not None and "Hollow points: one run" in figure.caption
    ax = drawn[0].axes[0]
    points = [c for c in ax.collections
              if isinstance(c, PathCollection) and len(c.get_offsets()) == 1]
    measured, single = points  # drawn in the study's order: fp32, int8
    assert measured.get_facecolors()[0][3] > 0  # filled
    assert len(single.get_facecolors()) == 0 or single.get_facecolors()[0][3] == 0  # hollow
    assert figures.ONE_RUN in [t.get_text() for t in ax.get_legend().get_texts()]


def test_latency_curves_leave_out_percentiles_on_too_few_queries(drawn):
    from dataclasses import replace

    from quantmark.report.loadgen_log import PERCENTILES

    made = config("ort-fp32", [7e6, 7.2e6, 7.1e6], scenario=SINGLE)
    for r in made.runs:  # 600 queries: p99.9 would be the slowest query
        r.summary = replace(r.summary, query_count=600,
                            percentiles_ns={p: 1_000_000 * (i + 1)
                                            for i, p in enumerate(PERCENTILES)})
    figure = figures.latency_curves(study(made), SYSTEM, MODEL, "SingleStream")
    assert figure is not None and "left out" in figure.caption
    line = drawn[0].axes[0].lines[0]
    assert list(line.get_xdata()) == [0, 1, 2, 3, 4]  # p50 ... p99 at their own ticks
    assert list(line.get_ydata()) == [1.0, 2.0, 3.0, 4.0, 5.0]
