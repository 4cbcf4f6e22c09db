"""One figure per ensemble (and machine). It has a panel per scenario with the official metric of
each member alone, of the members run one after another, and of each ensemble SUT (median over
repeats, 95% interval as error bars). When an accuracy run exists, one more panel shows the
members' top-1 and the ensemble's: what the extra time buys.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace

from quantmark.report import canvas
from quantmark.report import figures as base
from quantmark.report.ensembles import AccuracyTable, Section, SpeedRow, SpeedTable, mode
from quantmark.report.figures import Figure

log = logging.getLogger(__name__)

COLORS = {"member": "#9ecae1", "combined": "#636363", "sequential": "#fd8d3c",
          "concurrent": "#31a354"}
CAPTION = ("Bars: medians over repeats; error bars: their 95% interval (none: one run). "
           "'members alone, combined': the members run one after another (latencies add; "
           "throughputs combine as 1 / Σ(1 / samples/s)). Top-1: each member's on the "
           "ensemble's samples.")


def _color(row: SpeedRow | str) -> str:
    """A member, the combined members, or the ensemble's way of running (sequential or
    concurrent)."""
    if isinstance(row, str):  # an ensemble SUT's name
        return COLORS["concurrent" if "concurrent" in row else "sequential"]
    if row.kind != "ensemble" or row.config is None:
        return COLORS[row.kind]
    return COLORS.get(mode(row.config.first, row.config.sut)[0], COLORS["sequential"])


def _speed_panel(ax, table: SpeedTable) -> None:
    """Horizontal bars of the official metric: ms for latency scenarios, samples/s else."""
    rows = [r for r in table.rows if r.config and r.config.derived.get("metric_interval")]
    latency = rows[0].config.latency_metric  # type: ignore[union-attr]
    scale = 1e6 if latency else 1.0
    found = [r.config.derived["metric_interval"] for r in rows]  # type: ignore[union-attr]
    scaled = [replace(f, point=f.point / scale,
                      low=None if f.low is None else f.low / scale,
                      high=None if f.high is None else f.high / scale) for f in found]
    ax.barh(range(len(rows)), [f.point for f in scaled], xerr=base._errors(list(scaled)),
            color=[_color(r) for r in rows], capsize=3)
    for y, f in enumerate(scaled):
        ax.text(f.high if f.high is not None else f.point, y, f"  {f.point:.3g}", va="center",
                fontsize=7)
    ax.set_yticks(range(len(rows)), [r.label for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("latency (ms), lower is faster" if latency else
                  "samples/s, higher is faster", fontsize=8)
    batch = f", batch {table.batch_size}" if table.batch_size != 1 else ""
    ax.set_title(f"{table.scenario}{batch}: {table.metric_name}", fontsize=9)
    ax.grid(axis="x", alpha=0.3)


def _accuracy_bars(table: AccuracyTable) -> list[tuple[str, float, str]]:
    """(label, top-1, colour) of the members (on the ensemble's samples) and each ensemble."""
    bars = [(m.name, top1, COLORS["member"]) for m in table.members
            if (top1 := table.member_top1(m)) is not None]
    return bars + [(r.sut, r.top1, _color(r.sut)) for r in table.runs if r.top1 is not None]


def _accuracy_panel(ax, bars: list[tuple[str, float, str]]) -> None:
    labels, values, colors = zip(*bars, strict=True)
    ax.barh(range(len(bars)), values, color=colors)
    for y, value in enumerate(values):
        ax.text(value, y, f"  {value:.2f}", va="center", fontsize=7)
    ax.set_yticks(range(len(bars)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(max(0.0, min(values) - 5), min(100.0, max(values) + 3))  # the differences
    ax.set_xlabel("top-1 accuracy (%, axis cut to the values)", fontsize=8)
    ax.set_title("accuracy", fontsize=9)
    ax.grid(axis="x", alpha=0.3)


def filename(system: str, name: str) -> str:
    """A file name without the ``@`` and ``+`` of member names (safe in any URL)."""
    return "ensemble-" + re.sub(r"[^A-Za-z0-9._-]+", "_", f"{system}-{name}") + ".png"


def ensemble_figure(section: Section, system: str, name: str) -> Figure | None:
    """The figure of one ensemble on one machine; None when it has nothing measured."""
    speed = [t for t in section.speed if (t.system, t.name) == (system, name) and any(
        r.config and r.config.derived.get("metric_interval") for r in t.rows)]
    accuracy = next((t for t in section.accuracy if (t.system, t.name) == (system, name)), None)
    bars = _accuracy_bars(accuracy) if accuracy else []
    panels = len(speed) + bool(bars)
    if not panels:
        return None
    height = max([len(t.rows) for t in speed] + [len(bars)])
    fig, axes = canvas.subplots(1, panels, figsize=(5.5 * panels, 0.42 * height + 1.8),
                             squeeze=False)
    for ax, table in zip(axes[0], speed, strict=False):
        _speed_panel(ax, table)
    if bars:
        _accuracy_panel(axes[0][-1], bars)
    fig.suptitle(f"{name} on {system}", fontsize=10)
    fig.tight_layout()
    log.debug("ensemble figure %s on %s: %d panels", name, system, panels)
    return Figure("ensemble", f"Ensemble — {name} ({system})", filename(system, name),
                  base._png(fig), f"bars of the speed of {name}, its members alone and "
                  "combined" + (", and their top-1" if bars else ""), CAPTION)


def ensemble_figures(section: Section) -> list[Figure]:
    """One figure per (machine, ensemble) the section holds."""
    found = [ensemble_figure(section, system, name) for system, name in section.keys()]
    return [f for f in found if f is not None]
