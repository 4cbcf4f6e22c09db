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
