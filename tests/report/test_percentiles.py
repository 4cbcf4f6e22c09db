"""Latency percentiles: none for Offline anywhere, none resting on too few queries (it would be
the slowest query), and over repeats the median with its interval from 3 runs on."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from quantmark.ground.config import RunConfig
from quantmark.report.characterize import Config
from quantmark.report.loadgen_log import PERCENTILES
from quantmark.report.percentiles import min_queries, over_repeats, why_not
from quantmark.report.run_table import Row, console_cells, row_record
from quantmark.report.stats import figure_interval
from quantmark.report.sweep_report import COLUMNS, _config_record, _run_record
from quantmark.run.default_job import Row as JobRow
from quantmark.run.default_job import _percentile
from quantmark.run.launch import LaunchResult
from quantmark.run.repeated import RepeatSet
from tests.report.synthetic import OFFLINE, SINGLE, run, study, summary


def _nearest_rank(n: int, percentile: str) -> int:
    """LoadGen's index into the sorted latencies: floor(n * p)."""
    return math.floor(n * float(percentile) / 100)


@pytest.mark.parametrize("percentile, needed", [("50.00", 3), ("90.00", 11), ("97.00", 34),
                                                ("99.00", 101), ("99.90", 1001)])
def test_a_percentile_needs_a_query_slower_than_it(percentile, needed):
    assert min_queries(percentile) == needed
    for n in range(2, 1200):  # below the threshold LoadGen's figure is the slowest query
        assert (_nearest_rank(n, percentile) == n - 1) == (n < needed), (percentile, n)


def test_offline_and_few_queries_say_why_they_are_not_shown():
    assert why_not("Offline", "50.00", 24576) == "n/a"
    assert why_not("SingleStream", "99.90", 600) == "n/a (600 queries)"
    assert why_not("SingleStream", "99.00", 600) == ""
    assert why_not("SingleStream", "99.90", None) == ""  # unknown count: not held against it


def _runs(values_ms: list[float], queries: int = 5000, scenario=SINGLE) -> list:
    made = []
    for value in values_ms:
        found = replace(summary(7e6, scenario), query_count=queries,
                        percentiles_ns={p: int(value * 1e6) for p in PERCENTILES})
        made.append(found)
    return made


def test_over_repeats_a_percentile_is_the_median_with_its_interval():
    runs = _runs([2.0, 2.2, 9.0])  # one slow run: the mean would be 4.4 ms
    found = over_repeats("SingleStream", runs, "90.00")
    assert found.interval == figure_interval([2.0e6, 2.2e6, 9.0e6])
    assert found.interval.point == 2.2e6 and found.text().startswith("2.20 [")
    two = over_repeats("SingleStream", runs[:2], "90.00")
    assert two.interval.low is None and two.text() == "2.10"  # no interval under 3 runs
    few = over_repeats("SingleStream", _runs([2.0, 2.2, 9.0], queries=600), "99.90")
    assert few.interval is None and few.text() == "n/a (600 queries)"
    assert over_repeats("Offline", _runs([2.0, 2.2, 9.0], scenario=OFFLINE), "50.00"
                        ).text() == "n/a"


def _config(scenario, queries: int) -> Config:
    runs = []
    for k, value in enumerate([2.0, 2.2, 2.1], start=1):
        made = run("ort-fp32", 7e6 if scenario is SINGLE else 40.0, sweep_repeat=k,
                   scenario=scenario)
        made.summary = replace(made.summary, query_count=queries,
                               percentiles_ns={p: int(value * 1e6) for p in PERCENTILES})
        runs.append(made)
    return Config("box", "m", "ort-fp32", scenario[0], 1, runs)


def test_the_characterization_shows_no_offline_percentile_and_marks_few_queries():
    offline, single = _config(OFFLINE, 24576), _config(SINGLE, 600)
    study(offline, single)
    cells = {header: cell for header, cell in COLUMNS}
    assert [cells[f"p{p}"](offline) for p in ("50 ms", "99 ms")] == ["n/a", "n/a"]
    assert cells["p99 ms"](single).startswith("2.10 [")
    assert cells["p99.9 ms"](single) == "n/a (600 queries)"
    record = _config_record(offline)
    assert record["p50_ms_median"] is None and record["queries_min"] == 24576
    record = _config_record(single)
    assert record["p99_ms_median"] == pytest.approx(2.1) and record["p99.9_ms_median"] is None
    assert record["p99_ms_low"] < 2.1 < record["p99_ms_high"]
    assert single.derived["percentiles_ns"].keys() == set(PERCENTILES) - {"99.90"}
    per_run = _run_record(single, single.runs[0])
    assert per_run["p99.9_latency_ns"] is None and per_run["queries"] == 600
    assert _run_record(offline, offline.runs[0])["p50_latency_ns"] is None


def test_run_py_report_blanks_offline_and_few_query_percentiles(tmp_path: Path):
    made = [Row(tmp_path / s, "box", "sut", "m", s, "performance", "quick",
                replace(summary(7e6, SINGLE), scenario=s, query_count=600,
                        percentiles_ns={p: 2_000_000 for p in PERCENTILES}), None)
            for s in ("Offline", "SingleStream")]
    offline, single = (row_record(r, tmp_path) for r in made)
    assert offline["p50_ms"] == "" and offline["queries"] == "600"
    assert single["p99_ms"] == "2.000" and single["p99.9_ms"] == ""
    shown = console_cells(made[1], tmp_path)
    assert "n/a (600 queries)" in shown and "2.000" in shown
    assert "n/a" in console_cells(made[0], tmp_path)


def test_the_default_job_percentile_is_the_median_and_marks_few_queries():
    results = []
    for value in (2.0, 2.2, 9.0):
        record = summary(7e6, SINGLE).to_dict()
        record.update(query_count=600, percentiles_ns={p: int(value * 1e6) for p in PERCENTILES})
        results.append(LaunchResult("ok", None, {"summary": record}))
    row = JobRow("ort-fp32", "SingleStream", RepeatSet(RunConfig("SingleStream", "ort-fp32",
                                                                  "m"), results))
    assert _percentile("90.00")(row).startswith("2.20 [")  # the median, with its interval
    assert _percentile("99.90")(row) == "n/a (600 queries)"
    offline = JobRow("ort-fp32", "Offline", row.runs)
    assert _percentile("50.00")(offline) == "n/a"
