"""A job's figure row from its runs, and a ``Point`` from the rows a query returns.

A repeat set's figure is the median of its VALID runs with the 95% interval
``quantmark.report.stats.figure_interval`` gives (as ``run.py --repeats`` prints it); a single
run's is its own figure, without an interval. scipy is imported only for a set of two or more
runs: the lean install (no scipy) still records, with the median and no interval.
"""

from __future__ import annotations

import json
import logging
import statistics
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from quantmark.store.points import Point, SeriesKey

log = logging.getLogger(__name__)


def interval(values: Sequence[float]) -> tuple[float, float | None, float | None, str]:
    """The median of ``values`` (one per VALID run) with its 95% interval and method."""
    if len(values) == 1:
        return values[0], None, None, "single"
    try:
        from quantmark.report.stats import figure_interval
    except ImportError:  # the lean install has no scipy: the median without its interval
        log.debug("no scipy: a repeat set's median is recorded without its interval")
        return statistics.median(values), None, None, "median"
    found = figure_interval(values)
    return found.point, found.low, found.high, found.method


def figure_row(series: SeriesKey, runs: Sequence[Any]) -> dict[str, Any]:
    """The ``figures`` row of a job whose runs are ``runs`` (value, left_out, disturbed)."""
    valid = [float(run.value) for run in runs if run.left_out is None and run.value is not None]
    left = [float(run.value) for run in runs if run.left_out is not None
            and run.value is not None]
    point, low, high, method = interval(valid) if valid else (None, None, None, None)
    return {"model": series.model, "sut": series.sut, "scenario": series.scenario,
            "metric": series.metric, "value": point, "low": low, "high": high,
            "method": method, "valid": bool(valid), "disturbed": any(r.disturbed for r in runs),
            "invalid_runs": sum(run.left_out is not None for run in runs),
            "runs": json.dumps(valid), "left_out_runs": json.dumps(left)}


def iso_utc(epoch_s: float) -> str:
    """Epoch seconds as ISO 8601 UTC to the second: ``2026-11-02T14:03:11Z``."""
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def point_of(row: Any, facts: Sequence[Any], tags: Sequence[Any], unchecked: int = 0) -> Point:
    """The Point of one joined figures/jobs row, its environment rows and tag rows;
    ``unchecked``: how many of its records were recorded before checks against LoadGen's logs
    (a schema 1 store's)."""
    return Point(
        series=SeriesKey(row["model"], row["sut"], row["scenario"], row["metric"]),
        job_id=row["job_key"], when=iso_utc(row["started_at"]), value=row["value"],
        low=row["low"], high=row["high"], runs=tuple(json.loads(row["runs"])),
        valid=bool(row["valid"]), disturbed=bool(row["disturbed"]),
        invalid_runs=int(row["invalid_runs"]),
        environment={fact.key: json.loads(fact.value) for fact in facts},
        tags=tuple(sorted(tag.tag for tag in tags)), run_dir=row["folder"],
        version=row["version"], left_out_runs=tuple(json.loads(row["left_out_runs"])),
        machine=row["machine"], unchecked_runs=unchecked)
