"""The report's figures, drawn with matplotlib (Agg) to PNG bytes.

One figure per machine and model (and scenario where it matters), so merged reports of several
machines stay readable: throughput by SUT, the speedup heatmap framework x precision and the
speedups with their 95% intervals, latency percentile curves, accuracy vs latency with the
Pareto front, and the batch-size scan. Every figure is a median over repeats and carries its
95% interval (error bars); a speedup whose interval holds 1x is drawn grey and hatched (no
measurable difference), as is one from a single run (no interval).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import matplotlib
import numpy as np
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from quantmark.report import canvas, quality
from quantmark.report.characterize import Config, Study, family, pareto_front, variant
from quantmark.report.stats import Interval, Ratio, bound_text
from quantmark.sut.registry import variant_order

PERCENTILE_LABELS = {"50.00": "p50", "90.00": "p90", "95.00": "p95", "97.00": "p97",
                     "99.00": "p99", "99.90": "p99.9"}
# the precisions' column order: every framework's own order, merged (quantmark.sut.registry)
VARIANT_ORDER = variant_order()
PALETTE = matplotlib.colormaps["tab10"]
# one colour per framework, one line style per precision: fp32 solid, int8 dotted
LINE_STYLE = {"fp32": "-", "int8": ":", "fp16": "--", "bf16": "--", "int8dyn": "-."}
NOT_SIGNIFICANT = {"facecolor": "#d9d9d9", "hatch": "///", "edgecolor": "#8c8c8c"}
NS_CAPTION = ("Grey, hatched: no measurable difference (the interval holds 1×, \"n.s.\") "
              "or a single run (no interval, \"n=1\").")
ONE_RUN = "hollow: one run, no interval"


def _level(ratios: list[Ratio]) -> str:
    """The speedup intervals' level: 95%, or higher where the report corrects for its number
    of verdicts (``intervals.verdicts_note``)."""
    levels = {r.confidence for r in ratios}
    return f"{levels.pop():.2%}".replace(".00%", "%") if len(levels) == 1 else "corrected"


@dataclass
class Figure:
    """One rendered figure: where it goes in the report and its PNG bytes."""

    section: str
    title: str
    filename: str
    png: bytes
    alt: str
    caption: str = ""  # what the reader must know to read it (marks, error bars)


def _color(study: Study, sut: str):
    """The SUT's framework's colour: the study's frameworks in first-seen order."""
    return PALETTE(list(dict.fromkeys(c.family for c in study.configs)).index(family(sut)) % 10)


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return buffer.getvalue()


def _plain(axis) -> None:
    """Log axes labelled 5, 10, 20 rather than 5x10^0: the reader wants milliseconds."""
    formatter = FuncFormatter(lambda value, _: f"{value:g}")
    axis.set_major_formatter(formatter)
    low, high = axis.get_view_interval()
    if low > 0 and high / low > 30:  # labelled minor ticks over decades overwrite each other
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_minor_formatter(NullFormatter())
    else:
        axis.set_minor_formatter(formatter)


def _line_chart(fig, ax, labels: tuple[str, str, str], section: str, heading: str,
                filename: str, alt: str) -> Figure:
    """Axis labels, title, grid and the legend outside the plot: every line chart's finish."""
    xlabel, ylabel, title = labels
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, ncol=2, bbox_to_anchor=(1.01, 1), loc="upper left")
    return Figure(section, heading, filename, _png(fig), alt)


def _slug(*parts: object) -> str:
    return "-".join(str(p).replace("/", "_").replace(" ", "_") for p in parts)


def _offline_reference_batch(configs: list[Config]) -> int | None:
    """The Offline batch size most SUTs ran: the one the bar chart and heatmap compare at."""
    batches = [c.batch_size for c in configs if c.scenario == "Offline"]
    return max(set(batches), key=lambda b: (batches.count(b), b)) if batches else None


def _errors(found: list[Interval | Ratio | None]) -> np.ndarray | None:
    """Matplotlib's asymmetric error bars (below, above each point) of intervals; None when
    none has one (single runs)."""
    return _bars([(f.point - f.low, f.high - f.point) if f and f.low is not None and
                   f.high is not None else (0.0, 0.0) for f in found])


