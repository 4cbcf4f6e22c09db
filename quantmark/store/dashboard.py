"""The results dashboard: one self-contained HTML page of every stored series.

The latest figure of each series with its interval, its ``regress`` verdict and its trend,
regressions first, each change with what changed in the environment, and links to the runs'
folders. Self-contained like the characterization report (``report.html``): the CSS is inline
and each trend is an inline SVG drawn by matplotlib, so the page can be mailed or attached as
one file. Links are paths relative to the page's folder (absolute ``file://`` ones where no
relative path exists), so they open when the page sits beside the results.
"""

from __future__ import annotations

import html
import io
import os
import re
from collections.abc import Sequence
from datetime import datetime, timezone
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import matplotlib

from quantmark.ground.hashing import atomic_write_text
from quantmark.report import canvas
from quantmark.report.sweep_report import CSS as REPORT_CSS
from quantmark.store.changes import changes_text
from quantmark.store.points import Point, SeriesKey
from quantmark.store.regress_baseline import instant
from quantmark.store.verdicts import ORDER, UNITS, Verdict, by_series

if TYPE_CHECKING:  # its module imports SQLAlchemy: only where the store is opened
    from quantmark.store.quality_jobs import QualityPoint

FILENAME = "dashboard.html"
JOBS_LISTED = 10  # the most recent jobs of a series listed with their links
CSS = REPORT_CSS + """
.regressed{color:#b00;font-weight:bold}.improved{color:#070}.cannot{color:#a60}
section{border-top:1px solid #ddd;margin-top:18px}svg{max-width:100%;height:auto}"""
NEWEST, DISTURBED, INVALID = "#d62728", "#ff7f0e", "#7f7f7f"


def _href(run_dir: str, page_folder: Path) -> str:
    """A link to a run's folder: relative to the page where possible."""
    if not run_dir:
        return ""
    target = Path(run_dir).absolute()
    try:
        return quote(Path(os.path.relpath(target, page_folder.absolute())).as_posix())
    except ValueError:  # another drive: no relative path
        return target.as_uri()


def _link(point: Point, page_folder: Path, text: str = "run folder") -> str:
    href = _href(point.run_dir, page_folder)
    return f"<a href='{html.escape(href)}'>{html.escape(text)}</a>" if href else ""


def _figure(point: Point) -> str:
    """The job's figure with its interval; flagged where the store recorded it before checking
    figures against LoadGen's logs (a schema 1 store's)."""
    unchecked = (" (UNCHECKED against LoadGen's logs: run.py store import its folder)"
                 if point.unchecked_runs else "")
    if point.value is None:
        return "no VALID figure" + unchecked
    unit = UNITS.get(point.series.metric, "")
    if point.low is None or point.high is None:
        return f"{point.value:.4g} {unit} (one run){unchecked}"
    return f"{point.value:.4g} [{point.low:.4g}, {point.high:.4g}] {unit}{unchecked}"


def trend_svg(series: SeriesKey, jobs: Sequence[Point], verdict: Verdict | None) -> str:
    """The series' figure over time as an inline SVG: error bars for the intervals, disturbed
    jobs as crosses, INVALID ones hollow, the newest in red, the baseline dashed."""
    shown = [p for p in jobs if p.value is not None]
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": series.label()}):
        fig, ax = canvas.subplots(figsize=(6.0, 2.0))
        for point in shown:
            when = instant(point.when)
            low = point.value - point.low if point.low is not None else 0
            high = point.high - point.value if point.high is not None else 0
            newest = point is jobs[-1]
            color = NEWEST if newest else DISTURBED if point.disturbed else "#1f77b4"
            ax.errorbar([when], [point.value], yerr=[[low], [high]], color=color, capsize=2,
                        marker="x" if point.disturbed else "o",
                        markerfacecolor="none" if not point.valid else color,
                        markersize=6 if newest else 4)
        if verdict is not None and verdict.baseline_figure is not None:
            ax.axhline(verdict.baseline_figure, color=INVALID, linestyle="--", linewidth=0.8)
        ax.set_ylabel(UNITS.get(series.metric, series.metric), fontsize=8)
        ax.tick_params(labelsize=7)
        fig.autofmt_xdate()
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", bbox_inches="tight")
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # no XML prolog or DOCTYPE inside HTML


def _verdict_cell(verdict: Verdict | None) -> str:
    if verdict is None:
        return "not judged"
    css = {"regressed": "regressed", "improved": "improved", "cannot judge": "cannot"}.get(
        verdict.outcome, "")
    text = html.escape(verdict.outcome)
    return f"<span class='{css}'>{text}</span>" if css else text


def _ratio_cell(verdict: Verdict | None) -> str:
    if verdict is None or verdict.ratio is None or verdict.confidence is None:
        return html.escape(verdict.reason if verdict else "")
    return html.escape(f"{verdict.ratio:.3f}x [{verdict.low:.3f}, {verdict.high:.3f}] "
                       f"({100 * verdict.confidence:.4g}%)")


def _summary_row(jobs: Sequence[Point], verdict: Verdict | None, folder: Path) -> str:
    newest = jobs[-1]
    anchor = _anchor(newest.series)
    baseline = "" if verdict is None or verdict.baseline_figure is None else \
        f"{verdict.baseline_figure:.4g} ({len(verdict.history)} jobs)"
    changed = changes_text(verdict.changes) if verdict and verdict.changes else ""
    cells = [f"<a href='#{anchor}'>{html.escape(newest.series.label())}</a>",
             _verdict_cell(verdict), html.escape(_figure(newest)), html.escape(baseline),
             _ratio_cell(verdict), html.escape(verdict.noise.text() if verdict and
                                               verdict.noise else ""),
             html.escape(changed), _link(newest, folder)]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _anchor(series: SeriesKey) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", series.label())


