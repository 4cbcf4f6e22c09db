"""``run.py diagnose`` and ``run.py profile`` on a detector (the tiny Ultralytics-style fixture
over 24 images of the built-in COCO-layout set): the layers ranked as for a classifier, the
final output's error and both SUTs' mAP instead of top-1, and the postprocessing (NMS) profiled
beside the layers; plus the pieces that compute and show them. Its recovery curve, judged in mAP,
is ``test_recovery_judged``'s."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from quantmark.diagnosis import output_quality, postprocess_times
from quantmark.ground.records import DiagnosisRecord, ProfileRecord
from quantmark.report import diagnosis_section, profile_tables
from tests.conftest import run_cli
from tests.tasks.detection.tiny_cases import FixedHeadBackend
from tests.tasks.detection.yolo_fixture import tiny_yolo_onnx

IMAGES = 24


@pytest.fixture(scope="module")
def detector(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The fixture detector (10 classes, as the built-in set's digits) and a COCO folder of
    the built-in set's first images."""
    from quantmark.tasks.detection.digits_detect.canvases import builtin_detection_root

    source = builtin_detection_root()
    truth = json.loads((source / "annotations" / "instances_val2017.json").read_text())
    images = truth["images"][:IMAGES]
    keep = {image["id"] for image in images}
    root = tmp_path_factory.mktemp("coco")
    (root / "val2017").mkdir()
    (root / "annotations").mkdir()
    for image in images:
        shutil.copy(source / "val2017" / image["file_name"], root / "val2017")
    subset = {**truth, "images": images,
              "annotations": [a for a in truth["annotations"] if a["image_id"] in keep]}
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps(subset))
    model = tiny_yolo_onnx(root.parent / "det.onnx", num_classes=10)
    return Path(model), root


def _cli(verb: str, sut: str, detector: tuple[Path, Path], out: Path, *more: str):
    model, data = detector
    return run_cli(verb, "--sut", sut, "--model-path", str(model), "--dataset-path", str(data),
                   "--output", str(out), *more, timeout=600)


@pytest.mark.slow
def test_a_detector_is_diagnosed_in_map(detector, tmp_path):
    pytest.importorskip("onnxruntime")
    proc = _cli("diagnose", "ort-int8", detector, tmp_path, "--samples", "16")
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(next(tmp_path.glob("*/det/diagnose-ort-fp32/results.json")).read_text())
    assert record["task"]["name"] == "detection"
    assert record["task"]["metric"]["key"] == "map"
    assert record["layers"] and record["worst"] and record["samples"] == 16
    quality = record["quality"]
    assert quality["images"] == 16 and quality["output"]["shape"][0] == 16
    assert 0.0 <= quality["test"] <= 100.0 and 0.0 <= quality["reference"] <= 100.0
    assert quality["output"]["sqnr_db"] is None or quality["output"]["sqnr_db"] > 10
    assert "mAP@[.5:.95] on the 16 diagnosed images" in proc.stdout
    assert "top-1" not in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("sut,op", [("ov-int8", "OpenVINO NMS-9 op"),
                                    ("ort-int8", "onnxruntime NonMaxSuppression op")])
