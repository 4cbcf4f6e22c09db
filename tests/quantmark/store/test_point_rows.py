"""A job's figure from its runs: checked against the repeat-set statistics by simulation."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from quantmark.report.stats import figure_interval
from quantmark.store.point_rows import figure_row, iso_utc
from quantmark.store.points import SeriesKey

KEY = SeriesKey("resnet50", "ort-int8", "Offline", "samples_per_s")


def _run(value, left_out=None, disturbed=False):
    return SimpleNamespace(value=value, left_out=left_out, disturbed=disturbed)


def test_the_figure_is_the_valid_runs_median_and_interval_whatever_the_invalid_ones_say():
    rng = np.random.default_rng(7)
    for _ in range(40):
        n = int(rng.integers(1, 12))
        valid = list(rng.lognormal(5.0, 0.05, n))
        invalid = list(rng.lognormal(4.0, 0.5, int(rng.integers(0, 3))))
        runs = [_run(v) for v in valid] + [_run(v, "INVALID") for v in invalid]
        runs = [runs[i] for i in rng.permutation(len(runs))]
        row = figure_row(KEY, runs)  # the figure of the VALID runs, in run order
        expected = figure_interval([r.value for r in runs if r.left_out is None])
        assert row["value"] == pytest.approx(expected.point)
        assert (row["low"] is None) == (n == 1)
        if n > 1:
            assert row["low"] == pytest.approx(expected.low, rel=1e-6)
            assert row["high"] == pytest.approx(expected.high, rel=1e-6)
        assert row["invalid_runs"] == len(invalid) and row["valid"]
        assert sorted(json.loads(row["runs"])) == pytest.approx(sorted(valid))
        assert sorted(json.loads(row["left_out_runs"])) == pytest.approx(sorted(invalid))


def test_no_valid_run_no_figure_and_any_disturbed_run_marks_the_job():
    row = figure_row(KEY, [_run(10.0, "INVALID"), _run(None, "incomplete: x", True)])
    assert (row["value"], row["valid"], row["invalid_runs"], row["disturbed"]) == \
        (None, False, 2, True)


def test_times_are_iso_utc():
    assert iso_utc(0) == "1970-01-01T00:00:00Z"
