"""Runs that all gave the same number have no spread to measure: the tables say so rather
than print a zero-width bracket that reads as certainty."""

from __future__ import annotations

from quantmark.report.intervals import metric_text
from quantmark.report.stats import figure_interval, speedup
from tests.report.synthetic import config, study


def test_equal_runs_read_all_runs_equal_not_a_point_bracket():
    assert figure_interval([5.0, 5.0, 5.0]).text() == "5.00 (all 3 runs equal)"
    assert figure_interval([5.0, 5.0, 5.0]).zero_width
    assert not figure_interval([5.0, 5.1, 5.0]).zero_width
    assert figure_interval([5.0]).text() == "5.00 (n=1)"
    made = study(config("ort-fp32", [104.0, 104.0, 104.0]))
    assert metric_text(made.configs[0]) == "104.0/s (all 3 runs equal)"


def test_a_speedup_without_spread_says_so():
    ratio = speedup([10.0, 10.0, 10.0], [20.0, 20.0, 20.0], higher_is_better=True, paired=True)
    assert ratio.text() == "2.00x, every run of each side equal"
    same = speedup([10.0, 10.0], [10.0, 10.0], higher_is_better=True)
    assert same.text() == "no measurable difference (1.00x, every run of each side equal)"
