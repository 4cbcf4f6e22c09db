"""``regress`` on stores built from Points: verdicts and their direction, the noise each
series is judged with, disturbed and INVALID jobs, baselines, and the false discovery rate's
decisions. The rates over many seeded stores are in test_regress_simulate.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from quantmark.store.points import Point, SeriesKey
from quantmark.store.regress_baseline import Baseline, parse_baseline
from quantmark.store.regress_history import TOO_LITTLE
from quantmark.store.regress_noise import MACHINE, OWN, OWN_FEW, WITHIN_ONLY
from quantmark.store.regress_simulate import BASE_ENVIRONMENT, job_point
from quantmark.store.verdicts import (
    CANNOT_JUDGE,
    IMPROVED,
    NO_CHANGE,
    REGRESSED,
    machine_of,
    regress,
)

LATENCY = SeriesKey("efficientnet-lite0", "ort-int8", "SingleStream", "latency_ms")
THROUGHPUT = SeriesKey("efficientnet-lite0", "ort-int8", "Offline", "samples_per_s")
JOB_LEVELS = (0.00, 0.06, -0.05, 0.03, -0.02, 0.04, -0.06, 0.01)  # between-job drift (log)
RUN_NOISE = (-0.02, 0.0, 0.02)


def _series(key: SeriesKey, base: float, newest_factor: float = 1.0, jobs: int = 8,
            newest_environment: dict | None = None, **newest_fields) -> list[Point]:
    """``jobs`` jobs of 3 runs around ``base`` with a fixed drift; the newest's figure times
    ``newest_factor``."""
    points = []
    for j in range(jobs):
        newest = j == jobs - 1
        level = base * math.exp(JOB_LEVELS[j % len(JOB_LEVELS)])
        level *= newest_factor if newest else 1.0
        runs = tuple(level * math.exp(e) for e in RUN_NOISE)
        environment = newest_environment if newest and newest_environment else None
        points.append(job_point(key, f"job{j}", j, runs, environment,
                                **(newest_fields if newest else {})))
    return points


def _one(points: list[Point], **kwargs) -> object:
    (verdict,) = regress(points, **kwargs)
    return verdict


def test_identical_jobs_are_no_measurable_change():
    verdict = _one(_series(LATENCY, 3.0))
    assert verdict.outcome == NO_CHANGE
    assert verdict.low < 1 < verdict.high and verdict.confidence == pytest.approx(0.95)
    assert verdict.noise.source == OWN and len(verdict.history) == 7
    assert verdict.changes == ()


def test_a_planted_slowdown_with_one_thread_is_a_regression_naming_the_threads():
    slower = dict(BASE_ENVIRONMENT, **{"settings.threads": 1,
                                       "software.onnxruntime": "1.21.0"})
    verdict = _one(_series(LATENCY, 3.0, 1.6, newest_environment=slower))
    assert verdict.outcome == REGRESSED
    assert verdict.low < 1.6 < verdict.high and verdict.low > 1
    assert [c.key for c in verdict.changes] == ["settings.threads", "software.onnxruntime"]
    assert verdict.changes[0].text() == "settings.threads 2 -> 1"
    assert "regressed: efficientnet-lite0 ort-int8 SingleStream latency_ms" in verdict.text()
    assert "noise: own spread over 7 jobs" in verdict.text()


@pytest.mark.parametrize(("key", "factor", "outcome"), [
    (LATENCY, 0.6, IMPROVED), (THROUGHPUT, 1.6, IMPROVED), (THROUGHPUT, 0.6, REGRESSED)])
def test_direction_follows_the_metric(key: SeriesKey, factor: float, outcome: str):
    verdict = _one(_series(key, 100.0, factor))
    assert verdict.outcome == outcome and verdict.ratio == pytest.approx(factor, rel=0.1)


def test_disturbed_history_jobs_are_left_out_and_said():
    points = _series(LATENCY, 3.0)
    points[2] = job_point(LATENCY, "job2", 2, (30.0, 31.0, 29.0), disturbed=True)
    points[3] = job_point(LATENCY, "job3", 3, (3.0,), valid=False)
    verdict = _one(points)
    assert verdict.outcome == NO_CHANGE and len(verdict.history) == 5
    assert "1 disturbed earlier job left out" in verdict.text()
    assert "1 INVALID earlier job left out" in verdict.text()


def test_a_disturbed_newest_job_is_judged_and_says_so():
    verdict = _one(_series(LATENCY, 3.0, 2.0, disturbed=True))
    assert verdict.outcome == REGRESSED
    assert "the newest job was disturbed" in verdict.text()


@pytest.mark.parametrize(("points", "reason"), [
    (_series(LATENCY, 3.0, valid=False), "the newest job has no VALID run"),
    (_series(LATENCY, 3.0, jobs=1), "no earlier job in the baseline"),
    ([job_point(LATENCY, "a", 0, (3.0, 3.1), disturbed=True),
      job_point(LATENCY, "b", 1, (3.0, 3.1))], "no earlier job has a clean VALID figure"),
    ([job_point(LATENCY, "a", 0, (3.0,)), job_point(LATENCY, "b", 1, (3.0,))],
     "no noise can be measured"),
])
def test_what_cannot_be_judged_says_why(points: list[Point], reason: str):
    verdict = _one(points)
    assert verdict.outcome == CANNOT_JUDGE and reason in verdict.reason
    assert verdict.text().startswith("cannot judge: ")


def _on(machine: str, points: list[Point]) -> list[Point]:
    return [Point(**{**vars(p), "environment": {**p.environment, "machine.hostname": machine}})
            for p in points]


def test_few_jobs_borrow_the_noise_of_the_same_machine_only():
    target = _series(LATENCY, 3.0, jobs=3)
    neighbours = [p for i in range(4) for p in
                  _series(SeriesKey(f"m{i}", "ort-fp32", "Offline", "samples_per_s"), 50.0)]
    pooled = regress(target + neighbours, selected=lambda k: k == LATENCY)
    assert [v.noise.source for v in pooled] == [MACHINE]
    elsewhere = regress(target + _on("other", neighbours), selected=lambda k: k == LATENCY)
    assert [v.noise.source for v in elsewhere] == [WITHIN_ONLY]
    assert machine_of(target[0]) == "sim" and machine_of(_on("other", target)[0]) == "other"


def test_one_earlier_job_falls_back_to_the_within_job_spread_when_asked():
    verdict = _one(_series(LATENCY, 3.0, jobs=2), assume_drift=True)
    assert verdict.outcome == NO_CHANGE and verdict.noise.source == WITHIN_ONLY
    assert "within-job spread only, between-job assumed 3x it (an assumption: 5+ jobs " \
        "measure it)" in verdict.text()


@pytest.mark.parametrize("jobs", [2, 3])
def test_one_or_two_earlier_jobs_are_too_little_history_unless_beyond_any_drift(jobs: int):
    # 1.8x slower against one or two earlier jobs: drift or change? The assumption alone
    # used to say "regressed" (exit 1); now it says it cannot separate the two
    slower = _one(_series(LATENCY, 3.0, 1.8, jobs=jobs))
    assert slower.outcome == TOO_LITTLE and slower.noise.source == WITHIN_ONLY
    assert slower.ratio == pytest.approx(1.8, rel=0.1)
    assert f"({jobs - 1} jobs): " in slower.text() and "too little history to separate " \
        f"drift from change: {jobs - 1} earlier clean job" in slower.text()
    assert _one(_series(LATENCY, 3.0, 1.8, jobs=jobs), assume_drift=True).outcome == REGRESSED
    beyond = _one(_series(LATENCY, 3.0, 3.0, jobs=jobs))  # 3x: more than drift explains
    assert beyond.outcome == REGRESSED and "beyond the 2x that drift between jobs" in \
        beyond.text()
    assert _one(_series(LATENCY, 3.0, 1 / 3, jobs=jobs)).outcome == IMPROVED


def test_few_jobs_of_one_run_use_their_own_spread():
    points = [job_point(LATENCY, f"job{j}", j, (3.0 * math.exp(d),))
              for j, d in enumerate((0.0, 0.05, -0.04, 0.02))]
    verdict = _one(points)
    assert verdict.noise.source == OWN_FEW and verdict.noise.df == 2
    assert "own spread over only 3 jobs (wide)" in verdict.text()


def test_the_p_value_is_the_prediction_t_test():
    """Balanced jobs: the p-value is the textbook test of a new job's mean against the
    prediction interval of the earlier job means (J - 1 degrees of freedom)."""
    points = _series(THROUGHPUT, 100.0, 1.15)
    means = [float(np.mean(np.log(p.runs))) for p in points]
    history = np.array(means[:-1])
    t = (means[-1] - history.mean()) / (history.std(ddof=1) * math.sqrt(1 + 1 / len(history)))
    assert _one(points).p_value == pytest.approx(2 * stats.t.sf(abs(t), len(history) - 1))


def test_the_baseline_selects_the_history():
    points = [Point(**{**vars(p), "tags": ("good",) if i < 3 else ()})
              for i, p in enumerate(_series(LATENCY, 3.0))]
    verdict = _one(points, baseline=parse_baseline("good", points))
    assert [p.job_id for p in verdict.history] == ["job0", "job1", "job2"]
    before = _one(points, baseline=parse_baseline(points[5].when, points))
    assert [p.job_id for p in before.history] == [f"job{j}" for j in range(5)]
    assert _one(points, baseline=Baseline()).history == tuple(points[:-1])


def test_false_discovery_rate_decides_across_series():
    """Several series: a change is called exactly where its Benjamini-Hochberg adjusted
    p-value is within the rate, and the called ones' intervals are at the adjusted level."""
    points = []
    for i, factor in enumerate((1.0, 1.0, 1.12, 1.25, 1.6, 2.0, 1.0, 0.9)):
        points += _series(SeriesKey(f"m{i}", "s", "SingleStream", "latency_ms"), 5.0, factor)
    verdicts = regress(points, fdr=0.05)
    adjusted = stats.false_discovery_control([v.p_value for v in verdicts], method="bh")
    assert [v.adjusted_p for v in verdicts] == pytest.approx(list(adjusted))
    called = [v for v in verdicts if v.outcome in (REGRESSED, IMPROVED)]
    assert called and all(v.adjusted_p <= 0.05 for v in called)
    assert all(v.adjusted_p > 0.05 for v in verdicts if v.outcome == NO_CHANGE)
    level = 1 - len(called) * 0.05 / len(verdicts)
    assert all(v.confidence == pytest.approx(level) and not v.low <= 1 <= v.high
               for v in called)
    assert verdicts[:len(called)] == called  # listed first, regressions before improvements


def test_a_rate_outside_zero_one_is_refused():
    with pytest.raises(ValueError):
        regress(_series(LATENCY, 3.0), fdr=1.0)


def test_the_json_form_carries_the_verdict():
    data = _one(_series(LATENCY, 3.0, 1.6)).to_dict()
    assert data["verdict"] == REGRESSED and data["series"]["model"] == "efficientnet-lite0"
    assert data["noise"]["source"] == OWN and data["ratio_low"] > 1
    assert data["changes"] == [] and data["text"].startswith("regressed")
