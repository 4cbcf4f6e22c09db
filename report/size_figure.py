"""The figure of each reduced precision's speedup over FP32 against input size (a text model's
against sequence length: one figure per ``workload_axes.Axis``): one line per SUT (a colour per
framework, a line style per precision), each point with its interval.

One figure per machine, model, dataset and scenario, at the batch size most of its points ran
(``workload_tables`` lists every batch): points of other datasets, batches or SUT options are
never drawn on one line.
"""

from __future__ import annotations

import io
import math
from collections import Counter

from matplotlib.ticker import FuncFormatter

from quantmark.report import canvas
from quantmark.report.characterize import Config, Study
from quantmark.report.figures import LINE_STYLE, PALETTE, Figure
from quantmark.report.stats import Ratio
from quantmark.report.workload_axes import AXES, SIZE, Axis, Group, groups

TICKS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 12.0, 16.0)
CAPTION = ("Each point: the SUT's speedup over its framework's FP32 at the same {axis} "
           "(median over repeats, paired by repeat); error bars: its {level} interval, "
           "corrected for the report's number of speedup verdicts. Hollow: no measurable "
           "difference (the interval holds 1×) or one run (no interval).")


def _chosen(groups: dict[Group, list[Config]]) -> dict[Group, list[Config]]:
    """Per (system, model, dataset, scenario), the group of the batch most points ran."""
    counts = Counter({group: len(configs) for group, configs in groups.items()})
    best: dict[tuple, Group] = {}
    for group in groups:
        key = group[:4]
        if key not in best or (counts[group], group[4]) > (counts[best[key]], best[key][4]):
            best[key] = group
    return {group: groups[group] for group in best.values()}


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return buffer.getvalue()


def _slug(*parts: object) -> str:
    return "-".join(str(p).replace("/", "_").replace(" ", "_") for p in parts)


def _draw_line(ax, configs: list[Config], color, style: str, axis: Axis = SIZE
               ) -> list[float]:
    """One SUT's points in size (length) order, filled where the interval excludes 1×; their
    speedups."""
    points = [(axis.position(c.workload),
               c.derived["speedup_vs_fp32_ratio"]) for c in configs
              if c.derived["speedup_vs_fp32_ratio"] is not None]
    if not points:
        return []
    xs = [x for x, _ in points]
    ratios: list[Ratio] = [r for _, r in points]
    ax.plot(xs, [r.point for r in ratios], color=color, linestyle=style,
            label=configs[0].sut)
    for x, r in points:
        low, high = (r.low, r.high) if r.low is not None and r.high is not None else \
            (r.point, r.point)
        ax.errorbar([x], [r.point], yerr=[[r.point - low], [high - r.point]], fmt="o",
                    color=color, capsize=3, markersize=6,
                    markerfacecolor=color if r.significant else "white")
    return [r.point for r in ratios]


def _y_axis(ax, speedups: list[float]) -> None:
    """A log axis around the points and 1×: an interval of few runs at a corrected level can
    be effectively unbounded, and would flatten every point (its bar leaves the plot; the
    table gives its bounds)."""
    low, high = min([*speedups, 1.0]) / 1.5, max([*speedups, 1.0]) * 1.5
    ax.set_ylim(low, high)
    ticks = [t for t in TICKS if low <= t <= high]
    if len(ticks) > 8:
        ticks = [t for t in ticks if math.log2(t).is_integer()]
    ax.set_yticks(ticks or [1.0])
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}×"))


def size_figure(study: Study, group: Group, configs: list[Config], axis: Axis = SIZE
                ) -> Figure:
    """Speedup against input size (``axis``) for one (system, model, dataset, scenario,
    batch)."""
    system, model, dataset, scenario, batch = group
    families = list(dict.fromkeys(c.family for c in study.configs))
    fig, ax = canvas.subplots(figsize=(8, 4.8))
    speedups: list[float] = []
    for sut in dict.fromkeys(c.sut for c in configs):
        mine = [c for c in configs if c.sut == sut]
        speedups += _draw_line(ax, mine, PALETTE(families.index(mine[0].family) % 10),
                               LINE_STYLE.get(mine[0].variant, (0, (5, 1))), axis)
    ticks = {axis.position(c.workload): axis.text(c.workload) for c in configs}
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(sorted(ticks), [ticks[x] for x in sorted(ticks)])
    _y_axis(ax, speedups)
    ax.minorticks_off()
    what = "official latency" if configs[0].latency_metric else "samples/s"
    ax.set_xlabel(f"{axis.name} ({axis.unit}, log scale)")
    ax.set_ylabel(f"speedup vs the framework's FP32 ({what})")
    ax.set_title(f"{model} on {system}, dataset {dataset}: {scenario} speedup by {axis.name}, "
                 f"batch {batch}", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
    levels = {c.derived["speedup_vs_fp32_ratio"].confidence for c in configs
              if c.derived["speedup_vs_fp32_ratio"] is not None}
    level = f"{levels.pop():.2%}".replace(".00%", "%") if len(levels) == 1 else "corrected"
    return Figure("speedup", f"Speedup by {axis.name} — {model}, {dataset}, {scenario} "
                  f"({system})",
                  f"speedup-by-{axis.slug}-{_slug(system, model, dataset, scenario)}-b{batch}"
                  ".png", _png(fig), f"{scenario} speedup over FP32 against {axis.name} for "
                  f"{model}, one line per SUT, with intervals",
                  CAPTION.format(axis=axis.name, level=level))


def size_figures(study: Study) -> list[Figure]:
    """Every speedup-by-size (by-length) figure the study has two values or more for."""
    return [size_figure(study, group, configs, axis) for axis in AXES
            for group, configs in _chosen(groups(study, axis)).items()
            if any(c.derived["speedup_vs_fp32_ratio"] is not None for c in configs)]
