"""``run.py history --plot``: one panel per series, its figures over time with their intervals.

Filled circles are VALID jobs (error bars: the repeat set's 95% interval; none for one run),
red crosses the jobs the interference monitor flagged as disturbed, hollow circles the jobs
with no VALID run (drawn at their left-out runs' median, so a slow INVALID run is seen but
never read as a figure). One PNG, written atomically.
"""

from __future__ import annotations

import io
import math
import statistics
from collections.abc import Sequence
from datetime import datetime, timedelta
from itertools import groupby
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import atomic_write_bytes
from quantmark.store.points import Point, SeriesKey

COLUMNS = 3
MAX_PANELS = 60  # beyond this one image is unreadable: filter first
UNITS = {"latency_ms": "latency (ms)", "samples_per_s": "samples/s"}


def by_series(points: Sequence[Point]) -> list[tuple[SeriesKey, list[Point]]]:
    """The points grouped by series, in the store's order (series, then time)."""
    return [(key, list(group)) for key, group in groupby(points, key=lambda p: p.series)]


def _when(point: Point) -> datetime:
    return datetime.fromisoformat(point.when.replace("Z", "+00:00"))


def draw_panel(ax: Any, key: SeriesKey, points: list[Point]) -> None:
    """One series: VALID figures with error bars, disturbed ones crossed, INVALID hollow."""
    valid = [p for p in points if p.value is not None]
    if valid:
        below = [p.value - p.low if p.low is not None else 0.0 for p in valid]
        above = [p.high - p.value if p.high is not None else 0.0 for p in valid]
        ax.errorbar([_when(p) for p in valid], [p.value for p in valid],
                    yerr=[below, above], fmt="-o", color="tab:blue", markersize=5,
                    capsize=3, linewidth=1, label="VALID (95% interval)")
    disturbed = [p for p in valid if p.disturbed]
    if disturbed:
        ax.plot([_when(p) for p in disturbed], [p.value for p in disturbed], "X",
                color="tab:red", markersize=10, linestyle="none", label="disturbed")
    invalid = [p for p in points if p.value is None and p.left_out_runs]
    if invalid:
        ax.plot([_when(p) for p in invalid], [statistics.median(p.left_out_runs)
                                              for p in invalid], "o", markersize=7,
                markerfacecolor="none", markeredgecolor="tab:gray", linestyle="none",
                label="INVALID (left out)")
    times = sorted({_when(p) for p in points})
    if len(times) == 1:  # one job: a day either side, not matplotlib's years
        ax.set_xlim(times[0] - timedelta(days=1), times[0] + timedelta(days=1))
    ax.set_title(f"{key.model} {key.sut} {key.scenario}", fontsize=9)
    ax.set_ylabel(UNITS.get(key.metric, key.metric), fontsize=8)
    ax.tick_params(labelsize=7)
    ax.tick_params(axis="x", labelrotation=30)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # a series of runs without a figure draws nothing
        ax.legend(fontsize=6, loc="best")


def plot_history(points: Sequence[Point], path: Path) -> int:
    """Draw every series of ``points`` (at most MAX_PANELS) into ``path``; the panels drawn."""
    if path.suffix.lower() != ".png":
        raise UserError(f"--plot {path}: give a .png file name")
    try:
        import matplotlib  # noqa: F401 - whether it is installed

        from quantmark.report import canvas
    except ImportError:
        raise UserError("--plot needs matplotlib: pip install 'quantmark[data]'") from None
    series = by_series(points)[:MAX_PANELS]
    rows = max(1, math.ceil(len(series) / COLUMNS))
    columns = min(COLUMNS, max(1, len(series)))
    fig, axes = canvas.subplots(rows, columns, figsize=(5.2 * columns, 3.4 * rows),
                             squeeze=False)
    for ax, (key, group) in zip(axes.flat, series, strict=False):
        draw_panel(ax, key, group)
    for ax in list(axes.flat)[len(series):]:
        ax.set_visible(False)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=100)
    atomic_write_bytes(path, out.getvalue())
    return len(series)
