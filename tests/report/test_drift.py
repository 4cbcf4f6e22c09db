"""The drift flag (``report.drift``): an exact trend test of runs against the order they ran,
checked against scipy's Kendall tau and by seeded simulation (at most 5% false flags on runs
that do not drift, whatever their noise; a steady drift seen)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from quantmark.report.drift import trend


def test_one_sequence_is_kendalls_exact_test():
    rng = np.random.default_rng(1)
    for n in (5, 6, 8, 11):
        for _ in range(5):
            values = rng.lognormal(3, 0.1, n)
            found = trend(values)
            exact = stats.kendalltau(np.arange(n), values, method="exact")
            assert found.tau == pytest.approx(exact.statistic)
            assert found.p_value == pytest.approx(exact.pvalue)


def test_too_few_runs_to_see_a_drift_say_nothing():
    assert trend([1.0, 2.0, 3.0, 4.0]) is None  # 4 runs: even a perfect order has p = 0.083
    assert trend([1.0, 2.0, 3.0], [5.0, 6.0, 7.0]) is None  # 3 + 3: p = 0.056 at best
    found = trend([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0])  # 4 + 4, each its own level
    assert found.drifting and found.tau == 1.0 and found.p_value == pytest.approx(2 / 24 ** 2)
    assert "the 8 runs trend up in the order they ran" in found.text()


@pytest.mark.parametrize("model", ["lognormal", "t3", "slow"])
def test_runs_that_do_not_drift_are_flagged_at_most_5_percent(model: str):
    rng = np.random.default_rng(2)
    flagged = 0
    for _ in range(2000):
        noise = rng.normal(0, 0.05, 14) if model != "t3" else 0.05 * rng.standard_t(3, 14)
        if model == "slow":  # one run in ten 40% slower, unflagged
            noise -= np.log(1.4) * (rng.random(14) < 0.1)
        found = trend(noise[0::2], noise[1::2] + 0.3)  # two interleaved SUTs, 7 runs each
        flagged += found.drifting
    assert stats.binomtest(flagged, 2000).proportion_ci(0.95).low <= 0.05, flagged


def test_a_steady_drift_is_seen():
    rng = np.random.default_rng(3)
    seen = sum(trend(*(0.02 * np.arange(14) + rng.normal(0, 0.05, 14)).reshape(7, 2).T)
               .drifting for _ in range(500))
    assert seen / 500 > 0.9
