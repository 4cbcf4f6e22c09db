"""Repeat sets: interleaving, --until-stable, stale runs, and --repeats end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quantmark.ground.config import RunConfig
from quantmark.ground.errors import UserError
from quantmark.ground.layout import run_dir
from quantmark.ground.locks import FileLock
from quantmark.run.launch import LaunchResult
from quantmark.run.repeated import interleaved, remove_stale, run_set
from tests.conftest import run_cli
from tests.quantmark.test_cli import tiny_onnx


def _config(tmp_path: Path, sut: str = "ort-fp32") -> RunConfig:
    return RunConfig(scenario="Offline", sut=sut, model="m", output=str(tmp_path),
                     system_id="host")


def _result(value: float, index: int, validity: str = "VALID", **summary) -> LaunchResult:
    """A finished run as the launcher returns it, with what RepeatSet reads."""
    return LaunchResult("ok", f"/runs/run_{index}", {
        "config": {"quick": True},
        "summary": {"metric_value": value, "metric_unit": "samples/s", "validity": validity,
                    **summary},
        "repeat": {"index": index, "of": 3, "set": "s"}})


def _fake_runner(values: list[float], validity: list[str] | None = None):
    calls: list[RunConfig] = []

    def run(config: RunConfig) -> LaunchResult:
        calls.append(config)
        value = values[len(calls) - 1]
        states = validity or []
        return _result(value, config.repeat,
                       states[len(calls) - 1] if len(calls) <= len(states) else "VALID")
    return run, calls


def test_interleaving_runs_repeat_k_of_every_sut_before_repeat_k_plus_1(tmp_path) -> None:
    a, b = _config(tmp_path, "ort-fp32"), _config(tmp_path, "ort-int8")
    order = [(c.sut, c.repeat, c.repeats) for c in interleaved([a, b], 3)]
    assert order == [("ort-fp32", 1, 3), ("ort-int8", 1, 3), ("ort-fp32", 2, 3),
                     ("ort-int8", 2, 3), ("ort-fp32", 3, 3), ("ort-int8", 3, 3)]
    sets = {(c.sut, c.repeat_set) for c in interleaved([a, b], 2)}
    assert len(sets) == 2  # one set id per SUT, shared by its repeats


def test_until_stable_stops_once_the_interval_is_narrow(tmp_path) -> None:
    # stable: two looks in a row (after runs 3 and 4) within 2% (quantmark.report.stopping)
    run, calls = _fake_runner([40.0, 40.1, 39.9, 40.05, 99.0])
    done = run_set(_config(tmp_path), run, repeats=1, until_stable=2.0, max_repeats=10)
    assert len(calls) == 4 and done.interval().half_width < 0.02
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


@pytest.mark.slow
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


def test_invalid_runs_are_left_out_of_the_median_and_named(tmp_path) -> None:
    from quantmark.run.repeated import RepeatSet

    done = RepeatSet(_config(tmp_path), [
        _result(40.0, 1), _result(400.0, 2, "INVALID", unmet_checks=["min duration"]),
        _result(42.0, 3), _result(41.0, 4, "INCOMPLETE (log truncated)",
                                  incomplete="mlperf_log_detail.txt: cut off")])
    assert done.metric_values() == [40.0, 42.0]
    assert done.by_repeat() == {1: 40.0, 3: 42.0}
    assert done.interval().n == 2 and done.interval().point == 41.0  # 400 never pulls it
    assert [r.results["repeat"]["index"] for r, _ in done.left_out()] == [2, 4]
    assert done.left_out_note() == "2 of 4 runs INVALID or incomplete, left out"
    # a quick run's reason is quantmark's, not LoadGen's advice
    assert "ran faster than the warm-up" in done.left_out()[0][1]


def _repeated(monkeypatch, values: list[float], validity: list[str]) -> tuple[int, str]:
    """``run.py --repeats N`` through the CLI with the test runs faked: (exit code, stdout)."""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from quantmark import cli
    from quantmark.api import answers
    from quantmark.commands import run as run_verb

    run, _ = _fake_runner(values, validity)
    out = io.StringIO()
    monkeypatch.setattr(run_verb, "console", Console(file=out, width=300))
    monkeypatch.setattr(run_verb, "validate", lambda config: None)
    monkeypatch.setattr(run_verb, "run_one", run)
    # the faked runs have no folders for the API's answer to read (what the CLI prints and
    # its exit code come before it: the repeat set's own)
    monkeypatch.setattr(answers, "run_result", lambda folders: SimpleNamespace(exit_code=0))
    code = cli.main(["--scenario", "Offline", "--sut", "ort-fp32", "--repeats",
                     str(len(values)), "--output", "out"])
    return code, out.getvalue()


def test_the_headline_is_over_valid_runs_and_says_how_many_were_left_out(monkeypatch) -> None:
    code, out = _repeated(monkeypatch, [120.0, 145.0, 177.0], ["VALID", "INVALID", "VALID"])
    assert code == 0
    assert "median of 2 VALID runs" in out and "1 of 3 runs INVALID, left out" in out
    assert "left out: repeat 2" in out


def test_every_run_invalid_gives_no_figure_and_exit_3(monkeypatch, capsys) -> None:
    code, out = _repeated(monkeypatch, [121.5, 145.8, 177.7], ["INVALID"] * 3)
    assert code == 3
    assert "median" not in out and out.count("left out: repeat") == 3
    err = capsys.readouterr().err
    assert "3 of 3 runs INVALID, left out" in err and err.count("\n") == 1


def test_a_set_that_goes_on_keeps_its_id_and_counts_on(tmp_path) -> None:
    a, b = _config(tmp_path, "ort-fp32"), _config(tmp_path, "ort-int8")
    first = list(interleaved([a, b], 3))
    more = list(interleaved([a, b], 7, start=4, set_ids=[first[0].repeat_set,
                                                         first[1].repeat_set]))
    assert [(c.sut, c.repeat) for c in more[:2]] == [("ort-fp32", 4), ("ort-int8", 4)]
    assert len(more) == 8 and {c.repeat_set for c in more} == {c.repeat_set for c in first}
