"""`run.py report DIR`: every printed cell is the logs' value under its own header, in the
console table, report.csv and report.md alike; a truncated log, or a run other processes
disturbed, is a marked row with a warning."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from quantmark.commands import report as report_verb
from quantmark.report.loadgen_log import INCOMPLETE, OFFICIAL_METRIC, PERCENTILES
from quantmark.report.percentiles import why_not
from quantmark.report.table_formats import ordered
from tests.report.loadgen_runs import (
    copy_run,
    cut_before,
    detail_values,
    loadgen_run,
    write_results,
)

SCENARIOS = ("SingleStream", "MultiStream", "Offline", "Server")
LABELS = {p: f"p{p.rstrip('0').rstrip('.')}" for p in PERCENTILES}  # 99.90 -> p99.9


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def _samples_per_s(scenario: str, log: dict) -> float:
    if scenario == "MultiStream":  # LoadGen prints none: samples per query / mean query latency
        return log["effective_samples_per_query"] * 1e9 / log["result_mean_query_latency_ns"]
    key = {"SingleStream": "result_qps_with_loadgen_overhead",
           "Server": "result_completed_samples_per_sec",
           "Offline": "result_samples_per_second"}[scenario]
    return log[key]


def expected_cells(folder: Path, results: dict) -> dict[str, str]:
    """What each column must show for the run in ``folder``, by the CSV header's names, taken
    from the detail log and results.json."""
    log = detail_values(folder)
    scenario = log["effective_scenario"]
    key, unit, _ = OFFICIAL_METRIC[scenario]
    return {
        "sut": results["config"]["sut"], "model": results["config"]["model"],
        "executed_precision": results["sut"]["executed_precision"], "scenario": scenario,
        "mode": "performance", "run": "quick", "validity": log["result_validity"],
        "metric_value": f"{float(log[key]):.6g}", "metric_unit": unit,
        "metric_text": (f"{log[key] / 1e6:.3f} ms" if unit == "ns" else
                        f"{log[key]:.2f} samples/s"),
        "samples_per_s": f"{_samples_per_s(scenario, log):.2f}",
        "min_ms": _ms(log["result_min_latency_ns"]), "max_ms": _ms(log["result_max_latency_ns"]),
        "mean_ms": _ms(log["result_mean_latency_ns"]),
        **{f"{LABELS[p]}_ms": _ms(log[f"result_{p}_percentile_latency_ns"])
           for p in PERCENTILES},
        "accuracy_top1": f"{results['accuracy']['top1']:.3f}", "throttled": "no",
    }


# console label -> the name of the same value in expected_cells
CONSOLE = {"sut": "sut", "executed": "executed_precision", "model": "model",
           "scenario": "scenario", "mode": "mode", "run": "run", "validity": "validity",
           "metric": "metric_text", "samples/s": "samples_per_s",
           **{LABELS[p]: f"{LABELS[p]}_ms" for p in PERCENTILES},
           "top-1": "accuracy_top1", "throttled": "throttled"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, dict[str, tuple[Path, dict]]]:
    """One real LoadGen run per scenario, each with its own SUT name, precision and top-1."""
    root = tmp_path_factory.mktemp("report")
    made = {}
    for n, scenario in enumerate(SCENARIOS):
        folder = loadgen_run(root / "box" / scenario / "performance" / "run_1", scenario)
        results = write_results(folder, sut=f"sut-{scenario}", model=f"model{n}",
                                scenario=scenario, executed=("int8", "fp32", "fp16", "bf16")[n],
                                top1=70.0 + n + 0.125)
        made[f"sut-{scenario}"] = (folder, results)
    return root, made


def console_report(monkeypatch, folder: Path) -> str:
    """What `run.py report FOLDER` prints, on a console wide enough never to wrap a cell."""
    buffer = io.StringIO()
    monkeypatch.setattr(report_verb, "console", Console(file=buffer, width=600, color_system=None))
    report_verb.report([str(folder)])
    return buffer.getvalue()


def console_rows(text: str) -> list[dict[str, str]]:
    """The printed table as {header: cell} per row."""
    lines = text.splitlines()
    header = next(line for line in lines if "┃" in line and "sut" in line)
    names = [cell.strip() for cell in header.split("┃")[1:-1]]
    return [dict(zip(names, [c.strip() for c in line.split("│")[1:-1]], strict=True))
            for line in lines if line.startswith("│")]


def markdown_rows(text: str) -> list[dict[str, str]]:
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    names = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [dict(zip(names, [c.strip() for c in line.strip("|").split("|")], strict=True))
            for line in lines[1:]]


def test_console_csv_and_markdown_cells_sit_under_their_headers(runs, monkeypatch):
    root, made = runs
    printed = {row["sut"]: row for row in console_rows(console_report(monkeypatch, root))}
    with open(root / "report.csv", newline="") as handle:
        written = {row["sut"]: row for row in csv.DictReader(handle)}
    markdown = {row["sut"]: row for row in markdown_rows((root / "report.md").read_text())}
    assert set(printed) == set(written) == set(markdown) == set(made)
    for sut, (folder, results) in made.items():
        expected = expected_cells(folder, results)
        assert expected["validity"] == "VALID"
        # Offline: one query, no sample percentiles; too few queries: the slowest query
        queries = detail_values(folder)["result_query_count"]
        why = {f"{LABELS[p]}_ms": why_not(expected["scenario"], p, queries) for p in PERCENTILES}
        shown = {label: why.get(name) or expected[name] for label, name in CONSOLE.items()}
        assert {label: printed[sut][label] for label in CONSOLE} == shown, sut
        assert written[sut]["queries"] == str(queries)
        for form, says_why in ((written[sut], False), (markdown[sut], True)):
            cells = {name: form[name] for name in expected if name != "metric_text"}
            assert cells == {k: (why[k] if says_why else "") if why.get(k) else v
                             for k, v in expected.items() if k != "metric_text"}, sut
            assert Path(form["path"]) == folder.relative_to(root)


def test_a_truncated_log_is_a_marked_row_and_a_warning(runs, tmp_path, monkeypatch):
    _, made = runs
    source = made["sut-SingleStream"][0]
    cases = {  # name -> where the log was cut, and what the warning must say
        "results": ("result_50.00_percentile_latency_ns", 30,  # inside the results
                    "lacks result_50.00_percentile_latency_ns"),
        "settings": ("requested_scenario", 0, "no effective_scenario"),  # before the scenario
        "end": ("num_errors", 40, "last line is cut off"),  # its last line only: still marked
    }
    for name, (key, extra, _) in cases.items():
        folder = copy_run(source, tmp_path / name / "run_1")
        write_results(folder, sut=f"cut-{name}", model="m", scenario="SingleStream",
                      executed="int8", top1=1.0)
        cut_before(folder / "mlperf_log_detail.txt", key, extra)
    good = copy_run(source, tmp_path / "good" / "run_1")
    write_results(good, sut="whole", model="m", scenario="SingleStream", executed="int8",
                  top1=1.0)
    text = console_report(monkeypatch, tmp_path)
    printed = {row["sut"]: row for row in console_rows(text)}
    with open(tmp_path / "report.csv", newline="") as handle:
        written = {row["sut"]: row for row in csv.DictReader(handle)}
    markdown = (tmp_path / "report.md").read_text()
    for name, (_, _, why) in cases.items():
        assert printed[f"cut-{name}"]["validity"] == INCOMPLETE
        assert printed[f"cut-{name}"]["scenario"] == "SingleStream"  # never blank
        assert written[f"cut-{name}"]["validity"] == INCOMPLETE
        warning = next(line for line in text.splitlines() if f" {name}/run_1: " in line)
        assert warning.startswith(f"warning: {name}/run_1: LoadGen's log is incomplete")
        assert why in warning and f"- {name}/run_1: LoadGen's log is incomplete" in markdown
    assert printed["whole"]["validity"] == "VALID" and "good/run_1" not in text


def test_a_table_record_that_does_not_match_its_header_is_refused():
    assert ordered(["a", "b"], {"b": 2, "a": 1}) == [1, 2]
    for record in ({"a": 1}, {"a": 1, "b": 2, "c": 3}):
        with pytest.raises(ValueError, match="does not match its header"):
            ordered(["a", "b"], record)


def test_a_disturbed_run_is_flagged_in_every_form_and_warned_about(runs, tmp_path,
                                                                   monkeypatch):
    _, made = runs
    source = made["sut-Offline"][0]
    verdicts = {"noisy": True, "quiet": False, "old": None}  # None: results from before
    for name, disturbed in verdicts.items():
        folder = copy_run(source, tmp_path / name / "run_1")
        results = write_results(folder, sut=name, model="m", scenario="Offline",
                                executed="int8", top1=1.0)
        if disturbed is not None:
            results["interference"] = {"disturbed": disturbed,
                                       "why": ["other processes used 0.93 of 2 cores"]}
        (folder / "results.json").write_text(json.dumps(results))
    text = console_report(monkeypatch, tmp_path)
    printed = {row["sut"]: row for row in console_rows(text)}
    with open(tmp_path / "report.csv", newline="") as handle:
        written = {row["sut"]: row for row in csv.DictReader(handle)}
    markdown = (tmp_path / "report.md").read_text()
    tabled = {row["sut"]: row for row in markdown_rows(markdown.split("\n\n")[0])}
    assert {sut: printed[sut]["disturbed"] for sut in verdicts} == {
        "noisy": "yes", "quiet": "no", "old": "-"}
    assert {sut: written[sut]["disturbed"] for sut in verdicts} == {
        "noisy": "yes", "quiet": "no", "old": ""}
    assert {sut: tabled[sut]["disturbed"] for sut in verdicts} == {
        "noisy": "yes", "quiet": "no", "old": "-"}
    warnings = [line for line in text.splitlines() if "disturbed this run" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: noisy/run_1: other processes")
    assert "0.93 of 2 cores" in warnings[0]
    assert "- noisy/run_1: other processes disturbed this run" in markdown
    assert "quiet/run_1: other" not in markdown
