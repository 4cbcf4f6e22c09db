"""How much a series' figure moves between jobs when nothing changed: the noise ``regress``
tests against.

A job's runs share the machine's state of the moment (a VM's neighbours, its clock, the page
cache), so jobs differ among themselves by more than runs within a job do. On the log scale
(speed noise is multiplicative, and logs make series of different sizes comparable)::

    log(figure of run r of job j) = series level + job effect b_j + run noise e_jr
    b_j ~ N(0, between_sd^2),  e_jr ~ N(0, within_sd^2)

A job's mean of log runs then varies by ``between_sd^2 + within_sd^2 / n_j``. That variance is
estimated, in this order of preference:

1. ``own``: the series' own history has ``MIN_OWN_JOBS`` clean jobs or more: the spread of
   their means (``jobs - 1`` degrees of freedom).
2. ``machine``: too few of its own, but ``MIN_POOLED_SERIES`` series or more measured on the
   same machine have, together, at least ``MIN_POOLED_DF`` degrees of freedom (and more than
   its own): their spreads pooled. One or two other series are not the machine: a noisy SUT
   would judge a quiet one by its own noise.
   Series measured in the same jobs share those jobs' drift, so the pool's degrees of freedom
   are at most its distinct jobs less one: twenty series of the same three jobs know the
   machine's drift from three jobs, not forty (counted as forty, seeded stores of identical
   jobs raised a false alarm in 10% [5.7, 16] of 150 trials, against the stated 5%).
3. ``own (few jobs)``: ``MIN_FEW_JOBS`` to ``MIN_OWN_JOBS - 1`` jobs (or 2 jobs of one run
   each, no within-job spread): a t on their own spread with 2-3 degrees of freedom (1 for
   two one-run jobs); valid, and wide.
4. ``within-job only``: one or two earlier jobs with runs inside them and no pool: only the
   runs' spread is known well, and the between-job part is assumed to be
   ``FALLBACK_BETWEEN_FACTOR`` times it, or what the jobs' own spread measures where that is
   more (stated on the line). A t on two jobs' spread would be valid but near blind (one
   degree of freedom: a 2x slowdown passes unseen). With fewer than three earlier jobs the
   verdict is "too little history" unless asked to rest on this (``regress_history``).

Only clean jobs count (VALID figure, not disturbed): a disturbed job's spread is the
disturbance's, not the machine's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from quantmark.store.points import Point

MIN_OWN_JOBS = 5  # 4 degrees of freedom: below that a series' own spread is a poor guess
#: 3 jobs (2 degrees of freedom): a t on their own spread is valid and, with t's wide
#: quantile (4.3), still sees what the within-job assumption hides: on the 2-vCPU VM, ort-int8
#: Offline at --threads 1 (0.57x) against three jobs at --threads 2 whose runs spread 8.8%
MIN_FEW_JOBS = 3
MIN_POOLED_DF = 4
MIN_POOLED_SERIES = 3
# Too few jobs to measure it: the between-job sd is taken as this multiple of the within-job sd.
# On a 2-vCPU VM ort-int8 SingleStream ran 3.39 ms in one job and 2.61 ms in the next (log
# difference 0.26) with runs inside a job within sd 0.04-0.15 of log (BENCHMARKS.md at ab1032b,
# "run.py recommend: a search that decides"): 3x covers that pair (1.5 sd of a difference at
# 0.04). A machine that drifts by more than 3x its runs' spread breaks the assumption: seeded
# stores with between-job sd 0.18 and within-job 0.04 raised a false alarm in 17.5% of them with
# one earlier job (bench/regress_rates.py), and 23% of stores of quiet runs (within 0.01, between
# 0.05). So a verdict rests on it only when asked (``run.py regress --assume-drift``); otherwise
# such a series reads "too little history" unless it changed beyond any plausible drift
# (``regress_history``).
FALLBACK_BETWEEN_FACTOR = 3.0

OWN, MACHINE, OWN_FEW, WITHIN_ONLY = "own", "machine", "own (few jobs)", "within-job only"


@dataclass(frozen=True)
class JobSummary:
    """One job on the log scale: the mean of its runs' logs, how many, and their spread."""

    mean: float
    n: int
    within_ss: float  # sum of squared deviations of the runs' logs from ``mean``

    @property
    def within_df(self) -> int:
        return self.n - 1


def summarise(point: Point) -> JobSummary | None:
    """The job's log-scale summary; None when it has no positive VALID figure."""
    figures = [f for f in point.runs if f is not None and f > 0]
    if not figures and point.value is not None and point.value > 0:
        figures = [point.value]  # one run, or a store that kept only the figure
    if not figures:
        return None
    logs = [math.log(f) for f in figures]  # a handful of runs: plain Python is faster
    mean = math.fsum(logs) / len(logs)
    return JobSummary(mean, len(logs), math.fsum((v - mean) ** 2 for v in logs))


def clean(point: Point) -> bool:
    """May this job enter a history (its baseline mean and its noise)?"""
    return point.valid and not point.disturbed and summarise(point) is not None


@dataclass(frozen=True)
class Spread:
    """What a set of jobs says about the noise: between-job and within-job sums of squares."""

    between_ss: float  # of job means about their series' mean
    between_df: int
    within_ss: float
    within_df: int
    inverse_n: float  # the mean of 1/n over the jobs (how much of a job mean is run noise)
    series: int = 1
    job_ids: frozenset[str] = frozenset()  # which jobs it saw (empty: not known)
    test_df: int | None = None  # the test's degrees of freedom, where below ``between_df``

    @property
    def df(self) -> int:
        """The degrees of freedom a test against this spread has."""
        return self.between_df if self.test_df is None else self.test_df

    @property
    def job_variance(self) -> float:
        """The variance of one job's mean (between-job plus its runs' share)."""
        return self.between_ss / self.between_df

    @property
    def within_variance(self) -> float | None:
        return self.within_ss / self.within_df if self.within_df else None


