"""The report's figures, drawn with matplotlib (Agg) to PNG bytes.

One figure per machine and model (and scenario where it matters), so merged reports of several
machines stay readable: throughput by SUT, the speedup heatmap framework x precision, latency
percentile curves, accuracy vs latency with the Pareto front, and the batch-size scan.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from quantmark.report.characterize import Config, Study, family, pareto_front, variant  # noqa: E402
from quantmark.sut.registry import variant_order  # noqa: E402

PERCENTILE_LABELS = {"50.00": "p50", "90.00": "p90", "95.00": "p95", "97.00": "p97",
                     "99.00": "p99", "99.90": "p99.9"}
# the precisions' column order: every framework's own order, merged (quantmark.sut.registry)
VARIANT_ORDER = variant_order()
PALETTE = plt.get_cmap("tab10")
# one colour per framework, one line style per precision: fp32 solid, int8 dotted
LINE_STYLE = {"fp32": "-", "int8": ":", "fp16": "--", "bf16": "--", "int8dyn": "-."}


@dataclass
class Figure:
    """One rendered figure: where it goes in the report and its PNG bytes."""

    section: str
    title: str
    filename: str
    png: bytes
    alt: str


def _families(study: Study) -> list[str]:
    return list(dict.fromkeys(c.family for c in study.configs))


def _color(study: Study, sut: str):
    return PALETTE(_families(study).index(family(sut)) % 10)


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def _plain(axis) -> None:
    """Log axes labelled 5, 10, 20 rather than 5x10^0: the reader wants milliseconds."""
    formatter = FuncFormatter(lambda value, _: f"{value:g}")
    axis.set_major_formatter(formatter)
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


def throughput(study: Study, system: str, model: str) -> Figure | None:
    mine = [c for c in study.configs if (c.system, c.model) == (system, model)
            and c.scenario == "Offline"]
    batch = _offline_reference_batch(mine)
    rows = [c for c in mine if c.batch_size == batch and c.derived["samples_per_s"]]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(rows) + 1.4))
    names = [c.sut for c in rows]
    values = [c.derived["samples_per_s"] for c in rows]
    errors = [c.derived["samples_per_s_std"] or 0 for c in rows]
    ax.barh(names, values, xerr=errors if any(errors) else None,
            color=[_color(study, n) for n in names])
    for y, value in enumerate(values):
        ax.text(value, y, f" {value:.1f}", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("samples/s (Offline, LoadGen)")
    ax.set_title(f"{model} on {system}: Offline throughput, batch {batch}")
    ax.grid(axis="x", alpha=0.3)
    return Figure("throughput", f"Offline throughput by SUT — {model} ({system})",
                  f"throughput-{_slug(system, model)}.png", _png(fig),
                  f"bar chart of Offline samples per second of every SUT for {model}")


def speedup_heatmap(study: Study, system: str, model: str, scenario: str) -> Figure | None:
    mine = [c for c in study.configs
            if (c.system, c.model, c.scenario) == (system, model, scenario)]
    batch = _offline_reference_batch(mine) if scenario != "SingleStream" else 1
    mine = [c for c in mine if c.batch_size == batch]
    if not any(c.derived["speedup_vs_fp32"] for c in mine):
        return None
    families = list(dict.fromkeys(c.family for c in mine))
    variants = sorted({c.variant for c in mine},
                      key=lambda v: (VARIANT_ORDER.index(v) if v in VARIANT_ORDER else 99, v))
    grid = np.full((len(families), len(variants)), np.nan)
    for c in mine:
        if c.derived["speedup_vs_fp32"]:
            grid[families.index(c.family), variants.index(c.variant)] = (
                c.derived["speedup_vs_fp32"])
    fig, ax = plt.subplots(figsize=(1.1 * len(variants) + 2, 0.6 * len(families) + 1.6))
    finite = grid[np.isfinite(grid)]
    limit = max(2.0, float(np.max(np.abs(np.log2(finite))))) if finite.size else 2.0
    image = ax.imshow(np.log2(grid), cmap="RdYlGn", vmin=-limit, vmax=limit, aspect="auto")
    for (i, j), value in np.ndenumerate(grid):
        ax.text(j, i, "—" if math.isnan(value) else f"{value:.2f}×", ha="center", va="center",
                fontsize=9)
    ax.set_xticks(range(len(variants)), variants)
    ax.set_yticks(range(len(families)), families)
    ticks = np.arange(-math.floor(limit), math.floor(limit) + 1)
    bar = fig.colorbar(image, ax=ax, ticks=ticks)
    bar.ax.set_yticklabels([f"{2.0 ** t:g}×" for t in ticks])
    bar.set_label("speedup (log scale)")
    what = "samples/s" if scenario != "SingleStream" else "official latency"
    ax.set_title(f"{model} on {system}\n{scenario} speedup vs the same framework's FP32 "
                 f"({what}, batch {batch})", fontsize=10)
    return Figure("speedup", f"Speedup heatmap — {model}, {scenario} ({system})",
                  f"speedup-{_slug(system, model, scenario)}.png", _png(fig),
                  f"heatmap of {scenario} speedup per framework and precision for {model}")


def latency_curves(study: Study, system: str, model: str, scenario: str) -> Figure | None:
    mine = [c for c in study.configs
            if (c.system, c.model, c.scenario) == (system, model, scenario)
            and c.derived["percentiles_ns"]]
    if scenario == "Offline" or not mine:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for c in mine:
        points = c.derived["percentiles_ns"]
        keys = [p for p in PERCENTILE_LABELS if p in points]
        label = c.sut if c.batch_size == 1 else f"{c.sut} b{c.batch_size}"
        ax.plot(range(len(keys)), [points[p] / 1e6 for p in keys], marker="o", markersize=3,
                color=_color(study, c.sut), linestyle=LINE_STYLE.get(c.variant, (0, (5, 1))),
                label=label)
    ax.set_xticks(range(len(PERCENTILE_LABELS)), list(PERCENTILE_LABELS.values()))
    ax.set_yscale("log")
    _plain(ax.yaxis)
    return _line_chart(fig, ax, ("percentile (LoadGen, nearest rank)", "latency (ms, log scale)",
                                 f"{model} on {system}: {scenario} latency percentiles"),
                       "latency", f"Latency percentiles — {model}, {scenario} ({system})",
                       f"latency-{_slug(system, model, scenario)}.png",
                       f"latency percentile curves of every SUT, {scenario}, {model}")


def random_weights(configs: list[Config]) -> bool:
    """The model's weights are random (seeded): its top-1 is chance, not a quality measure."""
    return any("random" in c.derived["weights"].lower() for c in configs)


