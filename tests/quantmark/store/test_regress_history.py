"""Too little history (``regress_history``): with one or two earlier clean jobs ``regress``
cannot tell the machine's drift from a change, so it says so (exit 0) unless the change is
beyond any plausible drift. Checked by seeded stores (``regress_simulate``) whose machine drifts
by 2-4.5 times its runs' spread, as independent job effects or as a random walk."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from quantmark.store.regress_history import DRIFT_BOUND, MIN_HISTORY_JOBS, beyond_drift_p
from quantmark.store.regress_simulate import Rates, Scenario, measure

FDR = 0.05
# one or two earlier jobs of the default job's four series; drift given as the between-job sd
# (or the random walk's step) against the within-job sd
FEW_JOBS = {
    "1 earlier job, drift 2x the runs' spread": Scenario(series=4, jobs=2, between_sd=0.10),
    "2 earlier jobs, drift 2x": Scenario(series=4, jobs=3, between_sd=0.10),
    "1 earlier job, a random walk of steps 2x": Scenario(series=4, jobs=2, between_sd=0.0,
                                                          drift_step=0.10),
    "2 earlier jobs, a random walk of steps 2x": Scenario(series=4, jobs=3, between_sd=0.0,
                                                           drift_step=0.10),
    "1 earlier job, quiet runs (drift 5x)": Scenario(series=4, jobs=2, between_sd=0.05,
                                                     within_sd=0.01),
    "1 earlier job, drift 4.5x": Scenario(series=4, jobs=2, between_sd=0.18, within_sd=0.04)}


@pytest.mark.parametrize("name", list(FEW_JOBS))
def test_few_earlier_jobs_raise_a_false_alarm_in_at_most_5_percent_of_stores(name: str):
    # on the assumed 3x between-job spread: 22% of stores with quiet runs, 18% at 4.5x
    rates = measure(FEW_JOBS[name], 300, seed=21, fdr=FDR)
    assert stats.binomtest(rates.trials_with_false_alarm, rates.trials, FDR,
                           alternative="greater").pvalue > 0.01, \
        Rates.rate(rates.trials_with_false_alarm, rates.trials)
    assert set(rates.outcomes) <= {"too little history", "regressed", "improved"}


def test_a_change_beyond_any_plausible_drift_is_still_caught():
    scenario = Scenario(series=4, jobs=2, between_sd=0.10, slowdown=3.0, slowed=4)
    rates = measure(scenario, 100, seed=22, fdr=FDR)
    assert rates.detected / rates.slowed >= 0.9, Rates.rate(rates.detected, rates.slowed)


def test_the_drift_test_is_one_sided_at_the_bound():
    bound = math.log(DRIFT_BOUND)
    assert beyond_drift_p(bound, 0.01, 4) == pytest.approx(0.5)
    assert beyond_drift_p(-bound, 0.01, 4) == pytest.approx(0.5)  # faster alike
    assert beyond_drift_p(bound + 0.3, 0.01, 4) == pytest.approx(stats.t.sf(3.0, 4))
    assert beyond_drift_p(0.0, 0.01, 4) > 0.99
    assert MIN_HISTORY_JOBS == 3
