"""The Pareto figure of ``run.py recommend``: every measured candidate's accuracy change against
its objective figure, both with their intervals, the recommendation and the limits marked.

Drawn from the recommendation record's plain candidate summaries (``candidates``: the
objective's median and interval over the candidate's VALID runs, the paired accuracy change and
its interval), so the report redraws nothing it did not record. A candidate without a valid run
has no point; one without an accuracy result sits on the zero line, hollow.
"""

from __future__ import annotations

import io
from typing import Any

from quantmark.report import canvas
from quantmark.report.quality import metric_of
from quantmark.report.recommend_section import objective_label


def _points(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The candidates with a figure to draw: a valid run's objective interval."""
    return [c for c in record.get("candidates", []) if (c.get("objective") or {}).get("point")
            is not None]


def _error(point: float, low: float | None, high: float | None) -> list[list[float]]:
    """One error bar's lower and upper lengths (zero where there is no interval)."""
    return [[point - low if low is not None else 0.0], [high - point if high is not None
                                                         else 0.0]]


def _draw(ax: Any, candidate: dict[str, Any], style: dict[str, Any]) -> None:
    figure = candidate["objective"]
    accuracy = candidate.get("accuracy") or {}
    change = accuracy.get("change_points")
    measured = change is not None  # None: not measured, or its accuracy run failed
    y = change if measured else 0.0
    ax.errorbar([figure["point"]], [y], xerr=_error(figure["point"], figure.get("low"),
                                                     figure.get("high")),
                yerr=_error(y, accuracy.get("low"), accuracy.get("high")) if measured else None,
                fmt=style["marker"], color=style["color"], markersize=style["size"],
                markerfacecolor=style["color"] if measured else "none", capsize=2,
                elinewidth=0.8, zorder=style["z"])


def _limits(ax: Any, record: dict[str, Any]) -> None:
    """The limits that have an axis here: the accuracy drop, and the objective's own bound."""
    limits = record.get("limits") or {}
    if limits.get("max_accuracy_drop") is not None:
        ax.axhline(-limits["max_accuracy_drop"], color="#b00", linestyle="--", linewidth=0.9,
                   label=f"max {metric_of(record).name} drop {limits['max_accuracy_drop']:g} pts")
    bound = {"latency_ms": limits.get("latency_ms"),
             "samples_per_s": limits.get("min_throughput")}.get(record.get("objective", ""))
    if bound is not None:
        name = "latency" if record["objective"] == "latency_ms" else "min throughput"
        ax.axvline(bound, color="#b00", linestyle=":", linewidth=0.9,
                   label=f"{name} limit {bound:g}")


def pareto_png(record: dict[str, Any]) -> bytes | None:
    """The figure's PNG bytes; None when no candidate has a valid run to draw."""
    points = _points(record)
    if not points:
        return None
    recommended = (record.get("recommended") or {}).get("key")
    tied = {*(record.get("tied") or []), record.get("closest")}
    fig, ax = canvas.subplots(figsize=(7.5, 4.8))
    for candidate in points:
        key = candidate["key"]
        if key == recommended:
            style = {"marker": "*", "color": "#d62728", "size": 14, "z": 4}
        elif key in tied:
            style = {"marker": "D", "color": "#1f77b4", "size": 7, "z": 3}
        elif candidate.get("dropped"):
            style = {"marker": "o", "color": "#9e9e9e", "size": 5, "z": 1}
        else:
            style = {"marker": "o", "color": "#2ca02c", "size": 6, "z": 2}
        _draw(ax, candidate, style)
        if key == recommended or key in tied:
            ax.annotate(key, (candidate["objective"]["point"],
                              (candidate.get("accuracy") or {}).get("change_points") or 0.0),
                        textcoords="offset points", xytext=(6, 6), fontsize=7)
    _limits(ax, record)
    ax.axhline(0.0, color="#777", linewidth=0.5)
    ax.set_xlabel(objective_label(record.get("objective", "")) + (
        ", higher is better" if record.get("higher_is_better") else ", lower is better"))
    ax.set_ylabel(f"{metric_of(record).name} change vs best FP32 (points)")
    ax.set_title(f"{record.get('model', '')} {record.get('scenario', '')}: "
                 f"{record.get('verdict', '')}", fontsize=10)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return buffer.getvalue()
