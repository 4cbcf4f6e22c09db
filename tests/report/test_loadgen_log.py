"""The report's numbers are LoadGen's own: checked against LoadGen's summary file."""

from __future__ import annotations

import re

import pytest

from quantmark.report.accuracy import compute_accuracy
from quantmark.report.loadgen_log import LogError, read_detail, summarize_file
from quantmark.report.run_table import to_csv, to_markdown, write_report
from tests.conftest import run_python
from tests.report.loadgen_runs import MIN_QUERIES, PROGRAM


def _dummy_run(out, scenario: str, server_bound_ns: int = 2_000_000_000) -> None:
    """LoadGen over a trivial SUT. The Server bound is loose by default so a scheduler stall of
    a shared machine cannot make the run INVALID; a tight one makes it INVALID on purpose."""
    code = PROGRAM.format(out=str(out), scenario=scenario, mode="PerformanceOnly",
                          min_queries=MIN_QUERIES[scenario], server_bound_ns=server_bound_ns)
    proc = run_python(code, timeout=120)
    assert proc.returncode == 0, proc.stderr


def _summary_file_percentiles(path):
    text = path.read_text()
    found = {}
    for p in ("50.00", "90.00", "95.00", "97.00", "99.00", "99.90"):
        match = re.search(rf"^{re.escape(p)} percentile latency \(ns\)\s*:\s*(\d+)", text, re.M)
        if match:
            found[p] = int(match.group(1))
    return found


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    folders = {}
    for scenario in ("SingleStream", "MultiStream", "Offline", "Server"):
        out = root / "sys" / "m" / scenario / "performance" / "run_1"
        _dummy_run(out, scenario)
        folders[scenario] = out
    return root, folders


@pytest.mark.parametrize("scenario", ["SingleStream", "MultiStream", "Offline", "Server"])
def test_percentiles_equal_loadgen_summary(runs, scenario):
    _, folders = runs
    summary = summarize_file(folders[scenario] / "mlperf_log_detail.txt")
    assert summary.scenario == scenario
    assert summary.validity == "VALID"
    expected = _summary_file_percentiles(folders[scenario] / "mlperf_log_summary.txt")
    assert expected and summary.percentiles_ns == expected
    assert summary.metric_value is not None and summary.metric_value > 0
    assert summary.samples_per_second and summary.samples_per_second > 0
    assert summary.unmet_checks == []


def test_invalid_run_says_which_checks_failed_and_loadgen_advice(tmp_path):
    _dummy_run(tmp_path, "Server", server_bound_ns=1_000)  # 1 us: no query can meet it
    summary = summarize_file(tmp_path / "mlperf_log_detail.txt")
    text = (tmp_path / "mlperf_log_summary.txt").read_text()
    assert summary.validity == "INVALID" and "Result is : INVALID" in text
    assert "latency bound" in summary.unmet_checks and "early stopping" in summary.unmet_checks
    assert "Performance constraints satisfied : NO" in text
    advice = re.search(r"^Recommendations:\n \* (.+)$", text, re.M).group(1).strip()
    assert summary.why_invalid() == f"{', '.join(summary.unmet_checks)} not met; {advice}"


def test_report_writes_csv_and_markdown(runs):
    root, _ = runs
    rows, csv_path, md_path = write_report(root)
    assert len(rows) == 4
    assert csv_path.read_text() == to_csv(rows, root)
    assert md_path.read_text() == to_markdown(rows, root)
    assert csv_path.read_text().count("\n") == 5


def test_not_a_log(tmp_path):
    bad = tmp_path / "mlperf_log_detail.txt"
    bad.write_text("hello\n")
    with pytest.raises(LogError):
        read_detail(bad)


def test_accuracy_deduplicates_and_counts(tmp_path):
    import json

    import numpy as np

    def hexf(value):
        return np.array([value], np.float32).tobytes().hex().upper()

    entries = [{"seq_id": 0, "qsl_idx": 0, "data": hexf(5)},
               {"seq_id": 1, "qsl_idx": 1, "data": hexf(2)},
               {"seq_id": 2, "qsl_idx": 0, "data": hexf(9)},  # duplicate: first one counts
               {"seq_id": 3, "qsl_idx": 3, "data": hexf(7)}]
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text(json.dumps(entries))
    result = compute_accuracy(log, [5, 1, 0, 7])
    assert (result.good, result.total, result.duplicates) == (2, 3, 1)
    assert result.line() == "accuracy=66.667%, good=2, total=3"
