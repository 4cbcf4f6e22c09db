"""A quick run that came out INVALID because the machine ran faster than its warm-up is rerun
once at the rate it met; nothing else is rerun, and the user reads quantmark's words."""

from __future__ import annotations

import io
from dataclasses import replace
from typing import Any

import pytest
from rich.console import Console

from quantmark.commands import run as run_verb
from quantmark.ground.config import RunConfig
from quantmark.run import launch as launcher
from quantmark.run.launch import LaunchResult
from quantmark.run.rerun import rerun_config

QUICK = RunConfig(scenario="Offline", sut="ort-fp32", model="m", batch_size=8)
LOADGEN_ADVICE = ("Reduce expected QPS so the loadgen pre-generates more queries. "
                  "Increase expected QPS")


def results(config: RunConfig, validity: str = "INVALID", met: float = 800.0,
            unmet: tuple[str, ...] = ("min duration",), set_by_quantmark: bool = True
            ) -> dict[str, Any]:
    """results.json of a run whose warm-up measured 8 samples / 20 ms = 400 samples/s."""
    key = "target_qps" if config.scenario in ("Offline", "Server") else "target_latency"
    return {"config": vars(config),
            "summary": {"scenario": config.scenario, "validity": validity,
                        "unmet_checks": list(unmet) if validity == "INVALID" else [],
                        "invalid_reason": LOADGEN_ADVICE, "samples_per_second": met,
                        "metric_value": met, "metric_unit": "samples/s"},
            "settings": {"mode": "quick" if config.quick else "official", "workers": 1,
                         "quantmark_set": {key: 640.0} if set_by_quantmark else {},
                         "measurement": {"latency_s": 0.004, "batch_latency_s": 0.02,
                                         "batch_size": 8, "query_path_s": 0.0,
                                         "path_throughput": 0.0}}}


def test_a_quick_run_that_ran_out_of_queries_is_rerun_at_the_rate_it_met() -> None:
    again = rerun_config(QUICK, "ok", results(QUICK))
    assert again is not None and again.rerun["met_samples_per_s"] == 800.0
    assert again.rerun["warmup_samples_per_s"] == pytest.approx(400.0)
    assert "2x the 400 its warm-up measured" in again.rerun["why"]
    assert replace(again, rerun={}) == QUICK  # the same test, nothing else changed


@pytest.mark.parametrize("config, kwargs", [
    (replace(QUICK, quick=False), {}),  # official: never silently rerun
    (replace(QUICK, audit="TEST04"), {}),
    (replace(QUICK, scenario="Server"), {}),
    (replace(QUICK, rerun={"why": "once"}), {}),  # a rerun is not rerun again
    (QUICK, {"set_by_quantmark": False}),  # the user's user.conf chose the rate
    (QUICK, {"validity": "VALID"}),
    (QUICK, {"unmet": ("latency bound",)}),
    (QUICK, {"met": 300.0}),  # slower than the warm-up: speed was not the cause
])
def test_everything_else_stands_as_it_ran(config: RunConfig, kwargs: dict[str, Any]) -> None:
    assert rerun_config(config, "ok", results(config, **kwargs)) is None


def test_the_launcher_reruns_once_and_returns_the_rerun(monkeypatch, tmp_path) -> None:
    calls: list[tuple[RunConfig, bool]] = []

    def once(config, cwd, timeout_s, quiet, log_path, append):
        calls.append((config, append))
        return LaunchResult("ok", "/runs/run_1", results(config, "INVALID"))

    monkeypatch.setattr(launcher, "_launch_once", once)
    found = launcher.launch(QUICK, log_path=tmp_path / "cell.log")
    assert len(calls) == 2 and [append for _, append in calls] == [False, True]
    assert found.results["config"]["rerun"]["met_samples_per_s"] == 800.0
    calls.clear()
    launcher.launch(replace(QUICK, quick=False))
    assert len(calls) == 1


def _printed(result: LaunchResult, monkeypatch) -> str:
    out = io.StringIO()
    monkeypatch.setattr(run_verb, "console", Console(file=out, width=400))
    run_verb.print_run(result)
    return out.getvalue()


def test_a_quick_user_reads_what_quantmark_did_not_loadgens_advice(monkeypatch) -> None:
    again = rerun_config(QUICK, "ok", results(QUICK))
    line = _printed(LaunchResult("ok", "/runs/run_1", results(again)), monkeypatch)
    assert "Increase expected QPS" not in line
    assert "even after quantmark reran the run once at the 800 samples/s" in line
    assert "(rerun: the first run was INVALID (min duration not met)" in line
    official = replace(QUICK, quick=False)
    line = _printed(LaunchResult("ok", "/runs/run_1", results(official)), monkeypatch)
    assert "Increase expected QPS" in line  # an official run: LoadGen's own words


def test_loadgen_s_own_log_of_a_run_that_ran_out_of_queries_triggers_the_rerun(tmp_path) -> None:
    """A real LoadGen Offline run told to expect 100 samples/s of a SUT that does thousands:
    its detail log says min duration not met, and that alone is what the rerun reads."""
    from quantmark.report.loadgen_log import summarize_file
    from tests.conftest import run_python
    from tests.report.loadgen_runs import MIN_QUERIES, PROGRAM

    code = PROGRAM.format(out=str(tmp_path), scenario="Offline", mode="PerformanceOnly",
                          min_queries=MIN_QUERIES["Offline"], server_bound_ns=10**9)
    proc = run_python(code.replace("s.offline_expected_qps = 100000",
                                   "s.offline_expected_qps = 100"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = summarize_file(tmp_path / "mlperf_log_detail.txt").to_dict()
    assert summary["validity"] == "INVALID" and summary["unmet_checks"] == ["min duration"]
    found = results(QUICK, met=summary["samples_per_second"])
    found["summary"] = summary  # LoadGen's, as results.json records it
    again = rerun_config(QUICK, "ok", found)
    assert again is not None
    assert again.rerun["met_samples_per_s"] == pytest.approx(summary["samples_per_second"])