def test_a_detector_profile_has_nms_rows(sut, op, detector, tmp_path):
    pytest.importorskip("openvino" if sut.startswith("ov") else "onnxruntime")
    proc = _cli("profile", sut, detector, tmp_path, "--iterations", "5", "--warmup", "1",
                "--batch-size", "4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(next(tmp_path.glob("*/det/profile-*/results.json")).read_text())
    assert record["task"]["name"] == "detection"
    names = [row["onnx_layer"] for row in record["layers"]]
    nms_row = postprocess_times.nms_row(op)  # the SUT's own framework's NMS op, timed
    assert nms_row in names and postprocess_times.REST_ROW in names
    assert names.index(nms_row) > 0  # after the model's layers
    for side in ("test", "reference"):
        steps = record[side]["postprocess"]["steps"]
        assert [s["name"] for s in steps] == [nms_row, postprocess_times.REST_ROW]
        assert all(s["median_ms"] >= 0 for s in steps)
    assert "postprocess after predict" in proc.stdout and f"NMS ({op})" in proc.stdout


def test_the_postprocessing_is_timed_with_nms_split_out():
    from quantmark.tasks.detection.postprocess import Postprocess

    steps = postprocess_times.time_respond(Postprocess("raw", 3), FixedHeadBackend(),
                                           np.zeros((2, 1)), iterations=3, warmup=1)
    assert [s.name for s in steps] == [postprocess_times.NMS_ROW, postprocess_times.REST_ROW]
    assert steps[0].median_ms > 0
    assert postprocess_times.time_respond(None, FixedHeadBackend(), np.zeros((2, 1)), 3, 1) == []
    whole = postprocess_times.time_respond(lambda out, idx: [out] * len(idx), FixedHeadBackend(),
                                           np.zeros((2, 1)), 3, 1)
    assert [s.name for s in whole] == [postprocess_times.WHOLE_ROW]


def test_postprocess_rows_pair_by_name_and_show_in_the_share_lines():
    test = [postprocess_times.Step(postprocess_times.NMS_ROW, "NMS", 2.0)]
    ref = [postprocess_times.Step(postprocess_times.NMS_ROW, "NMS", 1.0),
           postprocess_times.Step(postprocess_times.REST_ROW, "Postprocess", 0.5)]
    rows = postprocess_times.rows(test, ref)
    assert [r.onnx_layer for r in rows] == [postprocess_times.NMS_ROW, postprocess_times.REST_ROW]
    assert rows[0].ms_lost == pytest.approx(1.0) and rows[1].test is None
    side = {"sut": "ov-int8", "postprocess": postprocess_times.record(test, 6.0)}
    assert side["postprocess"]["share_of_sut_ms"] == pytest.approx(0.25)
    lines = profile_tables.postprocess_lines({"test": side})
    assert lines == ["ov-int8: postprocess after predict (in the SUT's timed work): NMS "
                     "(quantmark numpy) 2.000 ms; 2.000 ms, 25% of predict plus postprocess"]


def test_the_final_output_error():
    want = np.arange(1, 13, dtype=np.float32).reshape(1, 3, 4)
    same = output_quality.output_error(want, want)
    assert same["identical"] and same["sqnr_db"] is None and same["cosine"] == 1.0
    noisy = output_quality.output_error(want + 0.01, want)
    assert noisy["sqnr_db"] > 40 and not noisy["identical"]
    assert output_quality.output_error(want[:, :2], want)["cosine"] is None


def _diagnosis(**more) -> DiagnosisRecord:
    return DiagnosisRecord.from_dict({"kind": "diagnosis", "model": "det", "sut": "ov-int8",
                                      "against": "ov-fp32", "samples": 16, "layers": [],
                                      "worst": [], "capture": {"test": {}}, **more})


def test_a_detector_diagnosis_reads_in_map_and_old_records_still_load():
    quality = {"output": {"shape": [16, 14, 80], "sqnr_db": 31.5, "cosine": 0.9991},
               "images": 16, "test": 70.25, "reference": 71.5,
               "change_points": {"delta": -1.25, "low": -2.5, "high": 0.1, "method": "boot"}}
    record = _diagnosis(task={"name": "detection", "metric": {"key": "map",
                                                              "name": "mAP@[.5:.95]",
                                                              "unit": "%"}},
                        quality=quality)
    assert diagnosis_section.quality_lines(record) == [
        "final output [16, 14, 80]: SQNR 31.5 dB, cosine 0.9991",
        "mAP@[.5:.95] on the 16 diagnosed images: ov-int8 70.25, ov-fp32 71.50 (-1.25 pt "
        "[-2.50, +0.10], boot)"]
    assert record.to_dict()["task"]["name"] == "detection" and record.quality == quality
    old = _diagnosis()  # written before tasks: no task, no quality
    assert old.task is None and diagnosis_section.quality_lines(old) == []
    profile = ProfileRecord.from_dict({"kind": "profile", "model": "m", "sut": "a",
                                       "against": "b", "batch_size": 1, "iterations": 3,
                                       "warmup": 0})
    assert profile.task is None and "task" not in profile.to_dict()
