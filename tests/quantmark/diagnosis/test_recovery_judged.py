"""The recovery curve judged in its task's metric: the built-in detector ``digits-detect``
(trained at first use, in the run's shared test cache) recovered in COCO mAP with every
excludable layer kept in float at the curve's end, its float head kept on every rebuild; and,
on plain data, the rows' fields named by the metric's key (a classifier's exactly as before),
the tables reading them, and a task no judge scores refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from quantmark.diagnosis import judges, recovery, steps
from quantmark.ground.errors import UserError
from quantmark.ground.metric import TOP1, Metric
from quantmark.ground.records import DiagnosisRecord
from quantmark.report import diagnosis_section
from quantmark.tasks.contract import QualityChange
from tests.conftest import run_cli

MAP = Metric(key="map", name="mAP@[.5:.95]", unit="%")
#: a classifier's curve row, as every diagnosis wrote it before the curve took its task's metric
TOP1_ROW = {"label", "k", "excluded", "top1", "samples", "top1_change_vs_k0", "samples_per_s",
            "speed_vs_k0", "speed_lost_pct", "top1_per_speed_point", "disturbed_rounds",
            "disturbed_why", "executed_precision", "ms_per_batch", "ms_lost_vs_k0",
            "top1_per_ms"}


@pytest.fixture(scope="module")
def recovered(tmp_path_factory: pytest.TempPathFactory, quantmark_cache: Path):
    """``diagnose --recover 32`` of ort-int8 on the built-in detector: past every excludable
    layer, so the last point keeps all of them in float."""
    pytest.importorskip("onnxruntime")
    out = tmp_path_factory.mktemp("recover-det")
    proc = run_cli("diagnose", "--sut", "ort-int8", "--model", "digits-detect", "--samples", "8",
                   "--recover", "32", "--eval-samples", "48", "--rounds", "2",
                   "--round-seconds", "0.05", "--output", str(out), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = next(out.glob("*-ort-int8/digits-detect/diagnose-ort-fp32"))
    return proc, folder, json.loads((folder / "results.json").read_text())


@pytest.mark.slow
def test_a_detector_recovers_in_map_up_to_its_float_reference(recovered):
    proc, folder, record = recovered
    assert record["task"]["metric"]["key"] == "map"
    recovery_ = record["recovery"]
    rows = {row["label"]: row for row in recovery_["rows"]}
    # a point that would keep every quantized layer in FP32 is the FP32 model (the SUT's proof
    # refuses it as INT8): dropped, and said so; the reference measures it
    points = [f"K={k}" for k in recovery_["points"]]
    assert points[:5] == ["K=0", "K=1", "K=2", "K=4", "K=8"]
    assert list(rows) == [*points, "reference ort-fp32"]
    if recovery_["dropped"]:
        assert recovery_["dropped"]["points"] and "FP32 model" in recovery_["dropped"]["why"]
    assert all("top1" not in key for row in rows.values() for key in row)
    assert all(row["samples"] == 48 and 0 < row["map"] <= 100 for row in rows.values())
    assert rows["K=0"]["map_change_vs_k0"] is None
    ref = rows["reference ort-fp32"]
    for row in list(rows.values())[1:]:
        change = row["map_change_vs_k0"]
        assert change["groups"] == 48 and "bootstrap over images" in change["test"]
        assert change["low"] <= change["points"] <= change["high"]
        assert change["points"] == pytest.approx(row["map"] - rows["K=0"]["map"], abs=2e-3)
    # the last point keeps all but the quantized layers left: its mAP is the reference's
    # within the noise of the paired bootstrap
    full = rows[points[-1]]
    noise = (ref["map_change_vs_k0"]["high"] - ref["map_change_vs_k0"]["low"]) / 2
    assert abs(full["map"] - ref["map"]) <= noise, (full["map"], ref["map"], noise)
    # every rebuild kept the detector's head float (the load-time profile saw it run float)
    heads = [rows[f"K={k}"]["detector_head"] for k in recovery_["points"]]
    assert all(head["float_head_nodes"] == heads[0]["float_head_nodes"] > 0 for head in heads)
    assert "postprocessing after predict is not timed" in recovery_["timing"]
    assert "recovery: worst layers kept in FP32 (mAP@[.5:.95] paired against K=0" in proc.stdout
    assert "top-1" not in proc.stdout
    assert f"{points[-1]}: mAP@[.5:.95]" in proc.stderr
    header = (folder / "recovery.csv").read_text().splitlines()[0]
    assert header.startswith("label,k,map,map_change,") and "map_per_ms" in header
    assert "| mAP@[.5:.95] % |" in (folder / "layers.md").read_text()


class _Answers(judges.Judge):
    """A judge of plain numbers: each variant's answer is its figure."""

    def answers(self, backend):
        return backend

    def figure(self, answers: float) -> float:
        return answers

    def change(self, base: float, answers: float) -> QualityChange:
        return QualityChange(answers - base, answers - base - 1, answers - base + 1, 10, 10,
                             "bootstrap", self.metric.name)


