"""A detector through run.py as a user runs it: an Ultralytics-style ONNX (raw head
[N, 4 + C, anchors], NMS outside) over a COCO-format folder (val2017/ + annotations/
instances_val2017.json) and a YOLO-format one (images/, labels/, data.yaml), in performance
and accuracy mode; the task is read from the model and printed, accuracy.txt holds mAP."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.tasks.detection.yolo_fixture import tiny_yolo_onnx

pytestmark = pytest.mark.slow
SIZE = 96


@pytest.fixture(scope="module")
def coco_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 images of the built-in set, laid out as COCO's own (ids 1, 3, ... 19)."""
    from quantmark.tasks.detection.digits_detect.canvases import builtin_detection_root

    source = builtin_detection_root()
    truth = json.loads((source / "annotations" / "instances_val2017.json").read_text())
    images = truth["images"][:60]
    keep = {image["id"] for image in images}
    root = tmp_path_factory.mktemp("coco")
    (root / "val2017").mkdir()
    (root / "annotations").mkdir()
    for image in images:
        shutil.copy(source / "val2017" / image["file_name"], root / "val2017")
    subset = {**truth, "images": images,
              "annotations": [a for a in truth["annotations"] if a["image_id"] in keep]}
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps(subset))
    return root


@pytest.fixture(scope="module")
def yolo_dir(coco_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same images as a YOLO-format folder: labels/<stem>.txt (class cx cy w h, 0-1)."""
    truth = json.loads((coco_dir / "annotations" / "instances_val2017.json").read_text())
    ids = sorted(c["id"] for c in truth["categories"])
    root = tmp_path_factory.mktemp("yolo")
    (root / "images").mkdir()
    (root / "labels").mkdir()
    for image in truth["images"]:
        shutil.copy(coco_dir / "val2017" / image["file_name"], root / "images")
        lines = []
        for a in (a for a in truth["annotations"] if a["image_id"] == image["id"]):
            x, y, w, h = a["bbox"]
            lines.append(f"{ids.index(a['category_id'])} {(x + w / 2) / image['width']:.6f} "
                         f"{(y + h / 2) / image['height']:.6f} {w / image['width']:.6f} "
                         f"{h / image['height']:.6f}\n")
        (root / "labels" / f"{Path(image['file_name']).stem}.txt").write_text("".join(lines))
    names = {c["id"]: c["name"] for c in truth["categories"]}
    (root / "data.yaml").write_text("names:\n" + "".join(f"  {k}: '{names[i]}'\n"
                                                         for k, i in enumerate(ids)))
    return root


@pytest.fixture(scope="module")
def yolo_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_yolo_onnx(tmp_path_factory.mktemp("model") / "yolo.onnx", num_classes=10,
                          size=SIZE)


def _results(folder: Path) -> dict[str, dict]:
    return {str(p.relative_to(folder)): json.loads(p.read_text())
            for p in folder.rglob("results.json")}


@pytest.mark.parametrize("layout", ["coco", "yolo"])
def test_a_detector_runs_valid_and_scores_map(layout: str, coco_dir: Path, yolo_dir: Path,
                                              yolo_onnx: Path, tmp_path: Path) -> None:
    data = coco_dir if layout == "coco" else yolo_dir
    common = ("--scenario", "Offline", "--sut", "ov-int8", "--model-path", str(yolo_onnx),
              "--dataset-path", str(data), "--output", str(tmp_path))
    perf = run_cli(*common, timeout=600)
    assert perf.returncode == 0, perf.stdout[-2000:] + perf.stderr[-3000:]
    assert "[detection]" in perf.stdout  # the task read from the model, printed
    accuracy = run_cli(*common, "--mode", "accuracy", "--task", "detection", timeout=600)
    assert accuracy.returncode == 0, accuracy.stdout[-2000:] + accuracy.stderr[-3000:]
    assert "mAP@[.5:.95]" in accuracy.stdout
    runs = _results(tmp_path)
    run = next(r for k, r in runs.items() if "performance" in k)
    assert run["summary"]["validity"] == "VALID"
    assert run["task"]["name"] == "detection" and run["task"]["head"] == "raw"
    assert run["task"]["postprocess"]["nms"] == "OpenVINO NMS-9 op"  # ov-int8's framework's
    scored = next(r for k, r in runs.items() if "accuracy" in k)["accuracy"]
    assert 0.0 <= scored["map"] <= scored["map50"] <= 100.0
    assert scored["images"] == 54  # 60, six held out to calibrate ov-int8 (a tenth)
    text = next(tmp_path.rglob("accuracy.txt")).read_text().splitlines()
    assert text[0].startswith("mAP=") and text[1].startswith("mAP50=")
    assert any("not applicable" in line for line in text)  # not COCO's own val2017


def test_a_classifier_task_is_refused_for_a_detector(yolo_onnx: Path, coco_dir: Path,
                                                     tmp_path: Path) -> None:
    wrong = run_cli("--scenario", "Offline", "--sut", "ort-fp32", "--model-path",
                    str(yolo_onnx), "--dataset-path", str(coco_dir), "--task", "classification",
                    "--output", str(tmp_path), timeout=300)
    assert wrong.returncode == 2
    assert "is a detection model by its outputs" in wrong.stderr
