"""Real LoadGen runs over a trivial SUT, for the report tests: logs exactly as LoadGen writes
them, in seconds. Also a reader of the detail log that is independent of the report's code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.conftest import run_python

PROGRAM = """
import os, time, numpy as np, mlperf_loadgen as lg
out = {out!r}
os.makedirs(out, exist_ok=True)
buf = np.array([3.0], np.float32)
def issue(ids, idx):
    time.sleep(2e-5 * len(ids))
    a = buf.__array_interface__["data"][0]
    lg.QuerySamplesComplete([lg.QuerySampleResponse(i, a, 4) for i in ids])
sut = lg.ConstructFastSUT(issue, lambda: None)
qsl = lg.ConstructQSL(64, 64, lambda x: None, lambda x: None)
s = lg.TestSettings()
s.scenario = lg.TestScenario.{scenario}
s.mode = lg.TestMode.{mode}
s.min_duration_ms = 500
s.min_query_count = {min_queries}
s.single_stream_expected_latency_ns = 100000
s.multi_stream_expected_latency_ns = 100000
s.offline_expected_qps = 100000
s.server_target_qps = 1000
s.server_target_latency_ns = {server_bound_ns}
log = lg.LogSettings()
log.log_output.outdir = out
log.log_output.copy_summary_to_stdout = False
lg.StartTestWithLogSettings(sut, qsl, s, log)
"""

MIN_QUERIES = {"SingleStream": 64, "MultiStream": 662, "Server": 700, "Offline": 1}


def loadgen_run(out: Path, scenario: str, mode: str = "PerformanceOnly",
                server_bound_ns: int = 2_000_000_000) -> Path:
    """LoadGen over a trivial SUT into ``out``. The Server bound is loose by default so a
    stall of a shared machine cannot make the run INVALID; a tight one makes it INVALID."""
    code = PROGRAM.format(out=str(out), scenario=scenario, mode=mode,
                          min_queries=MIN_QUERIES[scenario], server_bound_ns=server_bound_ns)
    proc = run_python(code, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return out


def copy_run(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def write_results(folder: Path, **config: Any) -> dict[str, Any]:
    """A results.json as the runner writes it, with the fields the percentile table reads."""
    results = {
        "system_id": "testbox",
        "config": {"sut": config["sut"], "model": config["model"],
                   "scenario": config["scenario"], "mode": config.get("mode", "performance")},
        "sut": {"executed_precision": config["executed"]},
        "settings": {"mode": "quick"},
        "accuracy": {"top1": config["top1"]},
        "machine": {"thermal": {"throttled": False}},
    }
    (folder / "results.json").write_text(json.dumps(results))
    return results


def detail_values(folder: Path) -> dict[str, Any]:
    """Key -> first value of the detail log, read here without the report's code."""
    values: dict[str, Any] = {}
    for line in (folder / "mlperf_log_detail.txt").read_text().splitlines():
        if line.startswith(":::MLLOG "):
            entry = json.loads(line[len(":::MLLOG "):])
            values.setdefault(entry["key"], entry["value"])
    return values


def cut_before(path: Path, key: str, extra: int = 0) -> None:
    """Truncate ``path`` at the start of the line holding ``key`` (plus ``extra`` bytes of
    it: a cut inside the line)."""
    text = path.read_text()
    start = text.index(f'{{"key": "{key}"') - len(":::MLLOG ")
    path.write_text(text[:start + extra])


#: the summary's label of a detail key it prints (its results section and Additional Stats)
SUMMARY_LABELS = {
    "result_validity": "Result is",
    "result_samples_per_second": "Samples per second",
    "result_completed_samples_per_sec": "Completed samples per second",
    "result_min_duration_met": "Min duration satisfied",
    **{f"result_{p}_percentile_latency_ns": f"{p} percentile latency (ns)"
       for p in ("50.00", "90.00", "95.00", "97.00", "99.00", "99.90")},
}


def _summary_value(value: Any) -> str:
    if isinstance(value, bool):
        return "Yes" if value else "NO"
    return str(value)


def relog(folder: Path, **values: Any) -> None:
    """Rewrite a run's LoadGen logs as if LoadGen had logged ``values`` (detail key -> value):
    the first line of each key in the detail log, and the summary's lines that print it (a
    percentile's headline too), so the two logs agree as LoadGen's do. A test's known figure,
    in logs that say it."""
    detail = folder / "mlperf_log_detail.txt"
    lines, left = [], dict(values)
    for line in detail.read_text().split("\n"):
        if line.startswith(":::MLLOG "):
            entry = json.loads(line[len(":::MLLOG "):])
            if entry["key"] in left:
                entry["value"] = left.pop(entry["key"])
                line = ":::MLLOG " + json.dumps(entry)
        lines.append(line)
    assert not left, f"no such keys in the detail log: {sorted(left)}"
    detail.write_text("\n".join(lines))
    summary = folder / "mlperf_log_summary.txt"
    if not summary.is_file():
        return
    labels = {label: _summary_value(values[key]) for key, label in SUMMARY_LABELS.items()
              if key in values}
    for key, value in values.items():  # the headline: "90.0th percentile latency (ns)"
        if key.startswith("result_") and "_percentile_" in key:
            percent = float(key.split("_")[1])
            labels[f"{percent:.1f}th percentile latency (ns)"] = str(value)
    out = []
    for line in summary.read_text().split("\n"):
        label, colon, _ = line.partition(":")
        if colon and label.strip() in labels:
            line = f"{label}: {labels[label.strip()]}"
        out.append(line)
    summary.write_text("\n".join(out))


def logged_at(epoch_s: float) -> str:
    """``test_datetime`` as LoadGen logs the second a test began."""
    from datetime import datetime, timezone

    return datetime.fromtimestamp(epoch_s, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
