"""The characterization report: numbers equal the LoadGen logs, HTML renders in Chromium,
folders of several machines merge; the intervals, verdicts and disturbed runs of hand-made
repeats reach report.csv, report.md and report.html."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from quantmark.report.characterize import Study, pareto_front
from quantmark.report.percentiles import why_not
from quantmark.report.sweep_report import report_csv, to_html, to_markdown
from tests.conftest import run_cli
from tests.report.synthetic import config, study

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync")


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def loadgen_summary(run_dir: Path) -> dict[str, str]:
    """LoadGen's own human-readable summary, ``key : value`` lines."""
    values = {}
    for line in (run_dir / "mlperf_log_summary.txt").read_text().splitlines():
        match = re.match(r"^[\s*]*(.+?)\s*:\s*(.+)$", line)
        if match:
            values.setdefault(match[1], match[2].strip())
    return values


def classes(accuracy_log: Path) -> dict[int, float]:
    """Each sample's class as the SUT answered it (first response), decoded here from the
    raw log, independently of the report's code."""
    out: dict[int, float] = {}
    for entry in json.loads(accuracy_log.read_text()):
        out.setdefault(entry["qsl_idx"], struct.unpack("<f", bytes.fromhex(entry["data"]))[0])
    return out


def test_pareto_front_keeps_only_points_nothing_beats():
    points = [(5.0, 70.0), (3.0, 69.0), (4.0, 71.0), (6.0, 71.0), (2.0, 60.0), (3.0, 65.0)]
    assert pareto_front(points) == [4, 1, 2]


@pytest.mark.slow
def test_report_numbers_equal_the_cells_loadgen_logs(small_sweep):
    _, out = small_sweep
    runs = read_csv(out / "runs.csv")
    assert len(runs) == 6
    by_config = {}
    for row in runs:
        log = loadgen_summary(Path(row["path"]))
        assert row["validity"] == log["Result is"]
        if row["scenario"] == "Offline":  # the summary prints 2 decimals
            assert float(row["metric_value"]) == pytest.approx(
                float(log["Samples per second"]), abs=0.006)
        else:
            assert int(float(row["metric_value"])) == int(
                log["Early stopping 90.0th percentile estimate"])
        for key, name in (("p50_latency_ns", "50.00"), ("p90_latency_ns", "90.00"),
                          ("p99.9_latency_ns", "99.90")):
            # blank for Offline, and where it would be the slowest query (report.percentiles)
            if why_not(row["scenario"], name, int(row["queries"])):
                assert row[key] == ""
            else:
                assert int(row[key]) == int(log[f"{name} percentile latency (ns)"])
        by_config[(row["sut"], row["scenario"], row["batch_size"])] = row
    report = read_csv(out / "report.csv")
    assert len(report) == 6
    for row in report:
        raw = by_config[(row["sut"], row["scenario"], row["batch_size"])]
        assert row["n"] == "1"
        assert float(row["metric_mean"]) == float(raw["metric_value"])  # one run: its value
        if raw["p90_latency_ns"]:  # one run: the median is its value
            assert float(row["p90_ms_median"]) * 1e6 == pytest.approx(
                int(raw["p90_latency_ns"]), abs=1e-3)
        else:
            assert row["p90_ms_median"] == ""
        fp32 = by_config[("ort-fp32", row["scenario"], row["batch_size"])]
        mine, theirs = float(raw["metric_value"]), float(fp32["metric_value"])
        expected = theirs / mine if row["metric_unit"] == "ns" else mine / theirs
        assert float(row["speedup_vs_fp32"]) == pytest.approx(expected, rel=1e-9)
        assert float(row["speedup_vs_best_fp32"]) == pytest.approx(expected, rel=1e-9)
        assert row["executed_precision"] == ("int8" if row["sut"] == "ort-int8" else "fp32")
        assert float(row["model_size_mb"]) > 1 and float(row["load_s"]) > 0
        assert float(row["peak_rss_mb"]) > 100
    # accuracy: top-1 as accuracy.txt says, agreement recomputed from the raw logs
    accuracy_dirs = {sut: next((out / "runs/efficientnet-lite0" / sut / "accuracy").rglob(
        "accuracy.txt")).parent for sut in ("ort-fp32", "ort-int8")}
    top1 = {sut: float(re.match(r"accuracy=([\d.]+)%", (d / "accuracy.txt").read_text())[1])
            for sut, d in accuracy_dirs.items()}
    fp32_classes = classes(accuracy_dirs["ort-fp32"] / "mlperf_log_accuracy.json")
    int8_classes = classes(accuracy_dirs["ort-int8"] / "mlperf_log_accuracy.json")
    agreement = 100 * sum(int8_classes[i] == fp32_classes[i] for i in fp32_classes) / len(
        fp32_classes)
    for row in report:
        assert float(row["top1"]) == pytest.approx(top1[row["sut"]], abs=5e-4)
        assert float(row["top1_change_vs_fp32_pts"]) == pytest.approx(
            top1[row["sut"]] - top1["ort-fp32"], abs=1e-3)
        expected = 100.0 if row["sut"] == "ort-fp32" else agreement
        assert float(row["agreement_with_fp32_pct"]) == pytest.approx(expected)
    assert 80 < agreement < 100  # INT8 changes some answers, not most
    # the batch-size scan: the best Offline batch is the faster of the two runs
    offline = {b: float(by_config[("ort-int8", "Offline", b)]["metric_value"]) for b in "18"}
    markdown = (out / "report.md").read_text()
    best = max(offline, key=offline.get)
    assert re.search(rf"\| \S+ \| efficientnet-lite0 \| ort-int8 \| 1,8 \| {best} \|", markdown)
    assert "| trt-fp16 | accuracy | 8 | unavailable | " in markdown.replace(
        "efficientnet-lite0 | ", "")


