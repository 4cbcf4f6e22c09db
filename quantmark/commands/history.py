"""``run.py history [filters] [--plot FILE.png]``: each series' figures over time, from the
results store, with their intervals, validity, disturbance and where they came from.

Nothing matching the filters is exit 1 with one line naming the filters that matched nothing
on their own (or, when each matches something, that they match nothing together): not bad
input (exit 2), but not a result either, so a script that expects one notices. SQLAlchemy and
matplotlib are imported when the verb runs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from quantmark.commands import options
from quantmark.report import console_tables as tables

if TYPE_CHECKING:
    from quantmark.store.points import Point
    from quantmark.store.quality_jobs import QualityPoint
    from quantmark.store.results_store import Store

NAME = "history"
HELP = "each series' results over time from the results store, with intervals (--plot)"
DESCRIPTION = ("Each series (model, SUT, scenario) of the results store over time: every "
               "job's figure with its 95% interval, VALID or INVALID, disturbed or not, the "
               "quantmark version and machine that measured it and its folder; and each "
               "accuracy run's figure in its task's metric (top-1, mAP).")
FILTERS = ("model", "sut", "scenario", "machine", "version", "since", "until", "tag")

console = tables.make_console()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = options.series_filters(parser)
    group.add_argument("--version", help="the quantmark version that measured it")
    group.add_argument("--since", metavar="DATE", help="from this day (YYYY-MM-DD) or time")
    group.add_argument("--until", metavar="DATE", help="up to this day (YYYY-MM-DD) or time")
    group.add_argument("--tag", help="jobs with this tag (store import --tag, $QUANTMARK_TAGS)")
    options.store(parser)
    parser.add_argument("--plot", metavar="FILE.png",
                        help="also draw each series' trend, one panel per series")


def plot(path: str, points: list[Point], qualities: list[QualityPoint]) -> Path:
    """Draw each series' trend (figures and accuracy) into ``path``; say where."""
    from quantmark.store.quality_jobs import as_point
    from quantmark.store.trend_plot import MAX_PANELS, plot_history

    drawn_points = [*points, *(as_point(q) for q in qualities)]
    drawn = plot_history(drawn_points, Path(path))
    more = len({p.series for p in drawn_points}) - drawn
    note = f" (the first {MAX_PANELS}: narrow the filters for the other {more})" \
        if more > 0 else ""
    console.print(f"trend of {drawn} series in {escape(path)}{note}")
    return Path(path)


def matching(args: argparse.Namespace) -> tuple[list[Point], list[QualityPoint], str]:
    """The store's figures (and accuracy runs' qualities) the filters select, oldest first;
    with none, the line that says why ("" when some matched)."""
    from quantmark.store.results_store import epoch, open_store

    filters = {name: getattr(args, name) for name in FILTERS if getattr(args, name)}
    for name in ("since", "until"):  # a bad date is bad input, before the store is opened
        epoch(filters.get(name))
    with open_store(args.store) as store:
        points = store.points(**filters)
        qualities = store.quality_points(**filters)
        nothing = "" if points or qualities else nothing_matched(store, filters)
    return points, qualities, nothing


def nothing_matched(store: Store, filters: dict[str, str]) -> str:
    """The one line for an empty answer: which filters match nothing on their own."""
    if not filters:
        return f"the results store {store.where} holds no figures yet: run a test, or " \
               "run.py store import DIR"
    alone = [f"--{name} {value}" for name, value in filters.items()
             if not store.count(**{name: value})]
    if alone:
        return (f"no result in the results store {store.where} matches "
                f"{', '.join(alone)}")
    given = " ".join(f"--{name} {value}" for name, value in filters.items())
    return (f"each filter matches results in {store.where}, but none matches them all "
            f"together ({given})")


def _number(value: float, metric: str) -> str:
    return f"{value:.2f}" if metric == "latency_ms" else f"{value:.1f}"


def figure_text(point: Point) -> str:
    """``12.31 [11.90, 12.80]``, ``12.31 (n=1)``, or the left-out runs' median in brackets."""
    metric = point.series.metric
    if point.value is None:
        if not point.left_out_runs:
            return "-"
        ordered = sorted(point.left_out_runs)
        return f"({_number(ordered[len(ordered) // 2], metric)}, left out)"
    if point.low is None or point.high is None:
        return f"{_number(point.value, metric)} (n={max(1, len(point.runs))})"
    return (f"{_number(point.value, metric)} [{_number(point.low, metric)}, "
            f"{_number(point.high, metric)}]")


def validity_text(point: Point) -> str:
    """VALID or INVALID as LoadGen's logs said when the store recorded it; UNCHECKED where it
    was recorded before the store checked figures against the logs (a schema 1 store's)."""
    text = "INVALID" if not point.valid else "VALID"
    if point.valid and point.invalid_runs:
        total = len(point.runs) + point.invalid_runs
        text += f" ({point.invalid_runs} of {total} runs INVALID, left out)"
    if point.unchecked_runs:
        text += f", UNCHECKED ({point.unchecked_runs} not checked against LoadGen's logs)"
    return text


def unchecked_note(points: list[Point]) -> str | None:
    """The line under the tables when some figures were never checked against LoadGen's logs:
    what they are and how to check them."""
    folders = sorted({p.run_dir for p in points if p.unchecked_runs})
    if not folders:
        return None
    return (f"{len(folders)} job(s) were recorded before the store checked figures against "
            "LoadGen's logs (UNCHECKED): their figures are results.json's; run.py store import "
            f"{' '.join(folders[:3])}{' ...' if len(folders) > 3 else ''} checks them (a "
            "figure the logs do not back is refused and named)")


def show_quality(points: list[QualityPoint]) -> None:
    """One table per accuracy series (model, SUT, metric), titled by the metric's name: a
    detector's mAP is never a column of a classifier's top-1."""
    from itertools import groupby

    for (model, sut, _), group in groupby(points, key=lambda p: p.series):
        rows = list(group)
        metric = rows[0].metric
        console.print(tables.table(
            f"{model or '(model not recorded)'} {sut} accuracy ({metric.name})",
            ["when (UTC)", f"{metric.name} {metric.unit}".rstrip(), "quantmark", "machine",
             "folder"],
            [[p.when.replace("T", " ").removesuffix("Z"),
              "-" if p.value is None else f"{p.value:.2f}", p.version, p.machine, p.run_dir]
             for p in rows], overflow="fold"))


def show(points: list[Point]) -> None:
    """One table per series, oldest job first."""
    from quantmark.store.trend_plot import by_series

    units = {"latency_ms": "ms", "samples_per_s": "samples/s"}
    for key, group in by_series(points):
        rows: list[list[str]] = [
            [p.when.replace("T", " ").removesuffix("Z"), figure_text(p), validity_text(p),
             "DISTURBED" if p.disturbed else "", p.version, p.machine, p.run_dir]
            for p in group]
        console.print(tables.table(
            f"{key.model} {key.sut} {key.scenario} ({key.metric})",
            ["when (UTC)", f"{units.get(key.metric, key.metric)} [95% interval]", "validity",
             "disturbed", "quantmark", "machine", "folder"], rows, overflow="fold"))
