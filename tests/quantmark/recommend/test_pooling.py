"""Run-to-run noise pooled across candidates (``pooling``) and what the search does with it:
an interval after one run, a drop after one run, accuracy measured only where it decides,
and a verdict judged by the same intervals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from quantmark.recommend import answer, judging, outcomes
from quantmark.recommend.candidates import Candidate, Evidence, Limits, Measurement
from quantmark.recommend.pooling import POOL_MIN_DF, Pool, pool, pooled_interval
from quantmark.recommend.search import SearchConfig, search
from tests.quantmark.recommend.standins import ScriptedMeasurer, accuracy_of, quiet

FAST = [Candidate(f"fast{i}") for i in range(9)]
SLOW = Candidate("slow")


def latency_config(**kwargs) -> SearchConfig:
    fields = {"budget_s": 10_000.0, "max_rounds": 6, **kwargs}
    return SearchConfig("latency_ms", False, **fields)


def test_the_pooled_spread_and_interval_match_a_direct_computation():
    runs = {"a": [10.0, 10.4, 9.9], "b": [20.0, 21.0], "c": [5.0, 5.1, 4.8, 5.3]}
    evidence = [Evidence(Candidate(sut), [quiet(v) for v in values])
                for sut, values in runs.items()]
    found = pool(evidence, "latency_ms", min_df=2)
    logs = [np.log(values) for values in runs.values()]
    squares = sum(float(np.sum((x - x.mean()) ** 2)) for x in logs)
    df = sum(len(x) - 1 for x in logs)
    assert found == Pool(pytest.approx(math.sqrt(squares / df)), df) and df == 6
    assert pool(evidence, "latency_ms") is None  # below POOL_MIN_DF
    t = stats.t.ppf(0.975, df)
    one = pooled_interval([12.0], found, 0.95)
    assert (one.low, one.high, one.n) == (pytest.approx(12.0 * math.exp(-t * found.sd)),
                                          pytest.approx(12.0 * math.exp(t * found.sd)), 1)
    # two runs spreading wider than the pool: their own sd, never narrower than they show
    wide = [10.0, 14.0]
    own = float(np.std(np.log(wide), ddof=1))
    two = pooled_interval(wide, found, 0.95)
    centre = float(np.mean(np.log(wide)))
    assert own > found.sd
    assert two.low == pytest.approx(math.exp(centre - t * own / math.sqrt(2)))
    assert two.point == pytest.approx(12.0)


def test_disturbed_and_invalid_runs_never_enter_the_pool():
    clean = [Evidence(Candidate(f"s{i}"), [quiet(10.0 + i), quiet(10.3 + i)]) for i in range(8)]
    noisy = [Evidence(item.candidate, [*item.runs, quiet(40.0, disturbed=True),
                                       Measurement(2.0, 500.0, False, False)])
             for item in clean]
    assert pool(noisy, "latency_ms") == pool(clean, "latency_ms")
    assert pool(clean, "latency_ms").df == POOL_MIN_DF


def test_the_pooled_interval_covers_near_its_nominal_95_percent():
    """Ten candidates of 2 runs each (df 10) pool the noise; a further candidate's 1-run
    interval holds its true median as often as a 95% interval should."""
    rng = np.random.default_rng(7)
    trials, covered, sigma = 4000, 0, 0.06
    for _ in range(trials):
        centres = rng.uniform(1.0, 4.0, size=10)
        evidence = [Evidence(Candidate(f"s{i}"), [quiet(float(np.exp(c + rng.normal(0, sigma))))
                                                   for _ in range(2)])
                    for i, c in enumerate(centres)]
        found = pool(evidence, "latency_ms")
        truth = float(rng.uniform(1.0, 4.0))
        one = pooled_interval([float(np.exp(truth + rng.normal(0, sigma)))], found, 0.95)
        covered += one.low <= math.exp(truth) <= one.high
    assert 0.935 <= covered / trials <= 0.965, covered / trials


def _scripts(slow_ms: float = 30.0) -> dict[str, list[Measurement]]:
    """Nine fast SUTs near 10 ms with a 2-3% spread, and one slow one."""
    found = {c.key: [quiet(10.0 * (1 + 0.02 * i) * f) for f in (1.0, 1.03, 0.98, 1.01)]
             for i, c in enumerate(FAST)}
    found[SLOW.key] = [quiet(slow_ms), quiet(slow_ms * 1.02), quiet(slow_ms * 0.99)]
    return found


def _accuracy() -> dict:
    return {c.artifact: accuracy_of(-0.1) for c in [*FAST, SLOW]}


def test_a_hopeless_candidate_is_dropped_after_one_run_once_the_pool_exists():
    script = ScriptedMeasurer(_scripts(), _accuracy())
    outcome = search([*FAST, SLOW], script, latency_config())
    slow = {item.candidate: item for item in outcome.evidence}[SLOW]
    assert len(slow.runs) == 1 and slow.dropped_round == 2
    assert slow.dropped.startswith("clearly above fast0 b1 tauto")
    assert script.order.count(SLOW.key) == 1
    # without a pool (too few candidates to form one) it needs min_runs runs to be dropped
    few = ScriptedMeasurer(_scripts(), _accuracy())
    outcome = search([FAST[0], FAST[1], SLOW], few, latency_config())
    assert few.order.count(SLOW.key) == 3
    assert any("run-to-run noise pooled" in note for note in
               search([*FAST, SLOW], ScriptedMeasurer(_scripts(), _accuracy()),
                      latency_config()).notes)


def test_the_record_shows_a_one_run_candidate_with_the_interval_it_was_judged_by():
    outcome = search([*FAST, SLOW], ScriptedMeasurer(_scripts(), _accuracy()), latency_config())
    record = answer.build_record(outcome, model="m", scenario="SingleStream", commands={},
                                 config={}, started=0.0)
    slow = next(c for c in record.candidates if c["key"] == SLOW.key)
    evidence = {item.candidate: item for item in outcome.evidence}[SLOW]
    judged = judging.figure(evidence, "latency_ms", latency_config(),
                            judging.pools_of(outcome.evidence, latency_config()))
    assert slow["objective"]["method"] == "t-log-pooled" and slow["objective"]["n"] == 1
    assert (slow["objective"]["low"], slow["objective"]["high"]) == (
        pytest.approx(judged.low), pytest.approx(judged.high))
    # (its dropped reason keeps the interval of the moment it was dropped, on the pool then)


def test_accuracy_is_not_measured_for_a_candidate_dropped_after_round_one():
    script = ScriptedMeasurer(_scripts(), _accuracy())
    outcome = search([*FAST, SLOW], script, latency_config(limits=Limits(max_accuracy_drop=1)))
    slow = {item.candidate: item for item in outcome.evidence}[SLOW]
    assert slow.dropped and slow.accuracy is None
    assert SLOW.artifact not in script.accuracy_calls
    assert script.accuracy_calls[FAST[0].artifact] == 1
    assert any("measured candidates have no accuracy result (dropped before it was due" in note
               for note in outcome.notes)
    summary = answer.summarize(slow, outcome.objective)
    assert summary["accuracy"] is None and summary["objective"]["n"] == 1
    record = {"candidates": [summary, answer.summarize(outcome.evidence[0], outcome.objective)]}
    assert [c["key"] for c in answer.plotted(record)["candidates"]] == [FAST[0].key]


def test_an_early_dropped_candidate_is_no_rival_in_the_verdict():
    """E, dropped after one run, is judged by its pooled interval (clearly worse than A), not
    counted as a rival for lack of its own interval."""
    config = latency_config()
    best = Evidence(Candidate("a"), [quiet(5.0), quiet(5.05), quiet(4.95)])
    early = Evidence(Candidate("e"), [quiet(6.5)], dropped="clearly above a", dropped_round=2)
    others = [Evidence(Candidate(f"s{i}"), [quiet(10.0 + i), quiet(10.1 + i)],
                       dropped="clearly above a", dropped_round=2) for i in range(8)]
    outcome = outcomes.verdict([best, early, *others], config, out_of_budget=False)
    assert outcome.verdict == "winner" and outcome.recommended is best
    # the same runs without the pool (the others' second runs gone): E has no interval of
    # its own, and can be told from A by none: still racing, it is a rival
    lone = [Evidence(item.candidate, item.runs[:1], dropped=item.dropped) for item in others]
    racing = Evidence(early.candidate, early.runs)
    outcome = outcomes.verdict([best, racing, *lone], config, out_of_budget=False)
    assert outcome.verdict == "tied" and racing in outcome.tied
    outcome = outcomes.verdict([best, racing, *others], config, out_of_budget=False)
    assert outcome.verdict == "winner"


def _one_run_coverage(rng: np.random.Generator, trials: int, spreads: list[float],
                      new_spread: float, slow_share: float = 0.0) -> float:
    """Ten candidates of two quiet runs (log-normal, each its own spread; ``slow_share`` of
    runs 40% slower, unflagged) pool the noise; a new candidate's one-run interval holds its
    true median how often?"""
    def noise(sd: float, n: int) -> np.ndarray:
        return rng.normal(0, sd, n) - math.log(1.4) * (rng.random(n) < slow_share)
    # the median of the slow-run mixture, found on a fine grid
    grid = np.linspace(-0.5, 0.5, 20001)
    cdf = (1 - slow_share) * stats.norm.cdf(grid / new_spread) + slow_share * stats.norm.cdf(
        (grid + math.log(1.4)) / new_spread)
    median = float(grid[np.searchsorted(cdf, 0.5)])
    covered = 0
    for _ in range(trials):
        evidence = [Evidence(Candidate(f"s{i}"), [quiet(float(np.exp(c + v)))
                                                   for v in noise(sd, 2)])
                    for i, (c, sd) in enumerate(zip(rng.uniform(1, 4, 10), spreads,
                                                    strict=True))]
        truth = float(rng.uniform(1.0, 4.0))
        one = pooled_interval([float(np.exp(truth + noise(new_spread, 1)[0]))],
                              pool(evidence, "latency_ms"), 0.95)
        covered += one.low <= math.exp(truth + median) <= one.high
    return covered / trials


def test_the_documented_limits_of_the_one_run_interval():
    """pooling's docstring says what the interval holds: 95% where a candidate spreads like
    the pool, less for a candidate noisier than the pool or a slow run nobody flagged."""
    rng = np.random.default_rng(8)
    assert 0.935 <= _one_run_coverage(rng, 2000, [0.06] * 10, 0.06) <= 0.965
    mixed = [0.03, 0.06, 0.12] * 3 + [0.03]
    assert 0.75 <= _one_run_coverage(rng, 2000, mixed, 0.12) <= 0.83  # documented: 79%
    assert 0.89 <= _one_run_coverage(rng, 2000, [0.06] * 10, 0.06, 0.1) <= 0.93  # 91%
