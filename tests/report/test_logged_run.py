"""The one reader of a run's figure and validity: LoadGen's logs, and every field where the
run's results.json says otherwise. Real LoadGen runs of every scenario (a trivial SUT, seconds),
each with the record the runner would write from them."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from quantmark.ground.records import RunRecord
from quantmark.report.loadgen_log import DETAIL_FILE, INCOMPLETE, SUMMARY_FILE, summarize_file
from quantmark.report.logged_run import LogMismatch, verify
from tests.conftest import ROOT
from tests.report.loadgen_runs import cut_before, detail_values, loadgen_run

SCENARIOS = ("Offline", "SingleStream", "MultiStream", "Server")
LOGS: dict[str, Path] = {}
EXAMPLE_SWEEP = ROOT / "docs" / "example-sweep"  # runs quantmark wrote before this reader


@pytest.fixture(scope="module", autouse=True)
def loadgen_logs(tmp_path_factory) -> None:
    root = tmp_path_factory.mktemp("loadgen")
    for scenario in SCENARIOS:
        LOGS[scenario] = loadgen_run(root / scenario, scenario)


def run_folder(tmp_path: Path, scenario: str = "Offline") -> Path:
    """A copy of a real run's logs, with the results.json the runner writes from them."""
    folder = tmp_path / scenario
    shutil.copytree(LOGS[scenario], folder)
    started = verify(folder).started_at
    record = {"config": {"scenario": scenario, "mode": "performance"},
              "summary": summarize_file(folder / DETAIL_FILE).to_dict(),
              "times": {"loadgen_started_at": started + 0.4}}
    (folder / "results.json").write_text(json.dumps(record))
    return folder


def record_of(folder: Path) -> RunRecord:
    return RunRecord.of(json.loads((folder / "results.json").read_text()))


def edited(folder: Path, change: dict[str, Any]) -> RunRecord:
    """The folder's record with ``change`` (section -> fields) applied."""
    data = json.loads((folder / "results.json").read_text())
    for section, fields in change.items():
        data[section].update(fields)
    return RunRecord.of(data)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_record_written_from_its_logs_agrees_in_every_scenario(tmp_path, scenario):
    folder = run_folder(tmp_path, scenario)
    logged = verify(folder, record_of(folder))
    assert logged.agrees and logged.problems == (), logged.mismatches
    assert logged.summary.to_dict() == record_of(folder).summary
    logged_value = detail_values(folder)[logged.summary.metric_key]
    assert logged.summary.metric_value == float(logged_value)


@pytest.mark.parametrize(("key", "label"), [
    ("metric_value", "official metric value"), ("samples_per_second", "samples/s"),
    ("query_count", "queries"), ("max_latency_ns", "max latency (ns)")])
def test_an_edited_figure_is_named_with_both_values(tmp_path, key, label):
    folder = run_folder(tmp_path)
    theirs = record_of(folder).summary[key]
    logged = verify(folder, edited(folder, {"summary": {key: theirs * 10}}))
    [mismatch] = logged.mismatches
    said = re.fullmatch(rf"{re.escape(label)} (\S+), LoadGen's (\S+)", mismatch)
    assert said, mismatch
    assert float(said[1]) == pytest.approx(theirs * 10, rel=1e-6)
    assert float(said[2]) == pytest.approx(theirs, rel=1e-6)
    assert logged.summary.to_dict()[key] == theirs  # the figure is LoadGen's


def test_an_edited_percentile_and_validity_are_named(tmp_path):
    folder = run_folder(tmp_path, "SingleStream")
    summary = record_of(folder).summary
    p90 = summary["percentiles_ns"]["90.00"]
    logged = verify(folder, edited(folder, {"summary": {
        "validity": "INVALID", "percentiles_ns": {**summary["percentiles_ns"], "90.00": 1}}}))
    assert logged.mismatches == ("validity INVALID, LoadGen's VALID",
                                 f"p90 latency (ns) 1, LoadGen's {p90}")


def test_a_record_that_says_valid_where_loadgen_says_invalid_is_named(tmp_path):
    folder = run_folder(tmp_path)
    text = (folder / DETAIL_FILE).read_text().replace(
        '"key": "result_validity", "value": "VALID"', '"key": "result_validity", "value": '
                                                      '"INVALID"', 1)
    (folder / DETAIL_FILE).write_text(text)
    (folder / SUMMARY_FILE).write_text((folder / SUMMARY_FILE).read_text().replace(
        "Result is : VALID", "Result is : INVALID"))
    logged = verify(folder, record_of(folder))
    assert logged.summary.validity == "INVALID" and logged.problems == ()
    assert logged.mismatches == ("validity VALID, LoadGen's INVALID",)