def _variant(label: str, k: int | None, answer, rates: list[float]) -> recovery.Variant:
    return recovery.Variant(label, k, [], None, answers=answer, rates=rates,
                            disturbed=[[] for _ in rates])


def test_curve_rows_are_named_by_the_metric_and_a_classifiers_are_as_before():
    correct = [np.arange(10) < right for right in (5, 8)]
    top1 = judges.TopOne(TOP1, 10, 8, lambda layout, start, stop: np.zeros(0),
                         np.zeros(10, dtype=np.int64), None)
    rows = recovery.summarize([_variant("K=0", 0, correct[0], [800.0, 800.0]),
                               _variant("K=1", 1, correct[1], [400.0, 400.0])], top1, 8)
    assert set(rows[0]) == set(rows[1]) == TOP1_ROW
    assert rows[1]["top1"] == 80.0 and rows[1]["top1_change_vs_k0"]["points"] == 30.0
    assert rows[1]["top1_change_vs_k0"]["test"] == "mcnemar"
    boxes = recovery.summarize([_variant("K=0", 0, 40.0, [800.0, 800.0]),
                                _variant("K=1", 1, 43.0, [400.0, 400.0]),
                                _variant("reference", None, 44.0, [200.0, 200.0])],
                               _Answers(MAP, 10, 8), 8)
    assert {key for key in boxes[1] if "map" in key} == {
        "map", "map_change_vs_k0", "map_per_speed_point", "map_per_ms"}
    assert boxes[1]["map_change_vs_k0"] == {"points": 3.0, "low": 2.0, "high": 4.0,
                                            "p_value": None, "test": "bootstrap", "groups": 10}
    record = DiagnosisRecord.from_dict({
        "kind": "diagnosis", "model": "det", "sut": "ort-int8", "against": "ort-fp32",
        "samples": 8, "layers": [], "worst": [], "capture": {"test": {}},
        "task": {"name": "detection", "metric": MAP.to_record()},
        "recovery": {"rows": boxes, "eval_samples": 10, "rounds": 2}})
    header, cells = diagnosis_section.recovery_table(record)
    assert header[2] == "mAP@[.5:.95] %" and [row[2] for row in cells] == ["40.00", "43.00",
                                                                              "44.00"]
    assert cells[1][3] == "+3.00 [+2.00, +4.00]"
    assert diagnosis_section.recovery_csv(record).startswith("label,k,map,map_change,")


def test_a_task_without_a_judge_is_refused_in_one_line():
    task = SimpleNamespace(name="depth", metric=Metric(key="rmse", name="RMSE", unit="m",
                                                       higher_is_better=False))
    config = steps.DiagnoseConfig(model="m", sut="ort-int8", recover=2)
    with pytest.raises(UserError, match=r"^--recover: task depth gives diagnose no way to "
                                        r"score a model's outputs in its metric \(RMSE\)"):
        steps.check(config, "ort-fp32", 10, task)
    steps.check(steps.DiagnoseConfig(model="m", sut="ort-int8"), "ort-fp32", 10, task)
