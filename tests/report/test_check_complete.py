"""check_complete: whole LoadGen logs pass, in every scenario and mode; logs cut short,
missing or disagreeing with each other are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantmark.report.loadgen_log import check_complete, read_detail
from tests.report.loadgen_runs import copy_run, cut_before, loadgen_run

SCENARIOS = ("SingleStream", "MultiStream", "Offline", "Server")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("complete")
    made = {s: loadgen_run(root / s, s) for s in SCENARIOS}
    made["invalid"] = loadgen_run(root / "invalid", "Server", server_bound_ns=1_000)  # 1 us
    for scenario in ("Offline", "SingleStream"):
        made[f"accuracy-{scenario}"] = loadgen_run(root / f"acc-{scenario}", scenario,
                                                   mode="AccuracyOnly")
    return made


def test_whole_logs_pass_in_every_scenario_and_mode(runs):
    assert "Result is : INVALID" in (runs["invalid"] / "mlperf_log_summary.txt").read_text()
    assert {name: check_complete(folder) for name, folder in runs.items()} == {
        name: [] for name in runs}


def test_a_detail_log_without_its_result_lines(runs, tmp_path):
    for scenario in SCENARIOS:
        folder = copy_run(runs[scenario], tmp_path / scenario)
        cut_before(folder / "mlperf_log_detail.txt", "result_validity")
        problems = check_complete(folder)
        assert problems == ["mlperf_log_detail.txt: it stops before LoadGen's results "
                            "(no result_validity line)"], scenario


def test_a_detail_log_missing_one_result(runs, tmp_path):
    folder = copy_run(runs["Offline"], tmp_path / "run")
    cut_before(folder / "mlperf_log_detail.txt", "result_99.90_percentile_latency_ns")
    assert check_complete(folder) == [
        "mlperf_log_detail.txt: it lacks result_99.90_percentile_latency_ns"]


def test_a_truncated_last_line_is_named_not_a_crash(runs, tmp_path):
    folder = copy_run(runs["Server"], tmp_path / "run")
    cut_before(folder / "mlperf_log_detail.txt", "result_max_latency_ns", extra=25)
    detail = read_detail(folder / "mlperf_log_detail.txt")
    assert detail["_cut_off"] and detail["_bad_lines"] == []
    problems = check_complete(folder)
    assert problems[0] == "mlperf_log_detail.txt: its last line is cut off"
    assert "result_max_latency_ns" in problems[1]


def test_an_accuracy_run_cut_before_its_end(runs, tmp_path):
    folder = copy_run(runs["accuracy-Offline"], tmp_path / "run")
    cut_before(folder / "mlperf_log_detail.txt", "power_end")
    assert check_complete(folder) == ["mlperf_log_detail.txt: it stops before the end of the "
                                      "test (no power_end line)"]
    folder = copy_run(runs["accuracy-Offline"], tmp_path / "cut-json")
    log = folder / "mlperf_log_accuracy.json"
    log.write_text(log.read_text()[:-20])
    assert check_complete(folder) == ["mlperf_log_accuracy.json: cut off (not a closed JSON "
                                      "list)"]


def test_a_missing_or_cut_summary(runs, tmp_path):
    folder = copy_run(runs["SingleStream"], tmp_path / "missing")
    (folder / "mlperf_log_summary.txt").unlink()
    assert check_complete(folder) == ["mlperf_log_summary.txt: missing"]
    folder = copy_run(runs["SingleStream"], tmp_path / "cut")
    summary = folder / "mlperf_log_summary.txt"
    summary.write_text(summary.read_text()[:400])
    assert check_complete(folder) == [
        "mlperf_log_summary.txt: cut off (no closing 'errors encountered' line)"]


def test_a_summary_saying_valid_while_the_detail_says_invalid(runs, tmp_path):
    folder = copy_run(runs["invalid"], tmp_path / "run")
    summary = folder / "mlperf_log_summary.txt"
    summary.write_text(summary.read_text().replace("Result is : INVALID", "Result is : VALID"))
    assert check_complete(folder) == [
        "mlperf_log_summary.txt: says Result is VALID but the detail log INVALID"]


def test_a_summary_of_another_run(runs, tmp_path):
    folder = copy_run(runs["Server"], tmp_path / "scenario")
    (folder / "mlperf_log_summary.txt").write_text(
        (runs["Offline"] / "mlperf_log_summary.txt").read_text())
    problems = check_complete(folder)
    assert "mlperf_log_summary.txt: says Scenario 'Offline' but the detail log 'Server'" in (
        problems)
    assert any("Samples per second" in p for p in problems)
    folder = copy_run(runs["Offline"], tmp_path / "metric")
    summary = folder / "mlperf_log_summary.txt"
    text = summary.read_text()
    line = next(x for x in text.splitlines() if x.startswith("Samples per second: "))
    value = float(line.split(": ")[1])
    summary.write_text(text.replace(line, f"Samples per second: {value * 1.5:.6g}"))
    assert len(problems := check_complete(folder)) == 1
    assert problems[0].startswith("mlperf_log_summary.txt: says Samples per second ")


def test_an_empty_or_garbled_detail_log(runs, tmp_path):
    folder = copy_run(runs["Offline"], tmp_path / "empty")
    (folder / "mlperf_log_detail.txt").write_text("")
    assert check_complete(folder) == [
        "mlperf_log_detail.txt: empty, LoadGen stopped before writing it"]
    (folder / "mlperf_log_detail.txt").unlink()
    assert check_complete(folder) == ["mlperf_log_detail.txt: missing"]
    folder = copy_run(runs["Offline"], tmp_path / "garbled")
    detail = folder / "mlperf_log_detail.txt"
    lines = detail.read_text().splitlines(keepends=True)
    lines[20] = lines[20][:30] + "\n"
    detail.write_text("".join(lines))
    assert check_complete(folder) == [
        "mlperf_log_detail.txt: 1 line(s) are not LoadGen JSON (first: line 21)"]
