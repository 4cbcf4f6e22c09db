"""Too little history: one or two earlier jobs cannot separate the machine's drift from a change.

A job's figure moves with the machine's state of the day (its neighbours, clock, caches):
the between-job spread. With fewer than ``MIN_HISTORY_JOBS`` earlier clean jobs a series can
measure it only by assuming it (``regress_noise``: ``FALLBACK_BETWEEN_FACTOR`` times the runs'
spread) or from one or two degrees of freedom, and a machine that drifts by more than the
assumption raises false alarms: seeded stores with one earlier job raised one in 10-22% of
them on quiet runs, 18% where the drift was 4.5x the runs' spread (``bench/regress_rates``).
So such a series reads "too little history to separate drift from change", exit 0, unless
its change is beyond ``DRIFT_BOUND`` with the runs' own noise alone: more than any plausible
drift between two jobs explains. On the 2-vCPU VM two clean jobs of one SUT differed by 1.30x
(BENCHMARKS.md at ab1032b, "run.py recommend: a search that decides"); between-job spreads of 5-18%
of log put a 2x change 2.7 to 9.8 standard deviations of a two-job difference away, and the
simulated stores with a drift twice or more the runs' spread raised a false alarm in at most 5% of
them (``bench/rate_claims``). ``run.py regress --assume-drift`` judges such series on the stated
assumption instead, as before, exit 1 on a regression.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import stats

from quantmark.store.regress_noise import OWN_FEW, WITHIN_ONLY, JobSummary, Noise, Spread

MIN_HISTORY_JOBS = 3  # earlier clean jobs that measure the drift (2 degrees of freedom)
DRIFT_BOUND = 2.0  # a change beyond this factor is more than drift between jobs explains
TOO_LITTLE = "too little history"


def too_little(jobs: int, noise: Noise) -> bool:
    """A series of ``jobs`` earlier clean jobs whose noise is assumed or barely measured
    (a pool over the machine's other series measures it: not this)."""
    return jobs < MIN_HISTORY_JOBS and noise.source in (WITHIN_ONLY, OWN_FEW)


def run_noise(history: Sequence[JobSummary], newest: JobSummary,
              estimate: Spread) -> tuple[float, int]:
    """The variance of (newest mean - the history's mean of job means) from the runs' noise
    alone (no between-job part), and its degrees of freedom; where no job had two runs, the
    jobs' own measured spread."""
    sigma2 = estimate.within_variance
    if sigma2 is None:
        return estimate.job_variance * (1 + 1 / len(history)), estimate.df
    share = sum(sigma2 / j.n for j in history) / len(history) ** 2
    return sigma2 / newest.n + share, estimate.within_df


def beyond_drift_p(difference: float, variance: float, df: int) -> float:
    """The one-sided p of "the change is within DRIFT_BOUND either way" (log scale), tested
    at its boundary with Student's t: small only when the change is beyond the bound by more
    than the runs' noise."""
    excess = abs(difference) - math.log(DRIFT_BOUND)
    return float(stats.t.sf(excess / math.sqrt(variance), max(df, 1)))


def reason(jobs: int) -> str:
    """What a too-little-history line says after its ratio."""
    earlier = f"{jobs} earlier clean job{'s' * (jobs != 1)}"
    return (f"{TOO_LITTLE} to separate drift from change: {earlier} ({MIN_HISTORY_JOBS}+ "
            f"measure the drift); a change beyond {DRIFT_BOUND:g}x would be called; "
            "--assume-drift judges it against the assumed between-job spread")