def test_the_logs_of_another_run_are_named_by_their_start(tmp_path):
    folder = run_folder(tmp_path)
    record = record_of(folder)
    started = record.times["loadgen_started_at"]
    assert verify(folder, edited(folder, {"times": {"loadgen_started_at": started + 2}})).agrees
    logged = verify(folder, edited(folder, {"times": {"loadgen_started_at": started + 60}}))
    [mismatch] = logged.mismatches
    assert "(the logs of another run)" in mismatch and "LoadGen's test" in mismatch


def test_the_scenario_and_mode_asked_must_be_the_ones_loadgen_ran(tmp_path):
    folder = run_folder(tmp_path)
    logged = verify(folder, edited(folder, {"config": {"scenario": "SingleStream"}}))
    assert logged.mismatches == ("its config asks for SingleStream, LoadGen ran Offline",)
    logged = verify(folder, edited(folder, {"config": {"mode": "accuracy"}}))
    assert logged.mismatches == ("its config asks for accuracy mode, LoadGen ran "
                                 "PerformanceOnly",)
    audit = edited(folder, {"config": {"mode": "accuracy", "audit": "TEST01"}})
    assert verify(folder, audit).agrees  # an audit's mode is its audit.config's


def test_logs_cut_short_back_no_figure_unless_the_record_says_so(tmp_path):
    folder = run_folder(tmp_path)
    cut_before(folder / DETAIL_FILE, "result_validity")
    logged = verify(folder, record_of(folder))
    assert logged.summary.validity == INCOMPLETE and logged.problems
    [mismatch] = logged.mismatches
    assert mismatch.startswith("it says VALID, but LoadGen's logs are not whole: "
                               "mlperf_log_detail.txt: it stops before LoadGen's results")
    written_then = edited(folder, {"summary": {"validity": INCOMPLETE}})
    assert verify(folder, written_then).agrees  # the runner wrote it from the cut log


def test_a_missing_summary_is_no_problem_but_an_edited_one_is(tmp_path):
    folder = run_folder(tmp_path)
    summary = (folder / SUMMARY_FILE).read_text()
    (folder / SUMMARY_FILE).unlink()
    assert verify(folder, record_of(folder)).agrees  # the detail log holds every number
    (folder / SUMMARY_FILE).write_text(summary.replace("Samples per second: ",
                                                       "Samples per second: 9"))
    logged = verify(folder, record_of(folder))
    assert logged.summary.validity == INCOMPLETE
    assert any("says Samples per second" in p for p in logged.problems), logged.problems
    assert not logged.agrees


def test_a_missing_or_empty_detail_log_backs_nothing(tmp_path):
    folder = run_folder(tmp_path)
    (folder / DETAIL_FILE).write_text("")
    logged = verify(folder, record_of(folder))
    assert logged.problems[0].startswith("mlperf_log_detail.txt: empty")
    (folder / DETAIL_FILE).unlink()
    logged = verify(folder, record_of(folder))
    assert logged.problems == ("mlperf_log_detail.txt: missing",) and not logged.parsed
    assert logged.summary.validity == INCOMPLETE and logged.summary.metric_value is None
    assert not logged.agrees


def test_check_is_one_line_naming_the_run_and_the_fix(tmp_path):
    folder = run_folder(tmp_path)
    record = edited(folder, {"summary": {"samples_per_second": 1.0}})
    with pytest.raises(LogMismatch) as refused:
        verify(folder, record).check("here/run_1", "not recorded")
    text = str(refused.value)
    assert "\n" not in text and text.startswith("here/run_1: results.json disagrees with "
                                                "LoadGen's logs (samples/s 1, LoadGen's ")
    assert "; not recorded; restore the folder as the run left it" in text
    assert verify(folder, record_of(folder)).check() is not None


def test_the_record_given_to_the_rules_carries_loadgens_summary(tmp_path):
    folder = run_folder(tmp_path)
    record = edited(folder, {"summary": {"samples_per_second": 1.0, "validity": "INVALID"}})
    logged = verify(folder, record)
    mended = logged.record(record)
    assert mended.summary == logged.summary.to_dict() and mended.validity == "VALID"
    assert record.summary["samples_per_second"] == 1.0  # the record itself is untouched


def test_a_record_of_an_older_quantmark_is_checked_on_what_it_holds():
    """docs/example-sweep's runs were written before the summary named its unmet checks."""
    runs = sorted(EXAMPLE_SWEEP.rglob("results.json"))
    runs = [path for path in runs if json.loads(path.read_text()).get("summary")]
    assert len(runs) >= 100
    for path in runs[::10]:
        record = RunRecord.of(json.loads(path.read_text()))
        assert "unmet_checks" not in record.summary
        logged = verify(path.parent, record)
        assert logged.agrees and not logged.problems, (path, logged.mismatches)