def throughput(study: Study, system: str, model: str) -> Figure | None:
    mine = [c for c in study.configs if (c.system, c.model) == (system, model)
            and c.scenario == "Offline"]
    batch = _offline_reference_batch(mine)
    rows = [c for c in mine if c.batch_size == batch and c.derived["samples_per_s"]]
    if not rows:
        return None
    fig, ax = canvas.subplots(figsize=(8, 0.32 * len(rows) + 1.4))
    names = [c.sut for c in rows]
    values = [c.derived["samples_per_s"] for c in rows]
    found = [c.derived["samples_per_s_interval"] for c in rows]
    ax.barh(names, values, xerr=_errors(found), color=[_color(study, n) for n in names],
            capsize=3)
    for y, (value, interval) in enumerate(zip(values, found, strict=True)):
        right = interval.high if interval and interval.high is not None else value
        ax.text(right, y, f"  {value:.1f}", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("samples/s (Offline, LoadGen; median of repeats, 95% interval)")
    ax.set_title(f"{model} on {system}: Offline throughput, batch {batch}")
    ax.grid(axis="x", alpha=0.3)
    return Figure("throughput", f"Offline throughput by SUT — {model} ({system})",
                  f"throughput-{_slug(system, model)}.png", _png(fig),
                  f"bar chart of Offline samples per second of every SUT for {model}",
                  "Bars: the median over repeats; error bars: its 95% interval (none: one run).")


def _speedup_configs(study: Study, system: str, model: str, scenario: str
                     ) -> tuple[list[Config], int | None]:
    """The configurations a scenario's speedup figures compare, at one batch size (Offline:
    the one most SUTs ran; latency scenarios: 1), and that batch size."""
    mine = [c for c in study.configs
            if (c.system, c.model, c.scenario) == (system, model, scenario)]
    batch = _offline_reference_batch(mine) if scenario != "SingleStream" else 1
    return [c for c in mine if c.batch_size == batch], batch


def _cell_text(value: float, found: Ratio | None) -> str:
    """A heatmap cell: the speedup, then its interval, "n.s." or "n=1"."""
    if found is None:  # the FP32 reference itself
        return f"{value:.2f}×"
    if found.low is None or found.high is None:
        return f"{value:.2f}×\nn=1"
    if not found.significant:
        return f"{value:.2f}×\nn.s."
    return f"{value:.2f}×\n[{bound_text(found.low)}, {bound_text(found.high)}]"


def speedup_heatmap(study: Study, system: str, model: str, scenario: str) -> Figure | None:
    """Speedup over the same framework's FP32, framework x precision; a cell whose interval
    holds 1× (or that has no interval) is grey and hatched, never coloured as a gain."""
    mine, batch = _speedup_configs(study, system, model, scenario)
    if not any(c.derived["speedup_vs_fp32"] for c in mine):
        return None
    families = list(dict.fromkeys(c.family for c in mine))
    variants = sorted({c.variant for c in mine},
                      key=lambda v: (VARIANT_ORDER.index(v) if v in VARIANT_ORDER else 99, v))
    grid = np.full((len(families), len(variants)), np.nan)
    texts: dict[tuple[int, int], str] = {}
    grey: set[tuple[int, int]] = set()  # not significant, or no interval: no colour
    for c in mine:
        if c.derived["speedup_vs_fp32"]:
            cell = (families.index(c.family), variants.index(c.variant))
            found = c.derived["speedup_vs_fp32_ratio"]
            texts[cell] = _cell_text(c.derived["speedup_vs_fp32"], found)
            if found is not None and not found.significant:
                grey.add(cell)
            else:
                grid[cell] = c.derived["speedup_vs_fp32"]
    fig, ax = canvas.subplots(figsize=(1.3 * len(variants) + 2, 0.75 * len(families) + 1.8))
    finite = grid[np.isfinite(grid)]
    limit = max(2.0, float(np.max(np.abs(np.log2(finite))))) if finite.size else 2.0
    image = ax.imshow(np.log2(grid), cmap="RdYlGn", vmin=-limit, vmax=limit, aspect="auto")
    for (i, j), _ in np.ndenumerate(grid):
        if (i, j) in grey:
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, **NOT_SIGNIFICANT))
        ax.text(j, i, texts.get((i, j), "—"), ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(variants)), variants)
    ax.set_yticks(range(len(families)), families)
    ticks = np.arange(-math.floor(limit), math.floor(limit) + 1)
    bar = fig.colorbar(image, ax=ax, ticks=ticks)
    bar.ax.set_yticklabels([f"{2.0 ** t:g}×" for t in ticks])
    bar.set_label("speedup (log scale)")
    what = "samples/s" if scenario != "SingleStream" else "official latency"
    ax.set_title(f"{model} on {system}\n{scenario} speedup vs the same framework's FP32 "
                 f"({what}, batch {batch})", fontsize=10)
    fig.text(0.01, -0.02, NS_CAPTION, fontsize=7, ha="left", va="top")
    level = _level([c.derived["speedup_vs_fp32_ratio"] for c in mine
                    if c.derived["speedup_vs_fp32_ratio"] is not None])
    return Figure("speedup", f"Speedup heatmap — {model}, {scenario} ({system})",
                  f"speedup-{_slug(system, model, scenario)}.png", _png(fig),
                  f"heatmap of {scenario} speedup per framework and precision for {model}",
                  f"Each cell: the speedup (median over repeats) and its {level} interval "
                  "(corrected for the report's number of speedup verdicts). " + NS_CAPTION)


