"""The report asks each run's task for its metric: a detector's rows say mAP (its figure, its
paired change against the framework's FP32, no agreement column, no chance-level note), a study
mixing tasks gives each metric its own columns, and a classification report keeps exactly the
labels and CSV keys it had before tasks."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from quantmark.ground.metric import TOP1, Metric
from quantmark.report import quality, recommend_section, run_table, sweep_report, workload_tables
from quantmark.report.characterize import load
from quantmark.report.diagnosis_section import RECOVERY_HEADER
from quantmark.tasks.catalog import get_task
from quantmark.tasks.detection import scoring
from quantmark.tasks.detection.definition import DETECTIONS_FILE, GROUND_TRUTH_FILE
from tests.report.loadgen_runs import copy_run, loadgen_run
from tests.report.test_accuracy import hexf, write_val_map
from tests.tasks.detection.test_scoring import synthetic_results, synthetic_truth

MAP = get_task("detection").metric
DETECTOR, CLASSIFIER = "det", "cls"


@pytest.fixture(scope="module")
def offline(tmp_path_factory) -> Path:
    return loadgen_run(tmp_path_factory.mktemp("loadgen") / "run", "Offline")


def _results(sut: str, model: str, mode: str, metric: Metric | None,
             accuracy: dict[str, Any] | None = None) -> dict[str, Any]:
    """A results.json as the runner writes it; ``metric`` None: written before tasks."""
    return {
        "config": {"sut": sut, "model": model, "batch_size": 8, "mode": mode, "sut_options": {}},
        "sut": {"name": sut, "fp32_baseline": sut.split("-")[0] + "-fp32",
                "executed_precision": sut.split("-")[1]},
        "model": {"weights": "random (seed 0)"}, "dataset": {"path": "/data"},
        "machine": {"hostname": "box"}, "settings": {"mode": "quick"},
        **({"task": {"name": "detection" if metric == MAP else "classification",
                     "metric": metric.to_record()}} if metric else {}),
        **({"accuracy": accuracy} if accuracy is not None else {})}


def _run(offline: Path, folder: Path, results: dict[str, Any]) -> Path:
    copy_run(offline, folder)
    (folder / "results.json").write_text(json.dumps(results))
    return folder


def _detector(offline: Path, root: Path) -> dict[str, float]:
    """A detector's performance and accuracy runs (FP32 finds more than INT8); its mAP by SUT."""
    rng = np.random.default_rng(3)
    truth, _ = synthetic_truth(rng, images=30)
    found = {}
    for sut, hit in (("ort-fp32", 0.8), ("ort-int8", 0.5)):
        detections = synthetic_results(rng, truth, hit=hit)
        found[sut] = 100 * scoring.evaluate(truth, detections).map
        base = root / f"box-{sut}" / DETECTOR / "Offline"
        _run(offline, base / "performance" / "run_1", _results(sut, DETECTOR, "performance", MAP))
        accuracy = _run(offline, base / "accuracy", _results(
            sut, DETECTOR, "accuracy", MAP, {"map": found[sut], "map50": 50.0, "images": 30}))
        (accuracy / DETECTIONS_FILE).write_text(json.dumps(detections))
        (accuracy / GROUND_TRUTH_FILE).write_text(json.dumps(truth))
    return found


def _classifier(offline: Path, root: Path, metric: Metric | None) -> None:
    """A classifier's runs; INT8 answers 1 in 5 images wrong."""
    labels = [i % 10 for i in range(50)]
    for sut, every in (("ort-fp32", 0), ("ort-int8", 5)):
        answers = [(label + 1) % 10 if every and i % every == 0 else label
                   for i, label in enumerate(labels)]
        good = sum(a == label for a, label in zip(answers, labels, strict=True))
        base = root / f"box-{sut}" / CLASSIFIER / "Offline"
        _run(offline, base / "performance" / "run_1",
             _results(sut, CLASSIFIER, "performance", metric))
        accuracy = _run(offline, base / "accuracy", _results(
            sut, CLASSIFIER, "accuracy", metric, {"top1": 100 * good / 50, "good": good,
                                                  "total": 50}))
        entries = [{"seq_id": i, "qsl_idx": i, "data": hexf(a)} for i, a in enumerate(answers)]
        (accuracy / "mlperf_log_accuracy.json").write_text(json.dumps(entries))
        write_val_map(accuracy / "val_map.txt", labels)


def _section(markdown: str, model: str) -> tuple[list[str], dict[str, list[str]]]:
    """The header and rows (by SUT) of ``model``'s table in report.md."""
    text = markdown.split(f"## {model} — Offline — box\n\n", 1)[1].split("\n\n", 1)[0]
    table = [[cell.strip() for cell in line.strip("|").split("|")]
             for line in text.splitlines() if not line.startswith("|---")]
    return table[0], {row[0].split()[0]: row for row in table[1:]}


