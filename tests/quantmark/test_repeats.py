"""Repeat sets: interleaving, --until-stable, stale runs, and --repeats end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quantmark.ground.config import RunConfig
from quantmark.ground.errors import UserError
from quantmark.ground.layout import run_dir
from quantmark.ground.locks import FileLock
from quantmark.launcher import LaunchResult
from quantmark.repeats import interleaved, remove_stale, run_set
from tests.conftest import run_cli
from tests.quantmark.test_cli import tiny_onnx


def _config(tmp_path: Path, sut: str = "ort-fp32") -> RunConfig:
    return RunConfig(scenario="Offline", sut=sut, model="m", output=str(tmp_path),
                     system_id="host")


def _fake_runner(values: list[float]):
    calls: list[RunConfig] = []

    def run(config: RunConfig) -> LaunchResult:
        calls.append(config)
        value = values[len(calls) - 1]
        return LaunchResult("ok", None, {"summary": {"metric_value": value,
                                                     "metric_unit": "samples/s"}})
    return run, calls


def test_interleaving_runs_repeat_k_of_every_sut_before_repeat_k_plus_1(tmp_path) -> None:
    a, b = _config(tmp_path, "ort-fp32"), _config(tmp_path, "ort-int8")
    order = [(c.sut, c.repeat, c.repeats) for c in interleaved([a, b], 3)]
    assert order == [("ort-fp32", 1, 3), ("ort-int8", 1, 3), ("ort-fp32", 2, 3),
                     ("ort-int8", 2, 3), ("ort-fp32", 3, 3), ("ort-int8", 3, 3)]
    sets = {(c.sut, c.repeat_set) for c in interleaved([a, b], 2)}
    assert len(sets) == 2  # one set id per SUT, shared by its repeats


def test_until_stable_stops_once_the_interval_is_narrow(tmp_path) -> None:
    run, calls = _fake_runner([40.0, 40.1, 39.9, 99.0])
    done = run_set(_config(tmp_path), run, repeats=1, until_stable=2.0, max_repeats=10)
    assert len(calls) == 3 and done.interval().half_width < 0.02
    assert {c.repeat_set for c in calls} == {calls[0].repeat_set}


def test_until_stable_stops_at_its_cap_on_a_noisy_machine(tmp_path) -> None:
    run, calls = _fake_runner([40.0, 20.0, 60.0, 30.0, 55.0, 25.0])
    done = run_set(_config(tmp_path), run, repeats=1, until_stable=1.0, max_repeats=5)
    assert len(calls) == 5 and len(done.results) == 5
    assert [c.repeat for c in calls] == [1, 2, 3, 4, 5]


def test_bad_repeat_flags_are_refused(tmp_path) -> None:
    run, _ = _fake_runner([1.0])
    with pytest.raises(UserError, match="--repeats 0"):
        run_set(_config(tmp_path), run, repeats=0)
    with pytest.raises(UserError, match="--until-stable 0"):
        run_set(_config(tmp_path), run, repeats=1, until_stable=0)
    with pytest.raises(UserError, match="--max-repeats 2"):
        run_set(_config(tmp_path), run, repeats=1, until_stable=5, max_repeats=2)


def test_runs_of_an_older_larger_set_are_removed_unless_held(tmp_path) -> None:
    config = _config(tmp_path)
    first = run_dir(tmp_path, "host", "m", "Offline", "performance")
    for k in (1, 2, 3, 4):
        (first.parent / f"run_{k}").mkdir(parents=True, exist_ok=True)
    with FileLock(first.parent / ".run_4.lock"):
        removed = remove_stale(config, kept=2)
    assert [p.name for p in removed] == ["run_3"]
    assert sorted(p.name for p in first.parent.glob("run_*")) == ["run_1", "run_2", "run_4"]


def test_repeats_end_to_end(tmp_path) -> None:
    model = tiny_onnx(tmp_path / "tiny.onnx")
    out = tmp_path / "results"
    common = ("--scenario", "SingleStream", "--sut", "ort-fp32", "--model-path", str(model),
              "--output", str(out))
    done = run_cli(*common, "--repeats", "2")
    assert done.returncode == 0, done.stderr
    assert "(repeat 1 of 2)" in done.stdout and "(repeat 2 of 2)" in done.stdout
    assert "median of 2 runs" in done.stdout and "95% interval" in done.stdout
    runs = sorted(out.glob("*/*/SingleStream/performance/run_*"))
    assert [r.name for r in runs] == ["run_1", "run_2"]
    records = [json.loads((r / "results.json").read_text()) for r in runs]
    assert [r["repeat"]["index"] for r in records] == [1, 2]
    assert records[0]["repeat"]["set"] == records[1]["repeat"]["set"] != ""
    again = run_cli(*common, "--repeats", "1")  # a smaller set: run_2 was the old set's
    assert again.returncode == 0, again.stderr
    assert [r.name for r in out.glob("*/*/SingleStream/performance/run_*")] == ["run_1"]