def speedup_bars(study: Study, system: str, model: str, scenario: str) -> Figure | None:
    """Each SUT's speedup over its framework's FP32 as a bar from 1×, its 95% interval as the
    error bar, and its verdict; a bar that is no measurable difference is grey and hatched."""
    mine, batch = _speedup_configs(study, system, model, scenario)
    rows = [c for c in mine if c.derived["speedup_vs_fp32_ratio"] is not None]
    if not rows:
        return None
    ratios: list[Ratio] = [c.derived["speedup_vs_fp32_ratio"] for c in rows]
    fig, ax = canvas.subplots(figsize=(9, 0.36 * len(rows) + 1.6))
    for y, (c, found) in enumerate(zip(rows, ratios, strict=True)):
        style = ({"color": _color(study, c.sut)} if found.significant else NOT_SIGNIFICANT)
        ax.barh(y, found.point - 1, left=1, **style)
        ax.text(max(found.point, found.high or found.point, 1.0), y, "  " + found.text(),
                va="center", fontsize=7)
    ax.errorbar([r.point for r in ratios], range(len(rows)), xerr=_errors(list(ratios)),
                fmt="none", ecolor="black", capsize=3)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks(range(len(rows)), [c.sut for c in rows])
    ax.invert_yaxis()
    ax.set_xscale("log", base=2)
    _plain(ax.xaxis)
    what = "samples/s" if scenario != "SingleStream" else "official latency"
    ax.set_xlabel(f"speedup vs the same framework's FP32 (×, {what}, log scale)")
    ax.set_title(f"{model} on {system}: {scenario} speedup, batch {batch}, {_level(ratios)} "
                 f"intervals\n{NS_CAPTION}", fontsize=9)
    ax.grid(axis="x", alpha=0.3, which="both")
    return Figure("speedup", f"Speedups with their intervals — {model}, {scenario} ({system})",
                  f"speedup-bars-{_slug(system, model, scenario)}.png", _png(fig),
                  f"bars of {scenario} speedup per SUT for {model} with 95% intervals",
                  f"Bars from 1×: the speedup (median over repeats); error bars: its "
                  f"{_level(ratios)} interval (corrected for the report's number of speedup "
                  "verdicts). " + NS_CAPTION)


def latency_curves(study: Study, system: str, model: str, scenario: str) -> Figure | None:
    mine = [c for c in study.configs
            if (c.system, c.model, c.scenario) == (system, model, scenario)
            and c.derived["percentiles_ns"]]
    if scenario == "Offline" or not mine:
        return None
    fig, ax = canvas.subplots(figsize=(8, 4.8))
    for c in mine:
        points = c.derived["percentiles_ns"]  # only those shown: enough queries
        keys = [p for p in PERCENTILE_LABELS if p in points]
        label = c.sut if c.batch_size == 1 else f"{c.sut} b{c.batch_size}"
        ax.plot([list(PERCENTILE_LABELS).index(p) for p in keys],
                [points[p] / 1e6 for p in keys], marker="o", markersize=3,
                color=_color(study, c.sut), linestyle=LINE_STYLE.get(c.variant, (0, (5, 1))),
                label=label)
    ax.set_xticks(range(len(PERCENTILE_LABELS)), list(PERCENTILE_LABELS.values()))
    ax.set_yscale("log")
    _plain(ax.yaxis)
    figure = _line_chart(fig, ax, ("percentile (LoadGen, nearest rank)",
                                   "latency (ms, log scale)",
                                   f"{model} on {system}: {scenario} latency percentiles"),
                         "latency", f"Latency percentiles — {model}, {scenario} ({system})",
                         f"latency-{_slug(system, model, scenario)}.png",
                         f"latency percentile curves of every SUT, {scenario}, {model}")
    figure.caption = ("Points: medians over repeats. A percentile resting on too few queries "
                      "(it would be the slowest query; n/a in the tables) is left out.")
    return figure


