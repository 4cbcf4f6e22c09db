"""The noise ``regress`` tests against: job summaries on the log scale, the spread of job
means, pooling across series, which estimate is chosen, and the difference's variance (the
textbook prediction variance where the design is balanced)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from quantmark.store.points import Point, SeriesKey
from quantmark.store.regress_noise import (
    FALLBACK_BETWEEN_FACTOR,
    MACHINE,
    MIN_OWN_JOBS,
    OWN,
    OWN_FEW,
    WITHIN_ONLY,
    JobSummary,
    choose,
    clean,
    difference_variance,
    pool,
    spread,
    summarise,
)

KEY = SeriesKey("m", "ort-fp32", "Offline", "samples_per_s")


def _point(runs: tuple[float, ...] = (), value: float | None = None, **fields) -> Point:
    return Point(KEY, "j", "2026-01-01T00:00:00Z", value, None, None, runs, **fields)


def test_a_job_is_summarised_on_the_log_scale():
    summary = summarise(_point((2.0, 8.0)))
    assert summary is not None
    assert summary.mean == pytest.approx(math.log(4.0))
    assert summary.n == 2 and summary.within_df == 1
    assert summary.within_ss == pytest.approx(2 * math.log(2.0) ** 2)


def test_a_job_without_runs_falls_back_to_its_figure_and_none_without_either():
    assert summarise(_point(value=5.0)) == JobSummary(math.log(5.0), 1, 0.0)
    assert summarise(_point()) is None
    assert summarise(_point((0.0, -1.0))) is None  # no positive figure: nothing to log


def test_disturbed_and_invalid_jobs_are_not_clean():
    assert clean(_point((1.0, 1.1)))
    assert not clean(_point((1.0, 1.1), disturbed=True))
    assert not clean(_point((1.0, 1.1), valid=False))
    assert not clean(_point())


def test_spread_is_the_sum_of_squares_of_job_means_and_of_runs():
    jobs = [JobSummary(0.0, 3, 0.02), JobSummary(0.2, 3, 0.04), JobSummary(0.4, 1, 0.0)]
    got = spread(jobs)
    assert got.between_ss == pytest.approx(0.08)  # means 0, .2, .4 about .2
    assert got.between_df == 2 and got.within_ss == pytest.approx(0.06) and got.within_df == 4
    assert got.job_variance == pytest.approx(0.04)
    assert got.within_variance == pytest.approx(0.015)
    assert got.inverse_n == pytest.approx((1 / 3 + 1 / 3 + 1) / 3)


def test_pooling_adds_each_series_about_its_own_mean():
    """Series at different levels (a 2 ms and a 500 ms one) pool without their levels'
    difference entering the spread."""
    low = spread([JobSummary(math.log(2) + d, 3, 0.01) for d in (-0.1, 0.1)])
    high = spread([JobSummary(math.log(500) + d, 3, 0.01) for d in (-0.1, 0.0, 0.1)])
    lone = spread([JobSummary(0.0, 3, 0.01)])  # one job: no between-job information
    pooled = pool([low, high, lone])
    assert pooled.between_df == 3 and pooled.series == 2
    assert pooled.between_ss == pytest.approx(0.02 + 0.02)
    assert pooled.job_variance == pytest.approx(0.04 / 3)


def test_balanced_design_gives_the_prediction_variance():
    """Equal runs per job, between-job part above zero: the variance is s_b^2 (1 + 1/J),
    the prediction interval of a new job's mean from J earlier ones."""
    rng = np.random.default_rng(3)
    history = [JobSummary(float(m), 3, float(w)) for m, w in
               zip(rng.normal(0, 0.2, 6), rng.uniform(0.001, 0.003, 6), strict=True)]
    newest = JobSummary(0.1, 3, 0.002)
    own = spread(history)
    variance, noise = difference_variance(history, newest, own, OWN)
    assert variance == pytest.approx(own.job_variance * (1 + 1 / 6))
    assert noise.source == OWN and noise.df == 5 and noise.jobs == 6
    assert noise.between_sd ** 2 == pytest.approx(own.job_variance - own.within_variance / 3)


def test_one_run_per_job_uses_the_job_variance_whole():
    history = [JobSummary(m, 1, 0.0) for m in (0.0, 0.1, 0.3)]
    own = spread(history)
    variance, noise = difference_variance(history, JobSummary(0.2, 1, 0.0), own, OWN_FEW)
    assert variance == pytest.approx(own.job_variance * (1 + 1 / 3))
    assert noise.within_sd is None and noise.df == 2


