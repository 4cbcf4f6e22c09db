"""Run-to-run noise pooled across candidates: an interval for a candidate after one run.

Three runs of each of 18 candidates before any may be dropped is most of a 15-minute budget,
and most of those runs only confirm that a slow SUT is slow. The spread of one configuration's
runs is mostly the machine's (timer, scheduler, caches), so it is estimated once from every
candidate with 2+ runs: the classic pooled variance of the logarithms, the sum of each
candidate's squares around its own log-mean over the sum of its ``n_i - 1``. From
``POOL_MIN_DF`` degrees of freedom on, a candidate with fewer than ``min_runs`` quiet runs
(even one) has the interval ``log-mean +- t(df) * sd / sqrt(n)``, where ``sd`` is the pooled
one or its own when its own runs spread wider (never narrower than they show).

Only VALID undisturbed runs enter the pool: a disturbed run measures the other process.

What the one-run interval holds, by seeded simulation (``bench/rate_claims``, rows f): a
candidate's true median 95% of the time when its runs spread as the pool's candidates' do
(94.9% [93.8, 95.8] of 2000). It assumes that: a candidate noisier than the pool is covered
less (79% for a 12% candidate among candidates of 3, 6 and 12%), and a run that was slow for
a reason the monitor did not flag cannot show it (91% when one run in ten is 40% slower). No
pooled estimator mends either from one run: its own spread is unknown until its second, so
the search's drops after one run carry that risk, and its answer is checked by the simulation
in ``tests/quantmark/recommend/test_search_simulated.py`` and against a full sweep.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from quantmark.recommend.candidates import Evidence, Measurement
from quantmark.report.stats import Interval, t_quantile

#: the pooled spread is used from this many degrees of freedom on (t(8) = 2.31 at 95%)
POOL_MIN_DF = 8
METHOD = "t-log-pooled"


@dataclass(frozen=True)
class Pool:
    """The pooled standard deviation of log(figure) and its degrees of freedom."""

    sd: float
    df: int


def metric_values(runs: Sequence[Measurement], metric: str) -> list[float]:
    """``metric``'s finite positive figures of ``runs``."""
    values = (getattr(run, metric) for run in runs)
    return [float(v) for v in values if v is not None and math.isfinite(v) and v > 0]


def pool(evidence: Sequence[Evidence], metric: str, min_df: int = POOL_MIN_DF) -> Pool | None:
    """The pooled spread of ``metric`` over every candidate's quiet VALID runs (dropped ones
    too: their runs measured the machine all the same); None below ``min_df``."""
    squares, df = 0.0, 0
    for item in evidence:
        logs = np.log(metric_values(quiet_runs(item), metric))
        if len(logs) >= 2:
            squares += float(np.sum((logs - logs.mean()) ** 2))
            df += len(logs) - 1
    if df < min_df:
        return None
    return Pool(math.sqrt(squares / df), df)


def quiet_runs(evidence: Evidence) -> list[Measurement]:
    return [run for run in evidence.runs if run.valid and not run.disturbed]


def pooled_interval(values: Sequence[float], found: Pool, confidence: float) -> Interval:
    """The median of ``values`` with the interval of their log-mean on the pooled spread
    (or their own, when wider) and the pool's degrees of freedom."""
    logs = np.log(np.asarray(values, dtype=float))
    n = len(logs)
    own = float(np.std(logs, ddof=1)) if n >= 2 else 0.0
    half = t_quantile(confidence, found.df) * max(found.sd, own) / math.sqrt(n)
    mean, point = float(logs.mean()), float(np.median(values))
    low, high = math.exp(mean - half), math.exp(mean + half)
    return Interval(point, min(low, point), max(high, point), n, METHOD)