def _jobs_table(jobs: Sequence[Point], folder: Path) -> str:
    rows = []
    for point in reversed(jobs[-JOBS_LISTED:]):
        flags = ", ".join(f for f, on in (("disturbed", point.disturbed),
                                          ("INVALID", not point.valid),
                                          ("UNCHECKED", point.unchecked_runs)) if on) or "clean"
        cells = [html.escape(point.when), html.escape(_figure(point)), html.escape(flags),
                 html.escape(point.version), _link(point, folder)]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("when", "figure", "state", "quantmark", "folder"))
    return f"<div class='wrap'><table><tr>{head}</tr>{''.join(rows)}</table></div>"


def _section(jobs: Sequence[Point], verdict: Verdict | None, folder: Path) -> str:
    series = jobs[-1].series
    parts = [f"<section id='{_anchor(series)}'><h3>{html.escape(series.label())}: "
             f"{_verdict_cell(verdict)}</h3>"]
    if verdict is not None:
        parts.append(f"<p>{html.escape(verdict.text())}</p>")
        if verdict.outcome in ("regressed", "improved"):
            parts.append(f"<p>{html.escape(changes_text(verdict.changes))}</p>")
    parts += [trend_svg(series, jobs, verdict), _jobs_table(jobs, folder), "</section>"]
    return "\n".join(parts)


def _order(grouped: dict[SeriesKey, list[Point]],
           verdicts: dict[SeriesKey, Verdict]) -> list[SeriesKey]:
    """Regressions first (then improved, cannot judge, no change), series not judged last."""
    return sorted(grouped, key=lambda k: (ORDER.index(verdicts[k].outcome) if k in verdicts
                                          else len(ORDER), k))


def quality_html(qualities: Sequence[QualityPoint]) -> str:
    """The accuracy runs, one table per (model, SUT, metric), each headed by its metric's
    name (a detector's mAP, a classifier's top-1: never one column)."""
    if not qualities:
        return ""
    parts = ["<h2>Accuracy</h2><p>Each accuracy run's figure in its task's metric.</p>"]
    for (model, sut, _), group in groupby(qualities, key=lambda q: q.series):
        rows = list(group)
        metric = rows[0].metric
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in (
                q.when, "-" if q.value is None else f"{q.value:.2f}", q.version, q.machine))
            + "</tr>" for q in reversed(rows[-JOBS_LISTED:]))
        head = "".join(f"<th>{html.escape(h)}</th>" for h in (
            "when", f"{metric.name} {metric.unit}".rstrip(), "quantmark", "machine"))
        title = f"{model or '(model not recorded)'} {sut} ({metric.name})"
        parts.append(f"<h3>{html.escape(title)}</h3>"
                     f"<div class='wrap'><table><tr>{head}</tr>{body}</table></div>")
    return "\n".join(parts)


def to_html(points: Sequence[Point], verdicts: Sequence[Verdict], folder: Path,
            qualities: Sequence[QualityPoint] = ()) -> str:
    """The page; ``folder`` is where it will sit (links are relative to it); ``qualities``:
    the accuracy runs, shown after the trends."""
    grouped, judged = by_series(points), {v.series: v for v in verdicts}
    order = _order(grouped, judged)
    counts = {o: sum(v.outcome == o for v in verdicts) for o in ORDER}
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = ["series", "verdict", "latest figure", "baseline", "new / baseline", "noise",
            "what changed", "latest run"]
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'>",
             "<title>quantmark results dashboard</title>", f"<style>{CSS}</style>",
             "</head><body><h1>quantmark results dashboard</h1>",
             f"<p>{len(grouped)} series, {len(points)} jobs; written {stamp}. "
             + html.escape(", ".join(f"{n} {o}" for o, n in counts.items() if n)) + "</p>",
             "<h2>Latest figures</h2><div class='wrap'><table><tr>"
             + "".join(f"<th>{h}</th>" for h in head) + "</tr>"
             + "".join(_summary_row(grouped[k], judged.get(k), folder) for k in order)
             + "</table></div>", "<h2>Trends</h2>",
             "<p>Each job's figure with its interval; red: the newest job; orange crosses: "
             "disturbed jobs; hollow: no VALID run; dashed: the baseline.</p>"]
    parts += [_section(grouped[k], judged.get(k), folder) for k in order]
    parts += [quality_html(qualities), "</body></html>"]
    return "\n".join(parts) + "\n"


def write_dashboard(points: Sequence[Point], verdicts: Sequence[Verdict],
                    path: str | os.PathLike, qualities: Sequence[QualityPoint] = ()) -> Path:
    """Write the dashboard atomically: ``path`` is the HTML file, or a folder to hold
    ``dashboard.html``. Returns the file written."""
    target = Path(path)
    if target.suffix.lower() not in (".html", ".htm"):
        target = target / FILENAME
    atomic_write_text(target, to_html(points, verdicts, target.parent, qualities))
    return target


def write_store_dashboard(url: str | None, output: str | os.PathLike,
                          fdr: float = 0.05) -> tuple[Path, list[Verdict]]:
    """``run.py report --store [URL] --output DIR``: every series of the store, judged by
    ``regress`` against its whole history, drawn into DIR/dashboard.html."""
    from quantmark.ground.errors import UserError
    from quantmark.store.results_store import open_store  # SQLAlchemy: when it is used
    from quantmark.store.verdicts import regress

    with open_store(url) as store:
        points = store.points()
        qualities = store.quality_points()
    if not points and not qualities:
        raise UserError(f"the results store {url or '(default)'} holds no results; record runs "
                        "(python run.py) or load folders (run.py store import DIR) first")
    verdicts = regress(points, fdr=fdr) if points else []
    return write_dashboard(points, verdicts, output, qualities), verdicts
