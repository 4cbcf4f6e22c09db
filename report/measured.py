"""What LoadGen measured over a configuration's repeats, as the characterization report shows it:
validity, the official metric (median; mean, spread and range for the CSV), samples/s, and the
latency percentiles (``report.percentiles``)."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from quantmark.report import percentiles
from quantmark.report.loadgen_log import PERCENTILES, RunSummary

if TYPE_CHECKING:
    from quantmark.report.study import Config


def _spread(values: list[float]) -> float | None:
    return statistics.stdev(values) if len(values) > 1 else None


def measured(config: Config) -> dict[str, Any]:
    """What LoadGen measured, over the config's repeats: validity, metric (median; the mean
    too, for the CSV's existing column) and its spread, samples/s, percentiles."""
    every = [r.summary for r in config.runs]
    summaries = [r.summary for r in config.valid_runs()]  # no INVALID run in any figure
    samples = [s.samples_per_second for s in summaries if s.samples_per_second is not None]
    metric_values = config.metric_values()
    invalid = len(every) - len(summaries)
    return {
        "n": len(summaries),
        "validity": ("VALID" if not invalid else
                     f"INVALID ({invalid} of {len(every)}, left out of the figures)"),
        "run_kind": config.first.settings.get("mode", "unknown"),
        "metric_name": every[0].metric_name,
        "metric_unit": every[0].metric_unit,
        "metric": config.metric,
        "metric_mean": statistics.fmean(metric_values) if metric_values else None,
        "metric_std": _spread(metric_values),
        "metric_min": min(metric_values) if metric_values else None,
        "metric_max": max(metric_values) if metric_values else None,
        "samples_per_s": statistics.median(samples) if samples else None,
        "samples_per_s_mean": statistics.fmean(samples) if samples else None,
        "samples_per_s_std": _spread(samples),
        **_percentiles(config.scenario, summaries),
    }


def _percentiles(scenario: str, summaries: list[RunSummary]) -> dict[str, Any]:
    """Each latency percentile over the repeats (``report.percentiles``: the median with its
    interval; none for Offline, none resting on too few queries), and as plain medians in ns
    (those shown only) for the figures."""
    found = {p: percentiles.over_repeats(scenario, summaries, p) for p in PERCENTILES}
    return {"percentiles": found, "queries": percentiles.fewest_queries(summaries),
            "percentiles_ns": {p: f.interval.point for p, f in found.items() if f.interval}}