def test_a_detector_reads_map_with_its_paired_change(offline, tmp_path):
    found = _detector(offline, tmp_path / "runs")
    written = sweep_report.write([tmp_path / "runs"], tmp_path / "report")
    markdown = (tmp_path / "report" / "report.md").read_text()
    header, rows = _section(markdown, DETECTOR)
    assert "mAP@[.5:.95] %" in header and "Δ mAP@[.5:.95] vs fw FP32" in header
    assert not [h for h in header if "top-1" in h or "agree" in h]
    cells = dict(zip(header, rows["ort-int8"], strict=True))
    assert cells["mAP@[.5:.95] %"] == f"{found['ort-int8']:.2f}"
    folders = tmp_path / "runs" / "box-ort-fp32", tmp_path / "runs" / "box-ort-int8"
    change = get_task("detection").paired_change(*(f / DETECTOR / "Offline" / "accuracy"
                                                   for f in folders))
    assert change is not None and cells["Δ mAP@[.5:.95] vs fw FP32"] == change.text()
    assert dict(zip(header, rows["ort-fp32"], strict=True))[
        "Δ mAP@[.5:.95] vs fw FP32"] == "baseline"
    # random weights: a detector's metric is no chance figure, so nothing is said of chance
    assert "top-1" not in markdown and "chance" not in markdown
    assert "`Δ mAP@[.5:.95]` pairs the two accuracy runs" in markdown
    table = {r["sut"]: r for r in csv.DictReader(io.StringIO(
        (tmp_path / "report" / "report.csv").read_text()))}
    assert not [k for k in table["ort-int8"] if k.startswith("top1")]
    assert float(table["ort-int8"]["map"]) == pytest.approx(found["ort-int8"])
    assert float(table["ort-int8"]["map_change_vs_fp32_pts"]) == pytest.approx(
        found["ort-int8"] - found["ort-fp32"])
    assert float(table["ort-int8"]["map_change_low_pts"]) == pytest.approx(change.low)
    assert table["ort-int8"]["map_change_p"] == ""  # a bootstrap gives no p-value
    assert table["ort-int8"]["map_change_verdict"] == change.verdict
    assert table["ort-fp32"]["agreement_with_fp32_pct"] == ""
    assert written.study.configs[1].derived["quality_metric"] == MAP


def test_a_detectors_figure_and_listing_name_its_metric(offline, tmp_path, monkeypatch):
    from quantmark.report import figures

    _detector(offline, tmp_path / "runs")
    kept: list = []
    monkeypatch.setattr(figures, "_png", lambda fig: kept.append(fig) or b"png")
    figure = figures.accuracy_vs_latency(load([tmp_path / "runs"]), "box", DETECTOR)
    assert figure is not None and "mAP@[.5:.95] change" in figure.caption
    assert kept[0].axes[0].get_ylabel() == "mAP@[.5:.95] (%)"
    rows = run_table.find_runs(tmp_path / "runs")
    text = run_table.to_csv(rows, tmp_path / "runs")
    assert "accuracy_map" in text.splitlines()[0] and "top1" not in text
    assert ("mAP@[.5:.95]", "accuracy_map") in run_table.console_columns(
        run_table.scored_by(rows))


def test_a_study_of_two_tasks_gives_each_metric_its_columns(offline, tmp_path, monkeypatch):
    _detector(offline, tmp_path / "runs")
    _classifier(offline, tmp_path / "runs", TOP1)
    study = load([tmp_path / "runs"])
    markdown = sweep_report.to_markdown(study, [])
    detector, _ = _section(markdown, DETECTOR)
    classifier, rows = _section(markdown, CLASSIFIER)
    assert "mAP@[.5:.95] %" in detector and "top-1 %" not in detector
    assert [h for h in classifier if "top-1" in h or "agree" in h] == [
        "top-1 %", "Δ top-1 vs fw FP32", "agree FP32 %"]
    assert dict(zip(classifier, rows["ort-int8"], strict=True))["top-1 %"] == "80.00"
    assert "its top-1 is at chance level" in markdown  # the classifier's random weights
    table = list(csv.DictReader(io.StringIO(sweep_report.report_csv(study))))
    for row in table:  # each row fills its own metric's columns, blank in the other's
        mine, other = ("map", "top1") if row["model"] == DETECTOR else ("top1", "map")
        assert row[mine] != "" and row[other] == "" and row[f"{other}_change_vs_fp32_pts"] == ""
    from quantmark.commands import report as report_verb

    buffer = io.StringIO()
    monkeypatch.setattr(report_verb, "console", Console(file=buffer, width=400,
                                                        color_system=None))
    report_verb.characterization([str(tmp_path / "runs")], tmp_path / "out")
    head = next(line for line in buffer.getvalue().splitlines() if "official metric" in line)
    assert "mAP@[.5:.95] %" in head and "top-1 %" in head and "agree FP32 %" in head


