"""A sweep over input sizes and datasets, as results folders: each size and dataset is its own
configuration (never pooled), INT8's speedup over the FP32 of the same size is a row with its
paired interval, the figure is written, and each dataset's accuracy change has its row."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from quantmark.report.characterize import load
from quantmark.report.stats import family_confidence, speedup
from quantmark.report.sweep_report import write
from quantmark.report.workload_tables import csv_texts, dataset_rows, size_groups, size_rows
from tests.report.loadgen_runs import copy_run, loadgen_run, relog
from tests.report.test_accuracy import hexf, write_val_map

# samples/s per repeat: INT8 gains less as the input grows (as it would on a real CPU)
SPEEDS = {
    ("ort-fp32", "64"): [100.0, 104.0, 97.0], ("ort-int8", "64"): [300.0, 306.0, 296.0],
    ("ort-fp32", "128"): [50.0, 52.0, 49.0], ("ort-int8", "128"): [100.0, 103.0, 99.0],
    ("ort-fp32", ""): [20.0, 21.0, 19.5], ("ort-int8", ""): [30.0, 32.0, 29.0],
    ("ov-fp32", "64"): [110.0, 112.0, 108.0], ("ov-int8", "64"): [250.0, 260.0, 240.0],
    ("ov-fp32", "128"): [60.0, 61.0, 59.0], ("ov-int8", "128"): [90.0, 93.0, 91.0],
}


@pytest.fixture(scope="module")
def offline(tmp_path_factory) -> Path:
    return loadgen_run(tmp_path_factory.mktemp("loadgen") / "run", "Offline")


def _results(sut: str, size: str, mode: str = "performance", dataset: str | None = None,
             top1: float | None = None) -> dict[str, Any]:
    height = int(size) if size else 224
    return {
        "config": {"sut": sut, "model": "resnet50", "batch_size": 8, "mode": mode,
                   "input_size": size, "dataset_path": dataset, "sut_options": {}},
        "sut": {"name": sut, "fp32_baseline": sut.split("-")[0] + "-fp32",
                "executed_precision": sut.split("-")[1]},
        "model": {"input": {"height": height, "width": height, "channels": 3}},
        "dataset": {"path": dataset or "/cache/photos", "builtin": dataset is None,
                    "fingerprint": f"fp-{dataset}"},
        "machine": {"hostname": "box"}, "settings": {"mode": "quick"},
        **({"accuracy": {"top1": top1}} if top1 is not None else {})}


def _performance_run(offline: Path, folder: Path, results: dict[str, Any], value: float) -> None:
    """LoadGen's own logs of a run, its samples/s set to ``value``, and its results.json."""
    copy_run(offline, folder)
    relog(folder, result_samples_per_second=value)  # the detail log and the summary
    (folder / "results.json").write_text(json.dumps(results))


def _size_sweep(offline: Path, root: Path) -> Path:
    """A sweep folder as ``run.py sweep --image-sizes 64,128,224`` leaves it: each cell in its
    own folder, its repeat in sweep.json."""
    cells = {}
    for (sut, size), values in SPEEDS.items():
        model = "resnet50" + (f"+size={size}" if size else "")
        for repeat, value in enumerate(values, start=1):
            cell = f"{model}/{sut}/Offline-b8-r{repeat}"
            run_dir = f"runs/{cell}/run_1"
            _performance_run(offline, root / run_dir, _results(sut, size), value)
            cells[cell] = {"model": "resnet50", "sut": sut, "scenario": "Offline",
                           "batch_size": 8, "repeat": repeat, "mode": "performance",
                           "input_size": size, "status": "ok", "run_dir": run_dir}
    cells["resnet50+size=96/ort-int8/Offline-b8-r1"] = {
        "model": "resnet50", "sut": "ort-int8", "scenario": "Offline", "batch_size": 8,
        "repeat": 1, "mode": "performance", "input_size": "96", "status": "failed",
        "message": "boom"}
    (root / "sweep.json").write_text(json.dumps({"schema": 1, "cells": cells}))
    return root


def test_each_size_is_its_own_configuration_compared_with_its_own_fp32(offline, tmp_path):
    study = load([_size_sweep(offline, tmp_path / "sweep")])
    by_key = {(c.model, c.sut): c for c in study.configs}
    assert sorted({model for model, _ in by_key}) == ["resnet50", "resnet50 size=128",
                                                      "resnet50 size=64"]
    assert all(len(c.runs) == 3 for c in study.configs)  # three repeats, never pooled
    assert [e.model for e in study.explained] == ["resnet50 size=96"]
    int8 = by_key[("resnet50 size=64", "ort-int8")]
    assert int8.derived["fp32_baseline"] == "ort-fp32"
    expected = speedup(SPEEDS[("ort-fp32", "64")], SPEEDS[("ort-int8", "64")],
                       higher_is_better=True, paired=True,
                       confidence=family_confidence(study.verdicts))
    assert int8.derived["speedup_vs_fp32_ratio"] == expected
    assert expected.point == pytest.approx(3.0, rel=0.02) and expected.significant


