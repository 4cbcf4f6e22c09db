"""Runs of one SUT with other ``--sut-option`` values are other configurations: their own rows,
their own medians, compared with the FP32 run of the same options."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from quantmark.report.characterize import load
from quantmark.report.sweep_report import report_csv
from tests.report.loadgen_runs import copy_run, loadgen_run


def _run(source: Path, folder: Path, sut: str, options: dict[str, str]) -> None:
    """A sweep cell's run of ``sut`` with ``options``: LoadGen's own logs, a results.json."""
    copy_run(source, folder)
    (folder / "results.json").write_text(json.dumps({
        "config": {"sut": sut, "model": "mobilenetv2", "batch_size": 8, "mode": "performance",
                   "sut_options": options},
        "sut": {"name": sut, "fp32_baseline": "ov-fp32", "executed_precision": "int8"},
        "machine": {"hostname": "box"}, "settings": {"mode": "quick"}, "model": {}}))


def test_each_option_value_is_its_own_row_with_its_own_baseline(tmp_path):
    source = loadgen_run(tmp_path / "made", "Offline")
    sweep = tmp_path / "sweep"
    for sut in ("ov-fp32", "ov-int8"):
        for api in ("sync", "async"):
            _run(source, sweep / "runs" / f"{sut}+ov_api={api}" / "run_1", sut, {"ov_api": api})
    _run(source, sweep / "runs" / "ov-int8" / "run_1", "ov-int8", {})  # no options given
    (sweep / "sweep.json").write_text(json.dumps({"schema": 1, "cells": {"x": {
        "model": "mobilenetv2", "sut": "ov-int8", "scenario": "Offline", "batch_size": 1,
        "mode": "performance", "sut_options": {"ov_api": "async"}, "status": "failed",
        "message": "boom"}}}))

    study = load([sweep])
    by_sut = {c.sut: c for c in study.configs}
    assert sorted(by_sut) == ["ov-fp32 ov_api=async", "ov-fp32 ov_api=sync", "ov-int8",
                              "ov-int8 ov_api=async", "ov-int8 ov_api=sync"]
    assert all(len(c.runs) == 1 for c in study.configs)  # never pooled into one median
    variant = by_sut["ov-int8 ov_api=async"]
    assert (variant.family, variant.variant) == ("ov", "int8")
    assert variant.derived["fp32_baseline"] == "ov-fp32 ov_api=async"
    assert variant.derived["speedup_vs_fp32"] is not None
    assert by_sut["ov-int8"].derived["fp32_baseline"] == "ov-fp32"
    assert [e.sut for e in study.explained] == ["ov-int8 ov_api=async"]
    rows = list(csv.DictReader(io.StringIO(report_csv(study))))
    assert sorted(r["sut"] for r in rows) == sorted(by_sut)
