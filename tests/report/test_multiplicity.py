"""A report of many speedups controls its false verdicts as a family: with 20 configurations
exactly as fast as their FP32, "faster" or "slower" appears somewhere in the report at most 5%
of the time (Bonferroni over the report's verdicts; seeded simulation)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from quantmark.report.intervals import family_size, verdict, verdicts_note
from quantmark.report.stats import family_confidence, speedup
from tests.report.synthetic import config, study

ROWS, REPEATS = 20, 3


def _a_against_a(rng: np.random.Generator):
    """One report: an FP32 and 20 SUTs of the same speed, 3 interleaved repeats each (5%
    log-normal noise)."""
    runs = 40 * np.exp(rng.normal(0, 0.05, (ROWS + 1, REPEATS)))
    configs = [config("fw-fp32", list(runs[0]))]
    configs += [config(f"fw-v{k}", list(runs[k])) for k in range(1, ROWS + 1)]
    return study(*configs), runs


def test_twenty_identical_speedups_give_a_false_verdict_at_most_5_percent_of_reports():
    rng = np.random.default_rng(20)
    false_reports = uncorrected = 0
    trials = 300
    for _ in range(trials):
        made, runs = _a_against_a(rng)
        assert made.verdicts == ROWS
        verdicts = [verdict(c, "speedup_vs_fp32") for c in made.configs[1:]]
        false_reports += any(v in ("faster", "slower") for v in verdicts)
        uncorrected += any(speedup(runs[0], runs[k], higher_is_better=True, paired=True)
                           .significant for k in range(1, ROWS + 1))
    assert false_reports / trials <= 0.05
    assert uncorrected / trials > 0.3  # each row at 95%: what the report printed before


@pytest.mark.parametrize("paired, n", [(True, 3), (False, 3), (True, 12), (False, 12)])
def test_a_speedup_at_the_family_level_is_wider_and_says_its_level(paired, n):
    rng = np.random.default_rng(21)
    base, cand = 40 * np.exp(rng.normal(0, 0.05, (2, n)))
    plain = speedup(base, cand, higher_is_better=True, paired=paired)
    wide = speedup(base, cand, higher_is_better=True, paired=paired,
                   confidence=family_confidence(ROWS))
    assert (plain.confidence, wide.confidence) == (0.95, family_confidence(ROWS))
    assert wide.point == plain.point and wide.low < plain.low and wide.high > plain.high


def test_a_real_twofold_speedup_still_reads_faster_among_twenty():
    made, _ = _a_against_a(np.random.default_rng(22))
    fast = config("fw-fast", [80.0, 81.0, 79.5])
    fp32 = made.configs[0]
    again = study(fp32, fast, *made.configs[1:])
    found = fast.derived["speedup_vs_fp32_ratio"]
    assert again.verdicts == ROWS + 1 and found.confidence == family_confidence(ROWS + 1)
    assert found.verdict == "faster" and found.low < 2.0 < found.high


def test_the_level_and_the_note_say_how_many_verdicts_were_corrected_for():
    assert family_confidence(1) == pytest.approx(0.95)
    assert family_confidence(20) == pytest.approx(0.9975)
    assert "20 speedup verdicts" in verdicts_note(20) and "99.75%" in verdicts_note(20)
    assert "Bonferroni" in verdicts_note(20)
    made = study(config("fw-fp32", [40.0, 41.0, 39.0]), config("fw-int8", [60.0, 62.0, 59.0]))
    # the int8's × fw FP32 and × best FP32 name the same FP32: one verdict, not two
    assert made.verdicts == 1 == family_size([(made.configs[1], made.configs[0])] * 2)
    assert made.configs[1].derived["speedup_vs_fp32_ratio"].confidence == pytest.approx(0.95)


@pytest.mark.parametrize("paired", [True, False])
def test_two_runs_a_side_at_a_level_corrected_for_hundreds_of_verdicts_give_no_overflow(paired):
    # t with 1 degree of freedom at 1 - 0.05/400: its quantile is in the thousands
    found = speedup([10.0, 30.0], [11.0, 35.0], higher_is_better=True, paired=paired,
                    confidence=1 - 0.05 / 400)
    assert found.high == math.inf or found.high > 1e6
    assert found.verdict == "no measurable difference"