@pytest.mark.slow
def test_report_html_is_self_contained_and_renders_in_chromium(small_sweep, tmp_path):
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("CI must have Debian's chromium (.ci/run installs it)")
        pytest.skip("no chromium: apt-get install chromium")
    _, out = small_sweep
    page = (out / "report.html").read_text()
    assert not re.search(r"(src|href)=['\"](?!data:)", page)  # nothing to fetch
    figures = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert {name.split("-")[0] for name in figures} == {"throughput", "speedup", "latency",
                                                         "pareto", "batch"}
    assert page.count("<img ") == len(figures)
    # a copy that records, once loaded, how many images the browser decoded
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", "<script>window.addEventListener('load', () => "
                                  "document.body.dataset.decoded = [...document.images].filter("
                                  "i => i.complete && i.naturalWidth > 0).length);</script>"
                                  "</body>"))
    common = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*common, "--dump-dom", probe.as_uri()], capture_output=True,
                         text=True, timeout=120)
    assert f'data-decoded="{len(figures)}"' in dom.stdout, dom.stderr[-2000:]
    shot = tmp_path / "report.png"
    subprocess.run([*common, f"--screenshot={shot}", "--window-size=1400,3000",
                    (out / "report.html").as_uri()], capture_output=True, timeout=120,
                   check=True)
    image = Image.open(shot).convert("RGB")
    assert image.size == (1400, 3000)
    colors = image.getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 200  # tables and figures, not a blank page


@pytest.mark.slow
def test_folders_of_several_machines_merge_into_one_report(small_sweep, tmp_path):
    _, out = small_sweep
    pi = tmp_path / "pi"
    shutil.copytree(out, pi, ignore=shutil.ignore_patterns("report.*", "runs.csv", "figures"))
    for results in pi.rglob("results.json"):
        data = json.loads(results.read_text())
        data["machine"] = {**data["machine"], "hostname": "raspberrypi", "arch": "aarch64"}
        results.write_text(json.dumps(data))
    proc = run_cli("report", str(out), str(pi))
    assert proc.returncode == 2 and "--output" in proc.stderr
    merged = tmp_path / "merged"
    proc = run_cli("report", str(out), str(pi), "--output", str(merged))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_csv(merged / "report.csv")
    systems = {row["system"] for row in rows}
    assert len(systems) == 2 and "raspberrypi" in systems
    assert len(rows) == 12
    # each machine is compared with its own FP32, never the other's
    for row in rows:
        if row["sut"] == "ort-fp32":
            assert float(row["speedup_vs_fp32"]) == 1.0
    assert len(list((merged / "figures").glob("throughput-raspberrypi-*.png"))) == 1
    assert "aarch64" in (merged / "report.md").read_text()