def spread(jobs: Sequence[JobSummary], job_ids: Sequence[str] = ()) -> Spread:
    """The spread of one series' jobs (``between_df`` 0 when fewer than two); ``job_ids``,
    where given, name them (the pool counts distinct jobs)."""
    means = np.array([j.mean for j in jobs], dtype=float)
    between = float(((means - means.mean()) ** 2).sum()) if len(jobs) else 0.0
    inverse_n = float(np.mean([1 / j.n for j in jobs])) if jobs else 1.0
    return Spread(between, max(len(jobs) - 1, 0), sum(j.within_ss for j in jobs),
                  sum(j.within_df for j in jobs), inverse_n, job_ids=frozenset(job_ids))


def pool(spreads: Sequence[Spread]) -> Spread:
    """Several series' spreads as one (each series about its own mean): the machine's. Its
    test's degrees of freedom are capped by the distinct jobs (see the module)."""
    used = [s for s in spreads if s.between_df > 0]
    df = sum(s.between_df for s in used)
    inverse_n = (sum(s.inverse_n * s.between_df for s in used) / df) if df else 1.0
    ids = frozenset().union(*(s.job_ids for s in used))
    test_df = min(df, len(ids) - 1) if used and all(s.job_ids for s in used) else None
    return Spread(sum(s.between_ss for s in used), df, sum(s.within_ss for s in used),
                  sum(s.within_df for s in used), inverse_n, len(used), ids, test_df)


@dataclass(frozen=True)
class Noise:
    """The noise a series is tested against, and where it came from (printed on its line)."""

    source: str  # OWN | MACHINE | OWN_FEW | WITHIN_ONLY
    between_sd: float  # log scale: the between-job part
    within_sd: float | None  # log scale: runs inside one job (None: no job had 2+ runs)
    df: int  # the degrees of freedom of the test
    jobs: int  # jobs (own) or series (machine) it was estimated from
    measured_floor: bool = False  # WITHIN_ONLY: the jobs' own spread was above the assumption

    def text(self) -> str:
        within = "" if self.within_sd is None else f", within-job {_percent(self.within_sd)}"
        assumed = (f"as measured over {self.jobs} jobs (above {FALLBACK_BETWEEN_FACTOR:g}x it)"
                   if self.measured_floor else f"assumed {FALLBACK_BETWEEN_FACTOR:g}x it")
        what = {OWN: f"own spread over {self.jobs} jobs",
                MACHINE: f"pooled over {self.jobs} series on this machine",
                OWN_FEW: f"own spread over only {self.jobs} jobs (wide)",
                WITHIN_ONLY: f"within-job spread only, between-job {assumed} (an assumption: "
                             f"{MIN_OWN_JOBS}+ jobs measure it)"}[self.source]
        return f"{what}: between-job sd {_percent(self.between_sd)}{within}, {self.df} df"


def _percent(log_sd: float) -> str:
    return f"{100 * (math.exp(log_sd) - 1):.1f}%"


def difference_variance(history: Sequence[JobSummary], newest: JobSummary,
                        estimate: Spread, source: str) -> tuple[float, Noise]:
    """The variance of (newest job's mean - the history's mean of job means) when nothing
    changed, and the noise it assumed. With equal runs per job and a between-job part above
    zero it is the prediction variance ``job_variance * (1 + 1/J)``."""
    jobs = len(history)
    sigma2 = estimate.within_variance
    measured = None
    if estimate.between_df:
        measured = estimate.job_variance
        if sigma2 is not None:
            measured = max(measured - sigma2 * estimate.inverse_n, 0.0)
    if source == WITHIN_ONLY:
        assert sigma2 is not None
        tau2 = max((FALLBACK_BETWEEN_FACTOR ** 2) * sigma2, measured or 0.0)
        df = estimate.within_df
    else:
        assert measured is not None
        tau2, df = measured, estimate.df
    if sigma2 is None:  # every job one run: a job mean varies by the whole job variance
        variance = estimate.job_variance * (1 + 1 / jobs)
    else:
        history_share = sum(tau2 + sigma2 / j.n for j in history) / jobs ** 2
        variance = tau2 + sigma2 / newest.n + history_share
    within_sd = None if sigma2 is None else math.sqrt(sigma2)
    count = estimate.series if source == MACHINE else jobs
    floor = source == WITHIN_ONLY and measured is not None and tau2 == measured
    return variance, Noise(source, math.sqrt(tau2), within_sd, df, count, floor)


def choose(own: Spread, machine: Spread) -> tuple[Spread, str] | None:
    """Which estimate a series with ``own`` history uses (see the module), or None when no
    noise can be estimated at all (one earlier job of one run, nothing pooled)."""
    jobs = own.between_df + 1
    if jobs >= MIN_OWN_JOBS:
        return own, OWN
    if machine.series >= MIN_POOLED_SERIES and \
            machine.df >= max(MIN_POOLED_DF, own.between_df + 1):
        return machine, MACHINE
    if jobs >= MIN_FEW_JOBS or (jobs >= 2 and not own.within_df):
        return own, OWN_FEW
    if own.within_df:
        return own, WITHIN_ONLY
    return None
