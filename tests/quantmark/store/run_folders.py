"""Run folders for the store's tests, made from a real run's results.json.

The template is a SingleStream (or Offline) run quantmark wrote into docs/example-sweep; each
made run keeps every field of it and changes only what the test sets (its figure, validity,
repeat set, start, a setting), in the MLPerf layout a real run is written in.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from tests.conftest import ROOT

EXAMPLE_SWEEP = ROOT / "docs" / "example-sweep"
_TEMPLATES = {
    scenario: EXAMPLE_SWEEP / "runs" / "resnet50" / "ov-bf16" / f"{scenario}-b{batch}-r1" /
    "vm-ov-bf16" / "resnet50" / scenario / "performance" / "run_1" / "results.json"
    for scenario, batch in (("SingleStream", 1), ("Offline", 8))}
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
    data["summary"]["validity"] = validity
    if scenario == "SingleStream":
        data["summary"]["percentiles_ns"]["90.00"] = int(value * 1e6)
    else:
        data["summary"]["samples_per_second"] = value
        data["summary"]["metric_value"] = value
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
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(data, indent=1))
    return folder