def test_the_speedup_by_size_table_has_a_row_per_sut_and_size_with_its_interval(
        offline, tmp_path):
    study = load([_size_sweep(offline, tmp_path / "sweep")])
    groups = size_groups(study)
    assert list(groups) == [("box", "resnet50", "built-in", "Offline", 8)]
    rows = [(r[5], r[6]) for r in size_rows(study)]
    assert rows == [("ort-int8", "64"), ("ort-int8", "128"), ("ort-int8", "224"),
                    ("ov-int8", "64"), ("ov-int8", "128")]
    (name, text), = csv_texts(study)
    assert name == "speedup_by_size.csv"
    found = {(r["sut"], r["input_height"]): r for r in csv.DictReader(io.StringIO(text))}
    confidence = family_confidence(study.verdicts)
    for (sut, size), fp32 in [(("ort-int8", "64"), "ort-fp32"), (("ort-int8", "128"), "ort-fp32"),
                              (("ort-int8", ""), "ort-fp32"), (("ov-int8", "128"), "ov-fp32")]:
        ratio = speedup(SPEEDS[(fp32, size)], SPEEDS[(sut, size)], higher_is_better=True,
                        paired=True, confidence=confidence)
        row = found[(sut, size or "224")]
        assert float(row["speedup_vs_fp32"]) == pytest.approx(ratio.point)
        assert float(row["speedup_low"]) == pytest.approx(ratio.low)
        assert float(row["speedup_high"]) == pytest.approx(ratio.high)
        assert row["speedup_paired"] == "True" and row["speedup_verdict"] == ratio.verdict
    # INT8 gains less at larger inputs, each point measured against its own size's FP32
    points = [float(found[("ort-int8", s)]["speedup_vs_fp32"]) for s in ("64", "128", "224")]
    assert points[0] > points[1] > points[2] > 1


def test_the_report_writes_the_table_and_the_figure(offline, tmp_path):
    written = write([_size_sweep(offline, tmp_path / "sweep")], tmp_path / "report")
    figure = tmp_path / "report" / "figures" / \
        "speedup-by-size-box-resnet50-built-in-Offline-b8.png"
    assert figure in written.files and figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "## Speedup over FP32 by input size" in markdown
    assert "| box | resnet50 | built-in | Offline | 8 | ort-int8 | 64 | 3.0" in markdown
    assert "## Accuracy change by dataset" not in markdown  # one dataset
    assert (tmp_path / "report" / "speedup_by_size.csv").is_file()
    assert "Speedup over FP32 by input size" in (tmp_path / "report" / "report.html").read_text()


def test_a_report_of_one_size_has_no_size_table(offline, tmp_path):
    root = tmp_path / "plain"
    for sut in ("ort-fp32", "ort-int8"):
        _performance_run(offline, root / sut / "run_1", _results(sut, ""), 10.0)
    study = load([root])
    assert [c.model for c in study.configs] == ["resnet50", "resnet50"]
    assert size_groups(study) == {} and csv_texts(study) == []


def _accuracy_run(offline: Path, folder: Path, sut: str, dataset: str,
                  predictions: list[int], labels: list[int]) -> None:
    good = sum(p == label for p, label in zip(predictions, labels, strict=True))
    copy_run(offline, folder)
    entries = [{"seq_id": i, "qsl_idx": i, "data": hexf(p)} for i, p in enumerate(predictions)]
    (folder / "mlperf_log_accuracy.json").write_text(json.dumps(entries))
    write_val_map(folder / "val_map.txt", labels)
    (folder / "results.json").write_text(json.dumps(
        _results(sut, "", "accuracy", dataset, 100 * good / len(labels))))


def test_each_dataset_has_its_own_rows_and_accuracy_change(offline, tmp_path):
    labels = [i % 10 for i in range(200)]
    wrong_every = {"flowers": 4, "birds": 50}  # INT8 loses 25% of flowers, 1 in 50 birds
    root = tmp_path / "sweep"
    for dataset, every in wrong_every.items():
        path = str(tmp_path / "data" / dataset)
        int8 = [(label + 1) % 10 if i % every == 0 else label for i, label in enumerate(labels)]
        for sut, predictions in (("ort-fp32", labels), ("ort-int8", int8)):
            folder = root / f"resnet50+data={dataset}" / sut
            _accuracy_run(offline, folder / "accuracy", sut, path, predictions, labels)
            _performance_run(offline, folder / "run_1",
                             _results(sut, "", dataset=path), 10.0)
    study = load([root])
    assert sorted({c.model for c in study.configs}) == ["resnet50 data=birds",
                                                        "resnet50 data=flowers"]
    rows = {(r[3], r[4]): r for r in dataset_rows(study)}
    assert sorted(rows) == [("birds", "ort-fp32"), ("birds", "ort-int8"),
                            ("flowers", "ort-fp32"), ("flowers", "ort-int8")]
    assert rows[("flowers", "ort-int8")][5] == "75.00"
    assert rows[("flowers", "ort-int8")][6].startswith("-25.00 pt [")
    assert ": worse; the set resolves ±" in rows[("flowers", "ort-int8")][6]
    assert rows[("birds", "ort-int8")][6].startswith("-2.00 pt [")
    assert rows[("birds", "ort-fp32")][6] == "baseline"
