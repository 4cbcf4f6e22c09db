"""BENCHMARKS.md is generated from the recorded results in benchmarks/: the committed page is
what they give, a recorded figure its runs do not give is refused, a folder whose runs their
LoadGen logs do not back is never recorded, and the tables on a small made-up sweep."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from quantmark.bench import recorded_result, result_capture, results_page
from quantmark.bench.recorded_result import Disagrees
from tests.conftest import ROOT
from tests.quantmark.store.run_folders import T0, make_run

COMMIT = {"rev": "0" * 40, "basis": result_capture.MADE_AT, "note": "a test's"}


def test_the_committed_page_is_what_the_recorded_results_give() -> None:
    assert sorted((ROOT / "benchmarks").glob("*.json")), "no recorded result is committed"
    page = results_page.render(ROOT / "benchmarks")
    assert (ROOT / "BENCHMARKS.md").read_text() == page, (
        "BENCHMARKS.md is not what benchmarks/ gives: run python -m "
        "quantmark.bench.results_page")
    assert page == results_page.render(ROOT / "benchmarks")  # no clock, no host in it


def _committed(name: str = "text-tf") -> dict[str, Any]:
    return json.loads((ROOT / "benchmarks" / f"{name}.json").read_text())


def _refused(tmp_path: Path, data: dict[str, Any], *words: str) -> None:
    path = tmp_path / "edited.json"
    path.write_text(recorded_result.dumps(data))
    with pytest.raises(Disagrees) as caught:
        recorded_result.load(path)
    message = str(caught.value)
    assert "\n" not in message and all(word in message for word in words), message
    assert results_page.main(["--results", str(tmp_path), "--output",
                              str(tmp_path / "page.md")]) == 2
    assert not (tmp_path / "page.md").exists()


def test_a_figure_its_runs_do_not_give_is_refused(tmp_path: Path) -> None:
    data = _committed()
    config = next(c for c in data["configs"] if c["figure"])
    config["figure"]["point"] *= 1.1
    _refused(tmp_path, data, config["sut"], "point", "disagree with its evidence")


def test_a_run_edited_under_its_figure_is_refused(tmp_path: Path) -> None:
    data = _committed()
    data["runs"][0]["metric_value"] *= 2
    _refused(tmp_path, data, "its runs give")


def test_a_speedup_and_a_quality_figure_are_checked_too(tmp_path: Path) -> None:
    data = _committed()
    config = next(c for c in data["configs"] if c["speedup_vs_fp32"])
    config["speedup_vs_fp32"]["low"] = 1.0
    _refused(tmp_path, data, config["sut"], "speedup", "low")
    data = _committed()
    config = next(c for c in data["configs"] if c["quality"] and c["quality"]["change"])
    config["quality"]["value"] += 1
    _refused(tmp_path, data, config["sut"], "quality")


def test_a_bench_output_is_checked_against_its_rounds(tmp_path: Path) -> None:
    data = _committed("vendor_parity-detect")
    entry = data["output"][0]
    next(iter(entry["ratios"].values()))["point"] *= 1.5
    _refused(tmp_path, data, "vendor parity", "point")


def _sweep(root: Path) -> Path:
    """A results folder of two repeat sets of three interleaved Offline runs: ov-fp32 and
    ov-int8, planted figures."""
    for index, (fp32, int8) in enumerate([(100.0, 200.0), (110.0, 230.0), (105.0, 210.0)], 1):
        for sut, value, set_id in (("ov-fp32", fp32, "a"), ("ov-int8", int8, "b")):
            make_run(root, sut=sut, scenario="Offline", value=value,
                     started_at=T0 + 60 * index + (sut == "ov-int8"),
                     repeat=(index, 3, set_id), disturbed=sut == "ov-int8" and index == 2)
    return root


def _record(monkeypatch: pytest.MonkeyPatch, folder: Path, results: Path, *extra: str
            ) -> int:
    monkeypatch.setattr(result_capture, "commit", lambda *a, **k: dict(COMMIT))
    return results_page.main(["record", str(folder), "--command", "python run.py sweep x",
                              "--results", str(results), "--output",
                              str(results / "PAGE.md"), *extra])


def test_the_tables_of_a_small_recorded_sweep(tmp_path: Path, monkeypatch) -> None:
    folder, results = _sweep(tmp_path / "made"), tmp_path / "recorded"
    assert _record(monkeypatch, folder, results, "--title", "A made-up sweep") == 0
    text = (results / "made.json").read_text()
    page = (results / "PAGE.md").read_text()
    assert "### A made-up sweep\n" in page and "python run.py sweep x" in page
    assert "[`benchmarks/made.json`](benchmarks/made.json)" in page
    assert "Commit `0000000` (made at: a test's)." in page
    assert page.count("## ") - page.count("### ") == 1  # one machine
    rows = {line.split(" | ")[3]: line for line in page.splitlines()
            if line.startswith("| resnet50 | Offline | 8 |") and "/s [" in line}
    assert "105.0/s [" in rows["ov-fp32"] and "210.0/s [" in rows["ov-int8"]
    assert "| yes (1 of 3) |" in rows["ov-int8"] and "| no |" in rows["ov-fp32"]
    speedup = [line for line in page.splitlines() if "| ov-int8 | ov-fp32 |" in line]
    assert len(speedup) == 1 and "2.00x [" in speedup[0]  # the median of the paired ratios
    assert "The report makes 1 speedup verdict" not in page  # one verdict: 95% said so
    assert "Speedup intervals are 95%" in page
    # recording the same folder again changes nothing
    assert _record(monkeypatch, folder, results, "--title", "A made-up sweep") == 0
    assert (results / "made.json").read_text() == text
    assert (results / "PAGE.md").read_text() == page


def test_a_folder_its_logs_do_not_back_is_refused(tmp_path: Path, monkeypatch, caplog) -> None:
    folder, results = _sweep(tmp_path / "made"), tmp_path / "recorded"
    record = next(folder.rglob("results.json"))
    data = json.loads(record.read_text())
    data["summary"]["samples_per_second"] *= 1.5
    data["summary"]["metric_value"] = data["summary"]["samples_per_second"]
    record.write_text(json.dumps(data))
    assert _record(monkeypatch, folder, results) == 2
    assert not results.exists() or not list(results.iterdir())
    refused = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(refused) == 1 and "not recorded" in refused[0] and "\n" not in refused[0]
    assert "disagrees with LoadGen's logs" in refused[0]


def test_a_result_needs_the_command_that_made_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(result_capture, "commit", lambda *a, **k: dict(COMMIT))
    folder = _sweep(tmp_path / "made")
    assert results_page.main(["record", str(folder), "--results", str(tmp_path / "r")]) == 2


def test_check_says_whether_the_page_is_current(tmp_path: Path) -> None:
    results = tmp_path / "recorded"
    results.mkdir()
    shutil.copy(ROOT / "benchmarks" / "nms_ops.json", results)
    page = tmp_path / "PAGE.md"
    arguments = ["--results", str(results), "--output", str(page)]
    assert results_page.main([*arguments, "--check"]) == 1
    assert results_page.main(arguments) == 0
    assert results_page.main([*arguments, "--check"]) == 0
    assert "git show ab1032b:BENCHMARKS.md" in page.read_text()
