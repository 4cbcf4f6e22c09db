"""Run folders for the store's tests, made from a real run's results.json and LoadGen logs.

The template is a SingleStream (or Offline) run quantmark wrote into docs/example-sweep; each
made run keeps every field of it and changes only what the test sets (its figure, validity,
repeat set, start, a setting), in the MLPerf layout a real run is written in. Its LoadGen logs
are the template's, rewritten to say the same figure, validity and start (``relog``), and its
record's summary is read from them as the runner reads it: the store checks the two agree.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

from quantmark.report.loadgen_log import ACCURACY_FILE, DETAIL_FILE, SUMMARY_FILE, summarize_file
from tests.conftest import ROOT
from tests.report.loadgen_runs import logged_at, relog

EXAMPLE_SWEEP = ROOT / "docs" / "example-sweep"
_TEMPLATES = {
    scenario: EXAMPLE_SWEEP / "runs" / "resnet50" / "ov-bf16" / f"{scenario}-b{batch}-r1" /
    "vm-ov-bf16" / "resnet50" / scenario / "performance" / "run_1" / "results.json"
    for scenario, batch in (("SingleStream", 1), ("Offline", 8))}
#: a real accuracy run's folder (its logs: LoadGen's AccuracyOnly mode)
ACCURACY_RUN = (EXAMPLE_SWEEP / "runs" / "resnet50" / "ov-bf16" / "accuracy" / "vm-ov-bf16" /
                "resnet50" / "Offline" / "accuracy")
T0 = 1_795_295_500.0  # about the template's LoadGen start: 2026-11-21T21:11:40Z


def template(scenario: str = "SingleStream") -> dict[str, Any]:
    return json.loads(_TEMPLATES[scenario].read_text())


def make_run(root: Path, *, model: str = "resnet50", sut: str = "ov-bf16",
             scenario: str = "SingleStream", value: float = 40.0, validity: str = "VALID",
             started_at: float = T0, repeat: tuple[int, int, str] | None = None,
             disturbed: bool | None = None, threads: int = 0, host: str = "vm",
             version: str = "0.1.0", openvino: str = "2026.4.1") -> Path:
    """A run folder under ``root`` whose figure is ``value`` (ms for SingleStream: the p90;
    samples/s for Offline); ``repeat`` = (index, of, set id)."""
    data = copy.deepcopy(template(scenario))
    data["config"].update(model=model, sut=sut, scenario=scenario, threads=threads)
    data["times"]["loadgen_started_at"] = started_at
    data["machine"]["hostname"] = host
    data["software"].update(quantmark=version, openvino=openvino)
    index = 1
    if repeat is not None:
        index = repeat[0]
        data["repeat"] = {"index": repeat[0], "of": repeat[1], "set": repeat[2]}
    if disturbed is not None:
        data["interference"] = {"disturbed": disturbed, "why": ["test"] if disturbed else []}
    folder = (root / f"{host}-{sut}" / model / scenario / "performance" / f"run_{index}")
    figure = ({"result_90.00_percentile_latency_ns": int(value * 1e6)}
              if scenario == "SingleStream" else {"result_samples_per_second": value})
    return write_run(folder, data, _TEMPLATES[scenario].parent, **figure,
                     result_validity=validity, result_min_duration_met=validity == "VALID")


def write_run(folder: Path, data: dict[str, Any], logs: Path, **logged: Any) -> Path:
    """``folder`` holding the LoadGen logs of the run folder ``logs``, rewritten to say
    ``logged`` (detail key -> value) and to start when ``data`` says (``relog``), and
    ``data`` as its results.json with the summary read from those logs."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in (DETAIL_FILE, SUMMARY_FILE, ACCURACY_FILE):
        shutil.copyfile(logs / name, folder / name)
    started = data.get("times", {}).get("loadgen_started_at")
    if started is not None:
        logged["test_datetime"] = logged_at(started)
    relog(folder, **logged)
    data["summary"] = summarize_file(folder / DETAIL_FILE).to_dict()
    (folder / "results.json").write_text(json.dumps(data, indent=1))
    return folder