@pytest.mark.slow
def test_each_sut_is_compared_with_the_fp32_baseline_its_run_recorded(small_sweep, tmp_path):
    """GPU SUTs are compared with their framework's FP32 on the GPU (``ort-trt-int8`` with
    ``ort-cuda-fp32``), which the runner records; the CPU runs relabelled as GPU ones must give
    the same ratios as before."""
    _, out = small_sweep
    assert {json.loads(p.read_text())["sut"]["fp32_baseline"]
            for p in out.rglob("results.json")} == {"ort-fp32"}
    before = {(r["sut"], r["scenario"], r["batch_size"]): r
              for r in read_csv(out / "report.csv")}
    gpu = tmp_path / "gpu"
    shutil.copytree(out, gpu, ignore=shutil.ignore_patterns("report.*", "runs.csv", "figures",
                                                            "sweep.json"))
    renamed = {"ort-fp32": "ort-cuda-fp32", "ort-int8": "ort-trt-int8"}
    for results in gpu.rglob("results.json"):
        data = json.loads(results.read_text())
        name = renamed[data["config"]["sut"]]
        data["config"]["sut"] = data["sut"]["name"] = name
        data["sut"]["fp32_baseline"] = "ort-cuda-fp32"
        results.write_text(json.dumps(data))
    proc = run_cli("report", str(gpu), "--output", str(tmp_path / "report"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_csv(tmp_path / "report" / "report.csv")
    assert {r["sut"] for r in rows} == set(renamed.values())
    for row in rows:
        old = before[({v: k for k, v in renamed.items()}[row["sut"]], row["scenario"],
                      row["batch_size"])]
        for column in ("speedup_vs_fp32", "speedup_vs_best_fp32", "top1_change_vs_fp32_pts",
                       "agreement_with_fp32_pct"):
            assert row[column] and float(row[column]) == pytest.approx(float(old[column]))
        assert row["best_fp32"] == "ort-cuda-fp32"


def _synthetic_report() -> tuple[Study, dict[str, dict[str, str]], str]:
    """FP32 and two INT8 SUTs, three paired repeats each: ort-int8 clearly faster, ov-int8
    within the noise and disturbed by another process in one repeat."""
    fp32 = [100.0, 110.0, 104.0]
    noisy = config("ov-int8", [95.0, 118.0, 104.0])
    noisy.runs[1].results.interference = {"disturbed": True,
                                          "why": ["other processes used 0.93 of 2 cores"]}
    made = study(config("ort-fp32", fp32), config("ort-int8", [200.0, 221.0, 207.0]),
                 config("ov-fp32", fp32), noisy)
    rows = {row["sut"]: row for row in csv.DictReader(io.StringIO(report_csv(made)))}
    return made, rows, to_markdown(made, [])


def test_report_csv_carries_the_intervals_verdicts_and_disturbed_runs():
    made, rows, _ = _synthetic_report()
    int8, noisy = made.configs[1], made.configs[3]
    ratio = int8.derived["speedup_vs_fp32_ratio"]
    row = rows["ort-int8"]
    assert float(row["metric_median"]) == 207.0
    assert float(row["metric_mean"]) == pytest.approx((200 + 221 + 207) / 3)
    interval = int8.derived["metric_interval"]
    assert (float(row["metric_low"]), float(row["metric_high"])) == (interval.low, interval.high)
    assert row["metric_interval_method"] == "t-log"
    assert (float(row["speedup_vs_fp32"]), float(row["speedup_vs_fp32_low"]),
            float(row["speedup_vs_fp32_high"])) == (ratio.point, ratio.low, ratio.high)
    assert (row["speedup_vs_fp32_verdict"], row["speedup_vs_fp32_paired"]) == ("faster", "True")
    assert rows["ov-int8"]["speedup_vs_fp32_verdict"] == "no measurable difference"
    assert rows["ort-fp32"]["speedup_vs_fp32_verdict"] == "baseline"
    assert rows["ort-fp32"]["speedup_vs_fp32_low"] == ""
    assert (rows["ov-int8"]["disturbed_runs"], rows["ov-int8"]["disturbance_checked_runs"],
            rows["ov-int8"]["disturbed_why"]) == ("1", "1", "other processes used 0.93 of 2 cores")
    assert rows["ort-int8"]["disturbed_runs"] == "0"
    assert noisy.derived["disturbed"] == 1


def test_report_md_shows_verdicts_and_marks_and_warns_of_disturbed_runs():
    made, _, markdown = _synthetic_report()
    header = next(line for line in markdown.splitlines() if line.startswith("| SUT |"))
    names = [cell.strip() for cell in header.strip("|").split("|")]
    cells = {}
    for line in markdown.splitlines():
        values = [cell.strip() for cell in line.strip("|").split("|")]
        if line.startswith("| ") and len(values) == len(names) and values[0] != "SUT":
            cells[values[0]] = dict(zip(names, values, strict=True))
    assert set(cells) == {"ort-fp32", "ort-int8", "ov-fp32", "ov-int8 ⚠"}
    ratio = made.configs[1].derived["speedup_vs_fp32_ratio"]
    assert cells["ort-int8"]["× fw FP32"] == ratio.text() and ratio.text().endswith("]")
    assert cells["ov-int8 ⚠"]["× fw FP32"].startswith("no measurable difference (")
    assert cells["ort-fp32"]["× fw FP32"] == "baseline"
    assert cells["ov-int8 ⚠"]["disturbed"] == "yes (1 of 3)"
    assert cells["ort-int8"]["disturbed"] == "-"
    interval = made.configs[1].derived["metric_interval"]
    assert cells["ort-int8"]["official metric"] == (
        f"207.0/s [{interval.low:.1f}, {interval.high:.1f}]")
    warning = [line for line in markdown.splitlines() if "runs disturbed" in line]
    assert len(warning) == 1 and warning[0].startswith("- ov-int8, Offline, batch 1")
    assert "1 of 3 runs disturbed (other processes used 0.93 of 2 cores)" in warning[0]
    assert markdown.index("runs disturbed") < markdown.index("## Machines")
    assert "**Warning: other processes used this machine" in markdown
    page = to_html(made, [])
    assert page.count("runs disturbed (") == 1 and '<td class="bad">yes (1 of 3)</td>' in page


def test_the_console_table_shows_intervals_verdicts_and_disturbed_runs(monkeypatch, tmp_path):
    from rich.console import Console

    from quantmark.commands import report as report_verb
    from quantmark.report import sweep_report

    made, _, _ = _synthetic_report()
    monkeypatch.setattr(sweep_report, "write", lambda folders, output: sweep_report.Written(
        made, []))
    buffer = io.StringIO()
    monkeypatch.setattr(report_verb, "console", Console(file=buffer, width=400, color_system=None))
    report_verb.characterization([str(tmp_path)], tmp_path)
    lines = buffer.getvalue().splitlines()
    header = next(line for line in lines if "┃" in line and "SUT" in line)
    names = [cell.strip() for cell in header.split("┃")[1:-1]]
    rows = {row["SUT"]: row for row in (
        dict(zip(names, [c.strip() for c in line.split("│")[1:-1]], strict=True))
        for line in lines if line.startswith("│"))}
    ratio = made.configs[1].derived["speedup_vs_fp32_ratio"]
    assert rows["ort-int8"]["x fw FP32"] == ratio.text()
    assert rows["ov-int8 ⚠"]["x fw FP32"].startswith("no measurable difference (")
    assert rows["ov-int8 ⚠"]["disturbed"] == "yes (1 of 3)"
    assert rows["ort-int8"]["official metric [95%]"].startswith("207.0/s [")
    warning = [line for line in lines if line.startswith("disturbed: ")]
    assert len(warning) == 1 and "ov-int8, Offline, batch 1" in warning[0]


def test_the_report_states_how_its_verdicts_and_percentiles_are_made():
    made, rows, markdown = _synthetic_report()
    # each int8 against its own FP32 and the other framework's: 4 verdicts at 98.75%
    assert made.verdicts == 4
    assert float(rows["ort-int8"]["speedup_vs_fp32_confidence"]) == pytest.approx(0.9875)
    assert rows["ort-fp32"]["speedup_vs_fp32_confidence"] == ""
    assert "4 speedup verdicts" in markdown and "Bonferroni" in markdown
    assert "p99.9: 1001" in markdown and "None for Offline" in markdown
    assert "(all n runs equal)" in markdown
    cells = [line for line in markdown.splitlines() if line.startswith("| ort-int8 |")]
    assert cells and "| n/a |" in cells[0]  # Offline: no percentile


def test_an_until_stable_set_reads_with_its_stopping_interval():
    from quantmark.report.stopping import METHOD, look

    values = [40.0, 40.1, 39.9, 40.05]
    stable = config("ort-fp32", values)
    for r in stable.runs:  # what run_set records: the target and the planned runs
        r.results.config["until_stable"] = 2.0
        r.results.repeat = {"of": 3}
    made = study(stable)
    assert stable.derived["metric_interval"] == look(values, 2.0, 3).interval
    assert stable.derived["metric_interval"].method == METHOD
    assert stable.derived["samples_per_s_interval"] == stable.derived["metric_interval"]
    assert "Sets run with --until-stable" in to_markdown(made, [])