def test_within_only_assumes_the_stated_between_job_share():
    history = [JobSummary(0.0, 4, 0.03)]  # one job: within sd^2 = 0.01
    variance, noise = difference_variance(history, JobSummary(0.0, 4, 0.0), spread(history),
                                          WITHIN_ONLY)
    tau2 = FALLBACK_BETWEEN_FACTOR ** 2 * 0.01
    assert variance == pytest.approx(2 * tau2 + 0.01 / 4 + 0.01 / 4)
    assert noise.df == 3 and "assumed 3x" in noise.text()


def _jobs(count: int, runs: int = 3) -> list[JobSummary]:
    return [JobSummary(0.05 * i, runs, 0.001 * runs) for i in range(count)]


def test_the_estimate_is_chosen_in_the_stated_order():
    rich_machine = pool([spread(_jobs(4)) for _ in range(5)])  # 15 df
    empty = pool([])
    assert choose(spread(_jobs(MIN_OWN_JOBS)), rich_machine)[1] == OWN
    assert choose(spread(_jobs(3)), rich_machine)[1] == MACHINE
    assert choose(spread(_jobs(3)), empty)[1] == OWN_FEW  # 2 df: a t on them, wide
    assert choose(spread(_jobs(2)), empty)[1] == WITHIN_ONLY  # 1 df: the assumption
    assert choose(spread(_jobs(2, runs=1)), empty)[1] == OWN_FEW  # no within-job spread
    assert choose(spread(_jobs(1)), empty)[1] == WITHIN_ONLY
    assert choose(spread(_jobs(1, runs=1)), empty) is None  # one job of one run: nothing
    assert choose(spread(_jobs(1, runs=1)), rich_machine)[1] == MACHINE
    two_series = pool([spread(_jobs(6)) for _ in range(2)])  # 10 df, but 2 series only
    assert choose(spread(_jobs(2)), two_series)[1] == WITHIN_ONLY


def test_within_only_takes_the_few_jobs_spread_where_it_is_larger():
    """Three jobs that drift by far more than 3x their runs' spread: that drift is used."""
    history = [JobSummary(m, 3, 0.0002) for m in (0.0, 0.3, -0.3)]  # within var 0.0001
    own = spread(history)
    variance, noise = difference_variance(history, JobSummary(0.0, 3, 0.0002), own,
                                          WITHIN_ONLY)
    tau2 = own.job_variance - own.within_variance / 3
    assert noise.between_sd == pytest.approx(math.sqrt(tau2)) and noise.measured_floor
    assert "between-job as measured over 3 jobs (above 3x it)" in noise.text()
    assert noise.df == own.within_df == 6
    quiet = [JobSummary(m, 3, 0.02) for m in (0.0, 0.01, -0.01)]  # drift below 3x the runs'
    _, assumed = difference_variance(quiet, JobSummary(0.0, 3, 0.02), spread(quiet),
                                     WITHIN_ONLY)
    assert not assumed.measured_floor and "assumed 3x it" in assumed.text()


def test_the_noise_line_says_where_it_came_from():
    own = spread(_jobs(6))
    _, noise = difference_variance(_jobs(6), JobSummary(0.0, 3, 0.003), own, OWN)
    assert noise.text().startswith("own spread over 6 jobs: between-job sd ")
    machine = pool([spread(_jobs(4)) for _ in range(5)])
    _, pooled = difference_variance(_jobs(2), JobSummary(0.0, 3, 0.003), machine, MACHINE)
    assert pooled.text().startswith("pooled over 5 series on this machine") and pooled.df == 15


def test_series_of_the_same_jobs_pool_no_more_df_than_their_jobs():
    """Twenty series measured in the same three jobs share those jobs' drift: the pool tests
    with 2 degrees of freedom, not 40; series in jobs of their own keep the sum."""
    same = [spread(_jobs(3), ["a", "b", "c"]) for _ in range(20)]
    pooled = pool(same)
    assert pooled.between_df == 40 and pooled.df == 2
    assert pooled.job_variance == pytest.approx(same[0].job_variance)
    apart = pool([spread(_jobs(3), [f"{s}-{j}" for j in range(3)]) for s in range(20)])
    assert apart.df == 40
    assert choose(spread(_jobs(3)), pooled)[1] == OWN_FEW  # its own 2 df, as the pool's
    assert choose(spread(_jobs(3)), apart)[1] == MACHINE
