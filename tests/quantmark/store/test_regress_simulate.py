"""``regress``'s stated rates, checked by seeded simulation (``regress_simulate``): on stores of
identical jobs (random job effects, half shared by a job's series, plus run noise) false alarms
stay at or below the false discovery rate, whichever noise estimate is used; planted slowdowns
of 1.5x and 2x are detected at least at the rates stated here. A rate "at or below" q means
the observed count is not significantly above q (one-sided binomial test at 1%)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from quantmark.store.regress_noise import MACHINE, OWN, OWN_FEW, WITHIN_ONLY
from quantmark.store.regress_simulate import Rates, Scenario, measure, simulate
from quantmark.store.verdicts import REGRESSED, regress

FDR = 0.05
OWN_HISTORY = Scenario(series=20, jobs=10)
# (scenario, trials, the noise estimate its verdicts must use)
NULLS = {"own": (Scenario(series=20, jobs=8), 150, OWN),
         # new series on a machine whose series ran in jobs of their own: pooled
         "machine": (Scenario(series=20, jobs=3, shared_jobs=False), 300, MACHINE),
         # twenty series of the same three jobs: their drift is known from three jobs only
         "shared jobs": (Scenario(series=20, jobs=3), 150, WITHIN_ONLY),
         "few": (Scenario(series=1, jobs=4, runs=1), 1500, OWN_FEW),
         "within": (Scenario(series=1, jobs=2, between_sd=0.05), 1500, WITHIN_ONLY)}
# detection of the newest job of 4 in 20 series slowed, 9 earlier jobs each, within-job sd
# 0.05: (between-job sd, slowdown) -> at least this rate
STATED_DETECTION = {(0.10, 1.5): 0.50, (0.10, 2.0): 0.95, (0.05, 1.5): 0.95}


def _not_above(hits: int, total: int, rate: float) -> bool:
    return stats.binomtest(hits, total, rate, alternative="greater").pvalue > 0.01


@pytest.mark.parametrize("name", list(NULLS))
def test_identical_jobs_raise_no_more_false_alarms_than_stated(name: str):
    scenario, trials, source = NULLS[name]
    rates = measure(scenario, trials, seed=11, fdr=FDR)
    assert set(rates.noise) == {source}
    # any false alarm in one store (all series at once): at most the false discovery rate
    assert _not_above(rates.trials_with_false_alarm, rates.trials, FDR), \
        Rates.rate(rates.trials_with_false_alarm, rates.trials)
    assert _not_above(rates.false_alarms, rates.untouched, FDR)


@pytest.mark.parametrize(("between_sd", "slowdown"), list(STATED_DETECTION))
def test_planted_slowdowns_are_detected_at_the_stated_rate(between_sd: float, slowdown: float):
    scenario = replace(OWN_HISTORY, between_sd=between_sd, slowdown=slowdown, slowed=4)
    rates = measure(scenario, 60, seed=12, fdr=FDR)
    assert rates.slowed == 240
    assert rates.detected / rates.slowed >= STATED_DETECTION[between_sd, slowdown], \
        Rates.rate(rates.detected, rates.slowed)
    # the untouched series beside them still raise few alarms
    assert rates.false_alarms / rates.untouched <= FDR


def test_the_simulation_plants_what_it_says():
    points, slowed = simulate(Scenario(series=4, jobs=3, runs=2, slowdown=2.0, slowed=1),
                              np.random.default_rng(0))
    assert len(points) == 4 * 3 and len(slowed) == 1
    assert all(len(p.runs) == 2 and p.low < p.value < p.high for p in points)
    newest = [p for p in points if p.series in slowed and p.job_id == "job2"]
    assert newest[0].environment["settings.threads"] == 1


def test_a_slowdown_in_a_throughput_series_is_a_regression_too():
    """Half the simulated series are throughput (higher is better): slowed, they fall."""
    rates = Rates()
    rng = np.random.default_rng(5)
    for _ in range(20):
        points, slowed = simulate(Scenario(series=2, jobs=10, slowdown=3.0, slowed=2), rng)
        verdicts = regress(points)
        rates.add(verdicts, slowed)
        assert {v.series.metric for v in verdicts} == {"latency_ms", "samples_per_s"}
    assert rates.detected == rates.slowed == 40 and rates.outcomes == {REGRESSED: 40}
