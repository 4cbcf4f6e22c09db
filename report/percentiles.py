"""Latency percentiles as the reports show them: none for Offline, none that rests on too few
queries, and over repeats the median with its interval.

- Offline issues one query of every sample: its "latency" is the whole run's, not a sample's,
  so no percentile of it is shown anywhere (tables print ``n/a``, CSVs leave the cell blank).
- LoadGen's percentiles are nearest rank, ``sorted[floor(n * p)]``: with n <= 1 / (1 - p)
  queries that is the slowest query itself (p99 of 100 queries, p99.9 of a quick run's 600).
  A percentile is shown only when at least one query was slower than it, i.e. more than
  1 / (1 - p) queries: p50 3, p90 11, p99 101, p99.9 1001. Otherwise it reads
  ``n/a (k queries)``, and the CSVs leave it blank beside the run's query count.
- Over repeats a percentile is the median of the runs' values (one slow run moves it least),
  with the 95% interval of ``report.stats.figure_interval`` from 3 runs on.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, fields
from fractions import Fraction
from typing import Any

from quantmark.report.loadgen_log import PERCENTILES, RunSummary
from quantmark.report.stats import Interval, figure_interval

NO_PERCENTILES = "Offline"  # one query of every sample
INTERVAL_MIN_RUNS = 3  # fewer runs: the median alone (t with 1 df is no interval to read)
NOTE = ("Latency percentiles are LoadGen's (nearest rank), the median over repeats with its "
        "95% interval from 3 runs on. None for Offline (one query of every sample). A "
        "percentile p needs more than 1/(1-p) queries (p99: 101, p99.9: 1001), else it would "
        "be the slowest query: such cells read n/a (k queries).")


def min_queries(percentile: str) -> int:
    """The fewest queries for which LoadGen's nearest-rank ``percentile`` ("99.90") is not
    the slowest query: the least n with n (1 - p) > 1."""
    tail = (100 - Fraction(percentile)) / 100
    return math.floor(1 / tail) + 1


def why_not(scenario: str, percentile: str, queries: int | None) -> str:
    """Why ``percentile`` of a run is not shown ("n/a", "n/a (k queries)"); "" when it is. An
    unknown query count (a log without ``result_query_count``) is not held against it."""
    if scenario == NO_PERCENTILES:
        return "n/a"
    if queries is not None and queries < min_queries(percentile):
        return f"n/a ({queries} queries)"
    return ""


@dataclass(frozen=True)
class Percentile:
    """One latency percentile of a configuration over its repeats, in ns."""

    interval: Interval | None  # None when not shown
    queries: int | None  # the fewest queries of any of its runs
    missing: str = ""  # why not shown (``why_not``); "" when shown

    def text(self, scale: float = 1e6, fmt: str = "{:.2f}") -> str:
        """``2.31 [2.20, 2.45]`` in ms, ``2.31`` under 3 runs, ``n/a (64 queries)``."""
        if self.interval is None:
            return self.missing or "-"
        found = self.interval
        shown = Interval(found.point / scale,
                         None if found.low is None else found.low / scale,
                         None if found.high is None else found.high / scale, found.n,
                         found.method)
        return shown.text(fmt) if shown.low is not None else fmt.format(shown.point)


def fewest_queries(summaries: Sequence[RunSummary]) -> int | None:
    counts = [s.query_count for s in summaries if s.query_count is not None]
    return min(counts) if counts else None


def over_repeats(scenario: str, summaries: Sequence[RunSummary], percentile: str
                 ) -> Percentile:
    """``percentile`` over the runs ``summaries`` of one configuration."""
    queries = fewest_queries(summaries)
    values = [s.percentiles_ns[percentile] for s in summaries if percentile in s.percentiles_ns]
    missing = why_not(scenario, percentile, queries)
    if missing or not values or len(values) < len(summaries):
        return Percentile(None, queries, missing)
    if len(values) < INTERVAL_MIN_RUNS:
        point = float(statistics.median(values))
        return Percentile(Interval(point, None, None, len(values), "median"), queries)
    return Percentile(figure_interval(values), queries)


def cell(scenario: str, percentile: str, value_ns: float | None, queries: int | None,
         fmt: str = "{:.3f}") -> str:
    """One run's percentile in ms as a table shows it; "n/a ..." when not shown, "" unknown."""
    missing = why_not(scenario, percentile, queries)
    if missing:
        return missing
    return "" if value_ns is None else fmt.format(value_ns / 1e6)


def label(percentile: str) -> str:
    """``99.90`` -> ``p99.9``."""
    return f"p{percentile.rstrip('0').rstrip('.')}"


CSV_COLUMNS = [f"{label(p)}_ms_{part}" for p in PERCENTILES for part in ("median", "low", "high")]


def csv_cells(found: dict[str, Percentile]) -> dict[str, float | None]:
    """Each percentile's median and interval over repeats in ms (``CSV_COLUMNS``); blank where
    it is not shown or has no interval."""
    cells: dict[str, float | None] = {}
    for p in PERCENTILES:
        figure = found[p].interval
        for part, value in (("median", figure and figure.point), ("low", figure and figure.low),
                            ("high", figure and figure.high)):
            cells[f"{label(p)}_ms_{part}"] = None if value is None else value / 1e6
    return cells


_FIELDS = {f.name for f in fields(RunSummary)}


def over_results(scenario: str, summaries: Sequence[dict[str, Any]], percentile: str
                 ) -> Percentile:
    """``over_repeats`` of results.json ``summary`` records (the default job's runs)."""
    return over_repeats(scenario, [RunSummary(**{k: v for k, v in s.items() if k in _FIELDS})
                                   for s in summaries], percentile)
