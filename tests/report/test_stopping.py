"""--until-stable's stopping rule: the interval a set reports where the rule stopped it covers
the true median about 95% of the time, although the rule chose when to stop (seeded
simulation: 2%, 5% and 10% targets, log-normal noise of 5% and 15%, a heavy tail)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from scipy import optimize, stats

from quantmark.report.stats import figure_interval, t_interval
from quantmark.report.stopping import METHOD, NOT_MET, STABLE_CONFIDENCE, look

FIRST, CAP, TRIALS = 3, 10, 1500  # MIN_STABLE_REPEATS, --max-repeats' default
SPEED = 40.0  # samples/s at the median of a quiet run


def _lognormal(sigma: float) -> tuple[Callable[[np.random.Generator], np.ndarray], float]:
    """CAP runs of log-normal noise ``sigma``, and the distribution's median."""
    return (lambda rng: SPEED * np.exp(rng.normal(0, sigma, CAP))), SPEED


def _heavy_tail(sigma: float = 0.05) -> tuple[Callable[[np.random.Generator], np.ndarray],
                                              float]:
    """Log-normal noise, and one run in ten 40% slower (a busy machine): its median solves
    0.9 F(m) + 0.1 F(1.4 m) = 0.5 for the log-normal's CDF F."""
    def draw(rng: np.random.Generator) -> np.ndarray:
        runs = SPEED * np.exp(rng.normal(0, sigma, CAP))
        return np.where(rng.uniform(size=CAP) < 0.1, runs / 1.4, runs)

    def cdf(m: float) -> float:
        return float(stats.norm.cdf(np.log(m / SPEED) / sigma))
    median = optimize.brentq(lambda m: 0.9 * cdf(m) + 0.1 * cdf(1.4 * m) - 0.5, 20, 60)
    return draw, median


def _until_stable(runs: np.ndarray, target: float):
    """What run_set does: a look after every run from FIRST on, stop when the rule says so."""
    for n in range(FIRST, CAP + 1):
        now = look(runs[:n], target, FIRST)
        if now.stable:
            break
    return now


NOISE = {"log-normal 5%": _lognormal(0.05), "log-normal 15%": _lognormal(0.15),
         "heavy tail": _heavy_tail()}


@pytest.mark.parametrize("noise", NOISE)
def test_until_stable_covers_the_median_about_95_percent_under_optional_stopping(noise):
    draw, median = NOISE[noise]
    rng = np.random.default_rng(2028)
    for target in (2.0, 5.0, 10.0):
        hits, stops = 0, []
        for _ in range(TRIALS):
            now = _until_stable(draw(rng), target)
            found = now.interval
            hits += found.low <= median <= found.high
            stops.append(found.n)
        assert 0.93 <= hits / TRIALS <= 0.97, (noise, target, hits / TRIALS, np.mean(stops))


def test_stopping_on_the_first_narrow_95_percent_interval_covered_less():
    # the rule before: stop at the first look whose 95% interval is within the target, and
    # report it; at 15% noise and a 10% target that held the median about 90% of the time
    draw, median = NOISE["log-normal 15%"]
    rng = np.random.default_rng(2028)
    hits = 0
    for _ in range(TRIALS):
        runs = draw(rng)
        for n in range(FIRST, CAP + 1):
            found = figure_interval(runs[:n])
            if found.half_width * 100 <= 10.0:
                break
        hits += found.low <= median <= found.high
    assert hits / TRIALS < 0.93


def test_a_stable_set_reports_the_stopping_looks_interval_and_says_how():
    runs = [40.0, 40.1, 39.9, 40.05]
    now = look(runs, 2.0, FIRST)
    assert now.stable and now.interval.method == METHOD
    assert now.interval == t_interval(runs, STABLE_CONFIDENCE, METHOD)
    plain = t_interval(runs)
    assert now.interval.low < plain.low and now.interval.high > plain.high  # wider than 95%
    assert "96.5% per look" in METHOD


def test_one_narrow_look_is_not_yet_stable():
    # within 2% after 3 runs, but the rule wants two looks in a row
    assert not look([40.0, 40.1, 39.9], 2.0, FIRST).stable
    assert look([40.0, 40.1, 39.9, 40.05], 2.0, FIRST).stable
    # a wide look between two narrow ones starts the count again
    assert not look([40.0, 40.1, 39.9, 46.0, 40.0], 2.0, FIRST).stable


def test_a_set_that_reaches_its_cap_reports_the_plain_95_percent_interval():
    runs = [40.0, 20.0, 60.0, 30.0, 55.0]
    now = look(runs, 1.0, FIRST)
    assert not now.stable and now.interval.method == NOT_MET
    assert (now.interval.low, now.interval.high) == (t_interval(runs).low, t_interval(runs).high)


def test_the_looks_width_is_the_intervals_half_width():
    runs = [41.0, 39.5, 40.2, 40.9]
    assert look(runs, 50.0, FIRST).width_pct == pytest.approx(
        100 * t_interval(runs, STABLE_CONFIDENCE).half_width, rel=1e-12)
    assert look(runs[:2], 50.0, FIRST).width_pct is None  # before the first look
