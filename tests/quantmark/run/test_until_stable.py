"""run_set under --until-stable: it stops where the stopping rule says, its runs record the
rule, and the interval it reports is the rule's, corrected for the stop."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from quantmark.ground.config import RunConfig
from quantmark.report.stats import figure_interval, t_interval
from quantmark.report.stopping import METHOD, NOT_MET, STABLE_CONFIDENCE
from quantmark.run.launch import LaunchResult
from quantmark.run.repeated import run_set


def _config(tmp_path: Path) -> RunConfig:
    return RunConfig(scenario="Offline", sut="ort-fp32", model="m", output=str(tmp_path),
                     system_id="host")


def _runner(values: list[float]):
    calls: list[RunConfig] = []

    def run(config: RunConfig) -> LaunchResult:
        calls.append(config)
        return LaunchResult("ok", None, {"summary": {
            "metric_value": float(values[len(calls) - 1]), "metric_unit": "samples/s",
            "validity": "VALID"}})
    return run, calls


def test_a_stable_set_stops_on_two_narrow_looks_and_reports_the_corrected_interval(tmp_path):
    run, calls = _runner([40.0, 40.1, 39.9, 40.05, 99.0])
    done = run_set(_config(tmp_path), run, repeats=1, until_stable=2.0, max_repeats=10)
    assert len(calls) == 4
    assert {(c.until_stable, c.repeats) for c in calls} == {(2.0, 3)}  # in results.json
    found = done.interval()
    values = [40.0, 40.1, 39.9, 40.05]
    assert found == t_interval(values, STABLE_CONFIDENCE, METHOD)
    plain = figure_interval(values)
    assert found.low < plain.low and found.high > plain.high


def test_a_set_at_its_cap_reports_the_plain_95_percent_interval(tmp_path):
    values = [40.0, 20.0, 60.0, 30.0, 55.0, 25.0]
    run, calls = _runner(values)
    done = run_set(_config(tmp_path), run, repeats=1, until_stable=1.0, max_repeats=5)
    assert len(calls) == 5
    found = done.interval()
    assert found.method == NOT_MET
    assert (found.low, found.high) == (t_interval(values[:5]).low, t_interval(values[:5]).high)


def test_plain_repeats_keep_the_figure_interval(tmp_path):
    run, calls = _runner([40.0, 41.0, 39.0])
    done = run_set(_config(tmp_path), run, repeats=3)
    assert len(calls) == 3 and calls[0].until_stable is None
    assert done.interval() == figure_interval([40.0, 41.0, 39.0])


def test_run_set_covers_the_median_although_it_chose_when_to_stop(tmp_path):
    # 15% noise, a 10% target: stopping on the first narrow 95% interval covered ~90%
    rng = np.random.default_rng(15)
    hits, trials = 0, 1500
    for _ in range(trials):
        run, _ = _runner(list(40 * np.exp(rng.normal(0, 0.15, 10))))
        found = run_set(_config(tmp_path), run, repeats=3, until_stable=10.0).interval()
        hits += found.low <= 40.0 <= found.high
    assert hits / trials >= 0.93