def test_a_record_written_before_tasks_is_read_as_classification(offline, tmp_path):
    _classifier(offline, tmp_path / "runs", None)  # no task section at all
    study = load([tmp_path / "runs"])
    assert {c.derived["quality_metric"] for c in study.configs} == {TOP1}
    header = sweep_report.report_csv(study).splitlines()[0].split(",")
    assert header == CLASSIFICATION_CSV


# report.csv's columns for a classification study, exactly as the report wrote them before tasks.
CLASSIFICATION_CSV = [
    "system", "model", "sut", "framework", "precision", "scenario", "batch_size", "n",
    "run_kind", "validity", "metric_name", "metric_unit", "metric_median", "metric_low",
    "metric_high", "metric_interval_method", "metric_mean", "metric_std", "metric_min",
    "metric_max", "samples_per_s_median", "samples_per_s_low", "samples_per_s_high",
    "samples_per_s_mean", "samples_per_s_std", "queries_min", "p50_ms_median", "p50_ms_low",
    "p50_ms_high", "p90_ms_median", "p90_ms_low", "p90_ms_high", "p95_ms_median", "p95_ms_low",
    "p95_ms_high", "p97_ms_median", "p97_ms_low", "p97_ms_high", "p99_ms_median", "p99_ms_low",
    "p99_ms_high", "p99.9_ms_median", "p99.9_ms_low", "p99.9_ms_high", "speedup_vs_fp32",
    "speedup_vs_fp32_low", "speedup_vs_fp32_high", "speedup_vs_fp32_confidence",
    "speedup_vs_fp32_verdict", "speedup_vs_fp32_paired", "speedup_vs_best_fp32",
    "speedup_vs_best_fp32_low", "speedup_vs_best_fp32_high", "speedup_vs_best_fp32_confidence",
    "speedup_vs_best_fp32_verdict", "speedup_vs_best_fp32_paired", "best_fp32", "top1",
    "top1_change_vs_fp32_pts", "top1_change_low_pts", "top1_change_high_pts", "top1_change_p",
    "top1_change_test", "top1_change_verdict", "top1_change_samples", "top1_change_groups",
    "top1_change_left_out", "agreement_with_fp32_pct", "agreement_low_pct",
    "agreement_high_pct", "weights", "model_size_mb",
    "conversion_s", "conversion_steps", "prepare_s", "load_s", "warmup_s", "peak_rss_mb",
    "gpu_memory_mb", "energy_j_per_sample_informative", "power_w_informative",
    "executed_precision", "fingerprint", "workers", "throttled", "throttling_reasons",
    "disturbed_runs", "disturbance_checked_runs", "disturbed_why"]


def test_classification_labels_are_unchanged():
    assert sweep_report.csv_header([TOP1]) == CLASSIFICATION_CSV
    headers = [h for h, _ in sweep_report.COLUMNS]
    at = headers.index("× best FP32")
    assert headers[at + 1:at + 5] == ["top-1 %", "Δ top-1 vs fw FP32", "agree FP32 %", "p50 ms"]
    assert run_table.header([TOP1])[-5:] == ["accuracy_top1", "calibration_hash", "path",
                                            "throttled", "disturbed"]
    assert ("top-1", "accuracy_top1") in run_table.console_columns([TOP1])
    assert (quality.value_label(TOP1), quality.change_label(TOP1), quality.axis_label(TOP1)) == (
        "top-1 %", "Δ top-1 vs fw FP32", "top-1 accuracy (%)")
    assert quality.axis_label(TOP1, agreement=True) == (
        "top-1 agreement with the framework's FP32 (%)")
    assert [quality.csv_key(TOP1, s) for s in workload_tables.CHANGE_SUFFIXES] == [
        "top1_change_pts", "top1_change_low_pts", "top1_change_high_pts"]
    assert workload_tables.dataset_note([TOP1]).startswith("Each row: one SUT's top-1 on one ")
    assert RECOVERY_HEADER[2] == "top-1 %" and RECOVERY_HEADER[7] == "top-1 pt per speed pt"
    assert "against its top-1 change versus the best FP32" in recommend_section.caption(TOP1)


def test_the_metric_comes_from_the_record():
    assert quality.metric_of(None) == TOP1 and quality.metric_of({"task": None}) == TOP1
    assert quality.metric_of({"task": {"metric": MAP.to_record()}}) == MAP
    assert quality.classifies(TOP1) and not quality.classifies(MAP)
    assert quality.in_order([]) == [TOP1] and quality.in_order([MAP, TOP1, MAP]) == [MAP, TOP1]
    assert quality.figure({"map": 37.1, "top1": 1.0}, MAP) == 37.1
    assert (quality.value_label(MAP), quality.change_label(MAP), quality.csv_key(
        MAP, "change_vs_fp32_pts")) == ("mAP@[.5:.95] %", "Δ mAP@[.5:.95] vs fw FP32",
                                        "map_change_vs_fp32_pts")
