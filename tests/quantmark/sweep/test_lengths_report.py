"""The report of a sweep over a text model's sequence lengths (``run.py sweep --seq-lens``), from
hand-made runs with known samples/s: INT8's speedup over the FP32 of the same length is a row
per length with its paired interval, each length its own configuration (a text run's dataset
fingerprint differs by length: still one group), its accuracy under the text task's metric."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

COSINE = {"key": "cosine", "name": "cosine to FP32", "unit": "%", "higher_is_better": True}
# samples/s per repeat at each length (0: the text task's default, 128): INT8 gains more as
# the sequences grow
TEXT_SPEEDS = {
    ("ort-fp32", 16): [400.0, 410.0, 395.0], ("ort-int8dyn", 16): [440.0, 452.0, 433.0],
    ("ort-fp32", 32): [300.0, 306.0, 297.0], ("ort-int8dyn", 32): [450.0, 460.0, 444.0],
    ("ort-fp32", 0): [100.0, 103.0, 98.0], ("ort-int8dyn", 0): [200.0, 207.0, 196.0],
}


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory) -> Path:
    from tests.report.loadgen_runs import loadgen_run

    return loadgen_run(tmp_path_factory.mktemp("loadgen") / "run", "Offline")


def _text_results(sut: str, seq_len: int, mode: str = "performance",
                  padding: str = "") -> dict:
    """A text run's results.json as the runner writes it: its length stated by the model
    record, its dataset fingerprinted over its token samples (so it differs by length)."""
    stated = seq_len or 128
    return {
        "config": {"sut": sut, "model": "enc", "model_path": "/models/enc/model.onnx",
                   "batch_size": 8, "mode": mode, "input_size": "", "seq_len": seq_len,
                   "padding": padding, "sut_options": {}},
        "sut": {"name": sut, "fp32_baseline": "ort-fp32",
                "executed_precision": sut.split("-")[1]},
        "model": {"input": {"seq_len": stated, "padding": padding or "fixed"}},
        "task": {"name": "text", "metric": COSINE},
        "dataset": {"path": "/python/pydoc_data/topics.py", "builtin": True,
                    "fingerprint": f"tokens-{stated}-{padding}"},
        "machine": {"hostname": "box"}, "settings": {"mode": "quick"},
        **({"accuracy": {"cosine": 100.0 if sut == "ort-fp32" else 99.5}}
           if mode == "accuracy" else {})}


def _text_run(source: Path, folder: Path, results: dict, value: float) -> None:
    """LoadGen's logs of a run, its samples/s set to ``value``, and its results.json."""
    from tests.report.loadgen_runs import copy_run, relog

    copy_run(source, folder)
    relog(folder, result_samples_per_second=value)  # the detail log and the summary
    (folder / "results.json").write_text(json.dumps(results))


def _seq_len_sweep(source: Path, root: Path) -> Path:
    """A sweep folder as ``run.py sweep --seq-lens 16,32,128`` leaves it, plus one cell at
    dynamic padding (its own configuration, never pooled with fixed)."""
    cells = {}
    for (sut, seq_len), values in TEXT_SPEEDS.items():
        model = "enc" + (f"+seq={seq_len}" if seq_len else "")
        _text_run(source, root / f"runs/{model}/{sut}/accuracy/run",
                  _text_results(sut, seq_len, "accuracy"), 10.0)
        for repeat, value in enumerate(values, start=1):
            cell = f"{model}/{sut}/Offline-b8-r{repeat}"
            _text_run(source, root / f"runs/{cell}/run_1", _text_results(sut, seq_len), value)
            cells[cell] = {"model": "enc", "sut": sut, "scenario": "Offline", "batch_size": 8,
                           "repeat": repeat, "mode": "performance", "seq_len": seq_len,
                           "status": "ok", "run_dir": f"runs/{cell}/run_1"}
    _text_run(source, root / "dynamic/ort-int8dyn/run_1",
              _text_results("ort-int8dyn", 16, padding="dynamic"), 900.0)
    (root / "sweep.json").write_text(json.dumps({"schema": 1, "cells": cells}))
    return root


def test_a_seq_len_sweep_reports_int8_speedup_by_length_with_intervals(offline_run, tmp_path):
    from quantmark.report.characterize import load
    from quantmark.report.stats import family_confidence, speedup
    from quantmark.report.sweep_report import write
    from quantmark.report.workload_tables import seq_len_groups, seq_len_rows, size_groups

    root = _seq_len_sweep(offline_run, tmp_path / "sweep")
    study = load([root])
    assert sorted({c.model for c in study.configs}) == [
        "enc", "enc seq=16", "enc seq=16 padding=dynamic", "enc seq=32"]
    assert size_groups(study) == {}  # text runs have no image size
    assert list(seq_len_groups(study)) == [("box", "enc", "built-in", "Offline", 8)]
    rows = seq_len_rows(study)
    assert [(r[5], r[6]) for r in rows] == [("ort-int8dyn", "16"), ("ort-int8dyn", "32"),
                                            ("ort-int8dyn", "128")]
    confidence = family_confidence(study.verdicts)
    for row, seq_len in zip(rows, (16, 32, 0), strict=True):
        ratio = speedup(TEXT_SPEEDS[("ort-fp32", seq_len)],
                        TEXT_SPEEDS[("ort-int8dyn", seq_len)], higher_is_better=True,
                        paired=True, confidence=confidence)
        assert row[7].startswith(f"{ratio.point:.2f}x [{ratio.low:.2f}, {ratio.high:.2f}]")
        assert row[8] == ratio.verdict
    written = write([root], tmp_path / "report")
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "## Speedup over FP32 by sequence length" in markdown
    assert "| sequence length | × fw FP32 | verdict | Δ cosine to FP32 vs fw FP32 |" in markdown
    assert "paired sentence by sentence" in markdown
    assert "## Speedup over FP32 by input size" not in markdown
    # each length's own section, its accuracy under the text task's metric, never top-1
    assert "## enc seq=32 — Offline — box" in markdown
    assert "| cosine to FP32 % | Δ cosine to FP32 vs fw FP32 |" in markdown
    assert "top-1" not in markdown
    found = list(csv.DictReader(io.StringIO(
        (tmp_path / "report" / "speedup_by_seq_len.csv").read_text())))
    assert [(r["sut"], r["seq_len"], r["padding"]) for r in found] == [
        ("ort-int8dyn", "16", "fixed"), ("ort-int8dyn", "32", "fixed"),
        ("ort-int8dyn", "128", "fixed")]
    assert float(found[1]["cosine_change_pts"]) == pytest.approx(-0.5)
    figure = tmp_path / "report" / "figures" / "speedup-by-seq-len-box-enc-built-in-Offline-b8.png"
    assert figure in written.files
