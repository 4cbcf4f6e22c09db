"""The default job over faked test runs: INVALID runs out of every figure, speedups paired by
repeat index, no figure (exit 3) without a VALID run, and the two-stage plan."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from scipy import stats

from quantmark.ground.config import RunConfig
from quantmark.ground.errors import SutError
from quantmark.report.loadgen_log import RunSummary
from quantmark.run import default_job as job
from quantmark.run.launch import LaunchResult
from quantmark.run.repeated import RepeatSet

V, X = "VALID", "INVALID"


def result(config: RunConfig, value: float, validity: str = V) -> LaunchResult:
    """A finished performance run as the launcher returns it, with what the job reads."""
    latency = config.scenario == "SingleStream"
    return LaunchResult("ok", f"/runs/{config.sut}/{config.scenario}/run_{config.repeat}", {
        "config": {"sut": config.sut, "quick": True},
        "sut": {"executed_precision": config.sut.rsplit("-", 1)[1]},
        "summary": RunSummary(
            scenario=config.scenario, mode="PerformanceOnly", validity=validity,
            metric_name="m", metric_key="k", metric_value=value,
            metric_unit="ns" if latency else "samples/s", min_latency_ns=1,
            mean_latency_ns=2.0, max_latency_ns=3, query_count=500,
            percentiles_ns={p: int(value) for p in job.PERCENTILES},
            unmet_checks=[] if validity == V else ["min duration"]).to_dict(),
        "repeat": {"index": config.repeat, "of": config.repeats, "set": config.repeat_set},
        "settings": {"quantmark_set": {"target_qps": 1.0}}})


def fake(values: dict[tuple[str, str], list[tuple[float, str]]]):
    """run_one for the job: accuracy runs, then repeat k of (SUT, scenario) -> values[k-1]."""
    calls: list[RunConfig] = []

    def run_one(config: RunConfig) -> LaunchResult:
        calls.append(config)
        if config.mode == "accuracy":
            return LaunchResult("ok", None, {"accuracy": {"top1": 70.0},
                                             "dataset": {"builtin": True}})
        value, validity = values[(config.sut, config.scenario)][config.repeat - 1]
        return result(config, value, validity)
    return run_one, calls


def run_job(tmp_path: Path, values) -> tuple[list[job.Row] | None, list[RunConfig], str,
                                             Exception | None]:
    run_one, calls = fake(values)
    out = io.StringIO()
    base = RunConfig(scenario="Offline", sut=job.BASELINE, model="m", output=str(tmp_path))
    try:
        return job.run(base, run_one, Console(file=out, width=400)), calls, out.getvalue(), None
    except SutError as exc:
        return None, calls, out.getvalue(), exc


def series(base: list[float], ratios: list[float], validity: list[str] | None = None
           ) -> tuple[list[tuple[float, str]], list[tuple[float, str]]]:
    """FP32 values and INT8 values (FP32's times ``ratios``), per repeat."""
    states = validity or [V] * len(base)
    return ([(b, s) for b, s in zip(base, states, strict=True)],
            [(b * r, V) for b, r in zip(base, ratios, strict=True)])


def test_speedups_pair_runs_by_repeat_index_not_by_position(tmp_path) -> None:
    config = RunConfig(scenario="Offline", sut="ort-fp32", model="m")
    fp32 = [result(replace_repeat(config, k), v, s) for k, (v, s) in
            enumerate([(100, V), (999, X), (200, V), (300, V)], 1)]
    int8_config = RunConfig(scenario="Offline", sut="ort-int8", model="m")
    int8 = [result(replace_repeat(int8_config, k), v) for k, v in
            enumerate([200, 50, 400, 600], 1)]
    rows = [job.Row("ort-fp32", "Offline", RepeatSet(config, fp32)),
            job.Row("ort-int8", "Offline", RepeatSet(int8_config, int8))]
    job.speedups(rows, first=4)
    found = rows[1].speedup
    # repeats 1, 3, 4 pair up, each 2.00x; repeat 2 lost its partner (INVALID FP32)
    assert found.paired and found.n_baseline == 3
    assert found.point == pytest.approx(2.0) and found.low == pytest.approx(2.0)


def replace_repeat(config: RunConfig, index: int) -> RunConfig:
    from dataclasses import replace

    return replace(config, repeat=index, repeats=4, repeat_set="s")


def test_a_test_without_a_valid_run_has_no_figure_and_the_job_exits_3(tmp_path) -> None:
    fp32, int8 = series([100.0, 120.0, 90.0], [2.0, 2.1, 1.9])
    ss_fp32, _ = series([4e6, 4.2e6, 3.9e6], [1, 1, 1])
    values = {("ort-fp32", "Offline"): fp32, ("ort-int8", "Offline"): int8,
              ("ort-fp32", "SingleStream"): ss_fp32,
              ("ort-int8", "SingleStream"): [(2e6, X)] * 3}
    rows, calls, out, error = run_job(tmp_path, values)
    assert rows is None and isinstance(error, SutError)
    assert "ort-int8 SingleStream: 3 of 3 runs INVALID, left out: no figure" in str(error)
    assert len(calls) == 2 + 12  # no second stage: a side with no VALID run
    assert out.count("left out: ort-int8 SingleStream repeat") == 3
    assert "ran faster than the warm-up" in out  # quantmark's words, not LoadGen's advice


def test_an_invalid_run_is_named_and_never_in_a_median(tmp_path) -> None:
    fp32, int8 = series([100.0, 120.0, 90.0], [2.0, 2.1, 2.0], [V, X, V])
    fp32[1] = (10_000.0, X)  # an INVALID run far off: the median must not see it
    ss_fp32, ss_int8 = series([4e6, 4.2e6, 3.9e6], [0.5, 0.5, 0.5])
    values = {("ort-fp32", "Offline"): fp32, ("ort-int8", "Offline"): int8,
              ("ort-fp32", "SingleStream"): ss_fp32, ("ort-int8", "SingleStream"): ss_int8}
    rows, _, out, error = run_job(tmp_path, values)
    assert error is None
    offline = next(r for r in rows if r.sut == "ort-fp32" and r.scenario == "Offline")
    assert offline.runs.interval().point == pytest.approx(95.0)  # median of 100 and 90
    assert "1 of 3 runs INVALID, left out" in out
    assert "left out: ort-fp32 Offline repeat 2" in out


def test_an_undecided_speedup_gets_the_second_stage_in_its_scenario_only(tmp_path) -> None:
    noise = [1.0, 1.05, 0.93, 1.02, 0.97, 1.04, 0.99]
    fp32, int8 = series([100.0, 80.0, 120.0, 95.0, 110.0, 90.0, 105.0], noise)
    ss_fp32, ss_int8 = series([4e6, 4.2e6, 3.9e6], [0.5, 0.52, 0.49])
    values = {("ort-fp32", "Offline"): fp32, ("ort-int8", "Offline"): int8,
              ("ort-fp32", "SingleStream"): ss_fp32, ("ort-int8", "SingleStream"): ss_int8}
    rows, calls, out, error = run_job(tmp_path, values)
    assert error is None
    second = [(c.sut, c.scenario, c.repeat) for c in calls[14:]]
    assert second == [(sut, "Offline", k) for k in range(4, 8)
                      for sut in ("ort-fp32", "ort-int8")]  # interleaved, Offline only
    offline = [c for c in calls if c.scenario == "Offline" and c.sut == "ort-int8"
               and c.mode == "performance"]
    assert len({c.repeat_set for c in offline}) == 1  # one repeat set, gone on
    int8 = next(r for r in rows if r.sut == "ort-int8" and r.scenario == "Offline")
    assert int8.speedup.n_baseline == 7 and "98.8% per look" in int8.speedup.method
    assert int8.speedup.verdict == "no measurable difference"
    assert "running repeats 4-7 of both SUTs there" in out
    assert "up to 7 per side and a second look" in out
    assert "98.75%" in out and "98.75% (Bonferroni over the two looks and the 2 scenarios' " \
        "speedups: 95% for the job)" in job.plan_text(3)
    assert "speedup vs fp32 [interval]" in out  # the header, not eaten as markup


def test_int8_faster_than_each_neighbour_is_decided_in_the_first_stage(tmp_path) -> None:
    """The issue's case: each INT8 run 1.6-2x faster than its FP32 neighbour, on a machine
    whose speed drifts 30% between repeats: paired, it is a verdict after three repeats."""
    fp32, int8 = series([100.0, 130.0, 75.0], [1.6, 2.0, 1.8])
    ss_fp32, ss_int8 = series([4e6, 5.2e6, 3e6], [0.6, 0.5, 0.55])
    values = {("ort-fp32", "Offline"): fp32, ("ort-int8", "Offline"): int8,
              ("ort-fp32", "SingleStream"): ss_fp32, ("ort-int8", "SingleStream"): ss_int8}
    rows, calls, _, error = run_job(tmp_path, values)
    assert error is None and len(calls) == 2 + 12
    int8 = next(r for r in rows if r.sut == "ort-int8" and r.scenario == "Offline")
    assert int8.speedup.paired and int8.speedup.verdict == "faster"


def _noise(rng: np.random.Generator, model: str, shape: tuple[int, ...]) -> np.ndarray:
    """Each run's own log noise: 5% log-normal (the house's model), or heavier: Student t
    with 3 degrees of freedom at 10%, one run in ten 40% slower (unflagged) besides."""
    if model == "house":
        return rng.normal(0, 0.05, shape)
    heavy = 0.1 * rng.standard_t(3, shape) / np.sqrt(3)
    return heavy - np.log(1.4) * (rng.random(shape) < 0.1)


def false_verdict_jobs(trials: int, model: str, seed: int) -> int:
    """Jobs (the two-stage plan in both scenarios, ``job.run_stages``) that call an INT8
    exactly as fast as FP32 faster or slower in either scenario. Each repeat's machine
    drifts by 10%, shared by the pair run side by side."""
    rng = np.random.default_rng(seed)
    base = RunConfig(scenario="Offline", sut=job.BASELINE, model="m", output="/nonexistent")
    configs = [replace(base, sut=sut, scenario=scenario) for scenario in job.SCENARIOS
               for sut in job.SUTS]
    console = Console(file=io.StringIO())
    wrong = 0
    for _ in range(trials):
        drift = rng.normal(0, 0.10, (2, 7))
        logs = {(c.sut, c.scenario): drift[job.SCENARIOS.index(c.scenario)]
                + _noise(rng, model, (7,)) for c in configs}

        def run_one(config: RunConfig, logs: dict = logs) -> LaunchResult:
            log = logs[(config.sut, config.scenario)][config.repeat - 1]
            scale = 4e6 if config.scenario == "SingleStream" else 100.0
            return result(config, float(scale * np.exp(log)))
        rows = {(c.sut, c.scenario): job.Row(c.sut, c.scenario, RepeatSet(c)) for c in configs}
        job.run_stages(rows, configs, run_one, job.REPEATS, console)
        wrong += any(r.speedup is not None and r.speedup.significant for r in rows.values())
    return wrong


@pytest.mark.parametrize("model", ["house", "heavy"])
def test_an_int8_as_fast_as_fp32_is_called_faster_or_slower_in_at_most_5_percent_of_jobs(
        model: str) -> None:
    # each scenario held 5%, but a job judges two: at 97.5% per look 7.9-9.8% of jobs erred
    wrong = false_verdict_jobs(500, model, seed=41)
    assert stats.binomtest(wrong, 500).proportion_ci(0.95).low <= 0.05, wrong / 500
    assert job.look_confidence(job.REPEATS) == pytest.approx(1 - 0.05 / 4)


def test_runs_that_drift_over_the_job_are_named(tmp_path) -> None:
    # the machine slows run after run: the figures' intervals describe this job's window
    slowing = [100.0, 97.0, 95.5, 93.0, 91.0, 88.5, 87.0]
    fp32, int8 = series(slowing, [1.0, 1.05, 0.93, 1.02, 0.97, 1.04, 0.99])
    ss_fp32, ss_int8 = series([4e6, 4.2e6, 3.9e6], [0.5, 0.52, 0.49])
    values = {("ort-fp32", "Offline"): fp32, ("ort-int8", "Offline"): int8,
              ("ort-fp32", "SingleStream"): ss_fp32, ("ort-int8", "SingleStream"): ss_int8}
    rows, _, out, error = run_job(tmp_path, values)
    assert error is None and len(rows[0].runs.results) == 7
    assert "drift: Offline: the 14 runs trend down in the order they ran" in out
    assert "drift: SingleStream" not in out  # 3 runs a side: no order is significant
    assert set(job.drift(rows)) == {"Offline"}