def random_weights(configs: list[Config]) -> bool:
    """The model's weights are random (seeded): a classifier's top-1 is chance, not a quality
    measure (another task's metric is drawn as it is)."""
    return any("random" in c.derived["weights"].lower() and
               quality.classifies(c.derived["quality_metric"]) for c in configs)


def _bars(pairs: list[tuple[float, float]]) -> np.ndarray | None:
    """(below, above) per point as matplotlib's error bars; None when every one is empty."""
    return np.array(pairs).T if any(any(p) for p in pairs) else None


def _pareto_bars(rows: list[Config], per_sample: bool, random: bool
                 ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The accuracy-latency points' error bars: x, the latency's 95% interval over repeats
    (Offline: of the time per sample, 1000 / samples/s); y, the 95% interval of the paired
    quality change vs the framework's FP32, around the point (none for random weights)."""
    xs, ys = [], []
    for c in rows:
        found = c.derived["metric_interval"]
        if found is None or found.low is None or found.high is None:
            xs.append((0.0, 0.0))
        elif per_sample:  # time per sample falls as samples/s rises
            x = 1000.0 / c.metric
            xs.append((x - 1000.0 / found.high, 1000.0 / found.low - x))
        else:
            xs.append(((c.metric - found.low) / 1e6, (found.high - c.metric) / 1e6))
        change = None if random else c.derived["quality_change"]
        ys.append((change.delta_points - change.low, change.high - change.delta_points)
                  if change else (0.0, 0.0))
    return _bars(xs), _bars(ys)


def _one_run(config: Config) -> bool:
    """The configuration's latency has no interval: a single run."""
    found = config.derived["metric_interval"]
    return found is None or found.low is None or found.high is None


def _marker(study: Study, config: Config, on_front: bool) -> dict:
    """A Pareto point's marker: filled in its framework's colour, hollow for one run (no
    interval), edged black on the front."""
    color = _color(study, config.sut)
    if _one_run(config):
        return {"facecolors": "none", "edgecolors": "black" if on_front else color,
                "linewidths": 1.5}
    return {"color": color, "edgecolor": "black" if on_front else "none"}


def accuracy_vs_latency(study: Study, system: str, model: str) -> Figure | None:
    """The run's quality metric (top-1, a detector's mAP) against the SingleStream official
    latency (else Offline time per sample), the Pareto front (nothing both faster and more
    accurate) drawn and its points named. For a classifier with random weights the y axis is
    agreement with the framework's FP32: top-1 would be chance."""
    mine = [c for c in study.configs if (c.system, c.model) == (system, model) and c.metric]
    random = random_weights(mine)
    metric = quality.in_order(c.derived["quality_metric"] for c in mine)[0]
    key = "agreement_with_fp32" if random else "quality"
    mine = [c for c in mine if c.derived[key] is not None]
    single = [c for c in mine if c.scenario == "SingleStream"]
    if single:
        points = [(c.metric / 1e6, c.derived[key]) for c in single]
        xlabel, rows = "SingleStream latency, p90 early stopping (ms)", single
    else:
        rows = [c for c in mine if c.scenario == "Offline"]
        points = [(1000.0 / c.metric, c.derived[key]) for c in rows]
        xlabel = "Offline time per sample (ms)"
    if not rows:
        return None
    front = pareto_front(points)
    fig, ax = canvas.subplots(figsize=(8, 5))
    xerr, yerr = _pareto_bars(rows, per_sample=not single, random=random)
    if xerr is not None or yerr is not None:
        ax.errorbar([x for x, _ in points], [y for _, y in points], xerr=xerr, yerr=yerr,
                    fmt="none", ecolor="grey", elinewidth=0.8, capsize=2, zorder=1)
    for i, (c, (x, y)) in enumerate(zip(rows, points, strict=True)):
        ax.scatter(x, y, s=45 if i in front else 20, zorder=3, **_marker(study, c, i in front))
        if i in front:  # name the front; the others are told apart by colour (framework)
            ax.annotate(c.sut, (x, y), fontsize=8, xytext=(4, 4), textcoords="offset points")
    ax.plot([points[i][0] for i in front], [points[i][1] for i in front], color="black",
            linewidth=1, drawstyle="steps-post", label="Pareto front", zorder=2)
    for name in dict.fromkeys(c.family for c in rows):
        ax.scatter([], [], color=_color(study, name + "-"), label=name)
    if any(_one_run(c) for c in rows):  # not as precise as the measured ones: say so
        ax.scatter([], [], facecolors="none", edgecolors="black", label=ONE_RUN)
    ax.set_xscale("log")
    xs = [x for x, _ in points]  # the points set the axis; an interval from few runs can
    ax.set_xlim(min(xs) / 1.6, max(xs) * 1.6)  # span decades, and then runs off its edge
    _plain(ax.xaxis)
    ax.set_xlabel(xlabel + ", log scale")
    ax.set_ylabel(quality.axis_label(metric, agreement=random))
    ax.set_title(f"{model} on {system}: " + ("agreement with FP32 vs latency (random weights)"
                                             if random else "accuracy vs latency"), fontsize=11)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="lower right")
    return Figure("pareto", f"Accuracy vs latency — {model} ({system})",
                  f"pareto-{_slug(system, model)}.png", _png(fig),
                  f"scatter of accuracy against latency for {model}, Pareto front marked",
                  "Points: medians over repeats. Horizontal bars: the latency's 95% interval "
                  "(it may run off the axis, which the points set); vertical bars: the 95% "
                  f"interval of the {metric.name} change vs the framework's FP32 (paired per "
                  "sample), drawn around the point. Hollow points: one run, so no interval "
                  "(not as precise as the others); no vertical bar: no paired accuracy run.")


