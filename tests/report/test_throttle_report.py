"""The report flags configurations whose board throttled during a run, and only those."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

from quantmark.ground.board import parse_throttled, throttling_verdict
from quantmark.report.sweep_report import write

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs/example-batch-scan/runs/mobilenetv2"
RUN = "{sut}/Offline-b{batch}-r1/vm-{sut}/mobilenetv2/Offline/performance/run_1"


def snapshot(raw: str, temperature: float) -> dict:
    return {"time": 0.0, "temperature_c": temperature, "thermal_zone": "cpu-thermal",
            "cur_freq_khz": 1500000, "throttled": parse_throttled(f"throttled={raw}")}


def copy_run(out: Path, sut: str, batch: int, thermal: dict | None) -> None:
    """A real run's detail log and results.json; ``thermal`` as the runner records it (None:
    a results folder from before the runner took thermal snapshots)."""
    source, target = EXAMPLE / RUN.format(sut=sut, batch=batch), out / RUN.format(sut=sut,
                                                                                   batch=batch)
    target.mkdir(parents=True)
    shutil.copyfile(source / "mlperf_log_detail.txt", target / "mlperf_log_detail.txt")
    results = json.loads((source / "results.json").read_text())
    assert "thermal" not in results["machine"]
    if thermal is not None:
        results["machine"]["thermal"] = thermal
    (target / "results.json").write_text(json.dumps(results))


def thermal(before: dict, after: dict) -> dict:
    return {"before": before, "after": after, **throttling_verdict(before, after)}


def test_a_throttled_configuration_is_flagged_and_warned_about(tmp_path):
    runs = tmp_path / "runs"
    hot = thermal(snapshot("0x0", 71.0), snapshot("0x80008", 82.5))
    cool = thermal(snapshot("0x0", 55.0), snapshot("0x0", 61.0))
    assert hot["throttled"] is True and cool["throttled"] is False
    copy_run(runs, "ort-int8", 1, hot)
    copy_run(runs, "ort-fp32", 1, cool)
    copy_run(runs, "ort-fp32", 32, None)  # an old folder: no thermal record
    out = tmp_path / "report"
    write([runs], out)
    with open(out / "report.csv", newline="") as handle:
        rows = {(r["sut"], r["batch_size"]): r for r in csv.DictReader(handle)}
    assert len(rows) == 3
    int8 = rows[("ort-int8", "1")]
    assert int8["throttled"] == "yes"
    assert "soft temperature limit after the run" in int8["throttling_reasons"]
    assert "soft temperature limit during the run" in int8["throttling_reasons"]
    assert "82.5 °C after the run" in int8["throttling_reasons"]
    assert (rows[("ort-fp32", "1")]["throttled"], rows[("ort-fp32", "1")]["throttling_reasons"]
            ) == ("no", "")
    assert rows[("ort-fp32", "32")]["throttled"] == ""
    markdown = (out / "report.md").read_text()
    warning = [line for line in markdown.splitlines() if "throttled during the run" in line]
    assert len(warning) == 1, warning
    assert "ort-int8, Offline, batch 1" in warning[0]
    assert "soft temperature limit" in warning[0]
    assert "not the board's steady speed" in warning[0]
    assert markdown.index("throttled during the run") < markdown.index("## Machines")
    page = (out / "report.html").read_text()
    assert page.count("throttled during the run") == 1 and "ort-int8, Offline, batch 1" in page


def test_no_warning_when_nothing_throttled(tmp_path):
    runs = tmp_path / "runs"
    copy_run(runs, "ort-fp32", 1, thermal(snapshot("0x0", 55.0), snapshot("0x0", 61.0)))
    copy_run(runs, "ort-int8", 1, None)
    out = tmp_path / "report"
    write([runs], out)
    with open(out / "report.csv", newline="") as handle:
        assert sorted(r["throttled"] for r in csv.DictReader(handle)) == ["", "no"]
    for name in ("report.md", "report.html"):
        assert "throttled during the run" not in (out / name).read_text()
        assert "Warning: the board throttled" not in (out / name).read_text()