def accuracy_vs_latency(study: Study, system: str, model: str) -> Figure | None:
    """Top-1 against the SingleStream official latency (else Offline time per sample), the
    Pareto front (nothing both faster and more accurate) drawn and its points named. For
    random weights the y axis is agreement with the framework's FP32: top-1 would be chance."""
    mine = [c for c in study.configs if (c.system, c.model) == (system, model) and c.metric]
    random = random_weights(mine)
    key = "agreement_with_fp32" if random else "top1"
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
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (c, (x, y)) in enumerate(zip(rows, points, strict=True)):
        ax.scatter(x, y, color=_color(study, c.sut), s=45 if i in front else 20,
                   edgecolor="black" if i in front else "none", zorder=3)
        if i in front:  # name the front; the others are told apart by colour (framework)
            ax.annotate(c.sut, (x, y), fontsize=8, xytext=(4, 4), textcoords="offset points")
    ax.plot([points[i][0] for i in front], [points[i][1] for i in front], color="black",
            linewidth=1, drawstyle="steps-post", label="Pareto front", zorder=2)
    for name in dict.fromkeys(c.family for c in rows):
        ax.scatter([], [], color=_color(study, name + "-"), label=name)
    ax.set_xscale("log")
    _plain(ax.xaxis)
    ax.set_xlabel(xlabel + ", log scale")
    if random:
        ax.set_ylabel("top-1 agreement with the framework's FP32 (%)")
        title = f"{model} on {system}: agreement with FP32 vs latency (random weights)"
    else:
        ax.set_ylabel("top-1 accuracy (%)")
        title = f"{model} on {system}: accuracy vs latency"
    ax.set_title(title, fontsize=11)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="lower right")
    return Figure("pareto", f"Accuracy vs latency — {model} ({system})",
                  f"pareto-{_slug(system, model)}.png", _png(fig),
                  f"scatter of accuracy against latency for {model}, Pareto front marked")


def batch_scan(study: Study, system: str, model: str) -> Figure | None:
    mine = [c for c in study.configs if (c.system, c.model) == (system, model)
            and c.scenario == "Offline" and c.derived["samples_per_s"]]
    # only SUTs measured at several batch sizes: a single point scans nothing
    suts = [s for s in dict.fromkeys(c.sut for c in mine)
            if len({c.batch_size for c in mine if c.sut == s}) > 1]
    if not suts:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.8))
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
        figures.extend(latency_curves(study, system, model, s) for s in scenarios)
        figures.append(accuracy_vs_latency(study, system, model))
        figures.append(batch_scan(study, system, model))
    order = ("throughput", "speedup", "latency", "pareto", "batch")
    done = [f for f in figures if f is not None]
    return sorted(done, key=lambda f: order.index(f.section))