def batch_scan(study: Study, system: str, model: str) -> Figure | None:
    mine = [c for c in study.configs if (c.system, c.model) == (system, model)
            and c.scenario == "Offline" and c.derived["samples_per_s"]]
    # only SUTs measured at several batch sizes: a single point scans nothing
    suts = [s for s in dict.fromkeys(c.sut for c in mine)
            if len({c.batch_size for c in mine if c.sut == s}) > 1]
    if not suts:
        return None
    fig, ax = canvas.subplots(figsize=(8, 4.8))
    for sut in suts:
        points = sorted((c.batch_size, c.derived["samples_per_s"]) for c in mine if c.sut == sut)
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, marker="o", color=_color(study, sut), label=sut,
                linestyle=LINE_STYLE.get(variant(sut), (0, (5, 1))))
        best = max(points, key=lambda p: p[1])
        ax.scatter([best[0]], [best[1]], color=_color(study, sut), s=70, edgecolor="black",
                   zorder=3)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    return _line_chart(fig, ax, ("batch size (log2)", "Offline samples/s",
                                 f"{model} on {system}: batch-size scan (best batch circled)"),
                       "batch", f"Batch-size scan — {model} ({system})",
                       f"batch-{_slug(system, model)}.png",
                       f"Offline throughput against batch size per SUT for {model}")


def all_figures(study: Study) -> list[Figure]:
    """Every figure the study has data for, grouped by section."""
    figures: list[Figure | None] = []
    for system, model in study.keys("system", "model"):
        scenarios = [s for (s,) in study.keys("scenario")]
        figures.append(throughput(study, system, model))
        figures.extend(speedup_heatmap(study, system, model, s) for s in scenarios)
        figures.extend(speedup_bars(study, system, model, s) for s in scenarios)
        figures.extend(latency_curves(study, system, model, s) for s in scenarios)
        figures.append(accuracy_vs_latency(study, system, model))
        figures.append(batch_scan(study, system, model))
    order = ("throughput", "speedup", "latency", "pareto", "batch")
    done = [f for f in figures if f is not None]
    return sorted(done, key=lambda f: order.index(f.section))
