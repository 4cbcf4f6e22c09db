"""The built-in detection workload: the digit canvases (deterministic, COCO-format, independent
evaluation images, rebuilt when damaged) and the detector quantmark trains on them (its graph,
its ONNX export and the mAP it reaches on the held-out canvases).

The trained-detector tests are slow (training takes 1-2 minutes of one core, more on a busy
machine); the graph's shape is also checked on untrained weights in the quick tier."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from quantmark.qsl.builtin import CONTENTS
from quantmark.qsl.digits_split import load_split
from quantmark.tasks.detection.digits_detect import canvases, detector, fitting

#: measured mAP@[.5:.95] 0.785 and mAP50 0.989 (pycocotools, 356 images, x86 CPU);
#: the floors leave room for another CPU's rounding
MAP_FLOOR, MAP50_FLOOR = 0.72, 0.95


@pytest.fixture(scope="module")
def root() -> Path:
    return canvases.builtin_detection_root()


def _instances(root: Path, part: str) -> dict:
    return json.loads((root / canvases.ANNOTATIONS / f"instances_{part}.json").read_text())


def test_dataset_bytes_are_deterministic(root: Path, tmp_path: Path) -> None:
    """A second generation writes the very same files (same sha256 for every one)."""
    canvases.write_tree(tmp_path)
    first = json.loads((root / CONTENTS).read_text())
    second = json.loads((tmp_path / CONTENTS).read_text())
    assert first == second
    assert canvases.builtin_detection_identity() == canvases.builtin_detection_identity()


def test_evaluation_images_are_independent(root: Path) -> None:
    """Every held-out scan is in exactly one evaluation image; no training image holds one."""
    split = load_split()
    val = [a["scan"] for a in _instances(root, canvases.VAL)["annotations"]]
    train = {a["scan"] for a in _instances(root, canvases.TRAIN)["annotations"]}
    assert len(val) == len(set(val)) == canvases.EVAL_OBJECTS
    assert set(val) == set(split.held_index.tolist())
    assert train <= set(split.train_index.tolist())
    assert not train & set(val)


def test_coco_layout_and_sizes(root: Path) -> None:
    """COCO's own layout, loadable by pycocotools, non-contiguous category ids, boxes inside
    their 96x96 RGB images, the sizes DESCRIPTION quotes."""
    coco_module = pytest.importorskip("pycocotools.coco")
    gt = coco_module.COCO(str(root / canvases.ANNOTATIONS / "instances_val2017.json"))
    assert sorted(gt.getCatIds()) == list(canvases.CATEGORY_IDS)
    assert [gt.cats[c]["name"] for c in canvases.CATEGORY_IDS] == [str(d) for d in range(10)]
    assert len(gt.getImgIds()) == canvases.EVAL_IMAGES
    assert f"{canvases.EVAL_IMAGES} independent" in canvases.DESCRIPTION
    train = _instances(root, canvases.TRAIN)
    assert len(train["images"]) == canvases.TRAIN_IMAGES
    for part, record in ((canvases.VAL, gt.dataset), (canvases.TRAIN, train)):
        assert {p.name for p in (root / part).iterdir()} == \
            {i["file_name"] for i in record["images"]}
        for ann in record["annotations"]:
            x, y, w, h = ann["bbox"]
            assert 0 <= x and 0 <= y and x + w <= canvases.CANVAS and y + h <= canvases.CANVAS
            assert w >= 4 and h >= 8 and ann["iscrowd"] == 0
    first = gt.dataset["images"][0]
    with Image.open(root / canvases.VAL / first["file_name"]) as image:
        assert image.mode == "RGB" and image.size == (canvases.CANVAS, canvases.CANVAS)


def test_every_box_has_anchors(root: Path) -> None:
    """The assignment gives each training box at least one anchor: none goes unlearned."""
    record = _instances(root, canvases.TRAIN)
    per_image: dict[int, list] = {}
    for ann in record["annotations"]:
        per_image.setdefault(ann["image_id"], []).append(ann["bbox"])
    for boxes in per_image.values():
        owner, _ = fitting.assign(np.array(boxes, np.float32))
        assert set(owner[owner >= 0].tolist()) == set(range(len(boxes)))


def test_damaged_tree_is_rebuilt(root: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An edited image, or a file added to the tree, is found and the tree rebuilt."""
    image = root / canvases.VAL / "000000000001.png"
    good = image.read_bytes()
    Image.new("RGB", (canvases.CANVAS, canvases.CANVAS)).save(image)
    with caplog.at_level(logging.WARNING):
        assert canvases.builtin_detection_root() == root
    assert "failed verification" in caplog.text
    assert image.read_bytes() == good
    extra = root / canvases.VAL / "extra.png"
    shutil.copyfile(image, extra)
    try:
        assert "was not written by quantmark" in canvases.verify_tree(root)
    finally:
        extra.unlink()
    assert canvases.verify_tree(root) is None


def test_untrained_graph_is_ultralytics_shaped(tmp_path: Path) -> None:
    """One output [N, 4 + 10, A] from input "images", only plain ops, dynamic batch."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    model = detector.build_module().eval()
    data = detector.export_bytes(model)
    ops = {node.op_type for node in onnx.load_from_string(data).graph.node}
    assert ops <= {"Conv", "Sigmoid", "Mul", "Add", "Sub", "Concat", "Reshape", "Slice",
                   "Shape", "Constant", "Identity"}
    _check_session(ort.InferenceSession(data))


def _check_session(session) -> None:
    (feed,), (out,) = session.get_inputs(), session.get_outputs()
    assert (feed.name, out.name) == ("images", "output0")
    anchors = sum((detector.INPUT_SIZE // s) ** 2 for s in detector.STRIDES)
    x = np.random.default_rng(0).random((3, 3, detector.INPUT_SIZE, detector.INPUT_SIZE),
                                        dtype=np.float32)
    (y,) = session.run(None, {"images": x})
    assert y.shape == (3, 4 + detector.NUM_CLASSES, anchors)
    assert ((y[:, 4:] >= 0) & (y[:, 4:] <= 1)).all() and (y[:, 2:4] >= 0).all()


# ----------------------------------------------------------------------------- trained
@pytest.fixture(scope="module")
def trained_onnx(root: Path) -> Path:
    return detector.builtin_detector_onnx()


@pytest.mark.slow
def test_trained_onnx_and_module(trained_onnx: Path) -> None:
    """The trained ONNX has the Ultralytics head, and the torch module gives its outputs."""
    ort = pytest.importorskip("onnxruntime")
    import torch

    session = ort.InferenceSession(str(trained_onnx))
    _check_session(session)
    x = np.random.default_rng(1).random((2, 3, 96, 96), dtype=np.float32)
    with torch.no_grad():
        expected = detector.builtin_detector_module()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(session.run(None, {"images": x})[0], expected, atol=1e-3)
    assert detector.builtin_detector_onnx() == trained_onnx  # cached, not retrained


@pytest.mark.slow
def test_changed_weights_are_found(trained_onnx: Path) -> None:
    """A trained file that no longer has its recorded sha256 is not trusted."""
    seal = trained_onnx.parent / f"{detector.MODEL_NAME}-{detector.recipe_hash()}.json"
    assert detector._verified(seal)[1] is None
    good = trained_onnx.read_bytes()
    try:
        trained_onnx.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
        files, problem = detector._verified(seal)
        assert files is None and "differs from what was trained" in problem
    finally:
        trained_onnx.write_bytes(good)


@pytest.mark.slow
def test_trained_map_on_held_out_canvases(root: Path, trained_onnx: Path) -> None:
    """mAP@[.5:.95] and mAP50 by pycocotools' COCOeval over the 356 evaluation images, from
    the ONNX file's raw head with class-wise NMS (conf 0.001, IoU 0.6, 100 per image)."""
    ort = pytest.importorskip("onnxruntime")
    coco_module = pytest.importorskip("pycocotools.coco")
    from pycocotools.cocoeval import COCOeval

    pixels, _, _, ids = fitting.load_part(root, canvases.VAL)
    session = ort.InferenceSession(str(trained_onnx))
    batches = [session.run(None, {"images": np.ascontiguousarray(
        chunk.transpose(0, 3, 1, 2), np.float32) / 255.0})[0]
        for chunk in np.array_split(pixels, 8)]
    results = []
    for image_id, found in zip(ids, nms(np.concatenate(batches)), strict=True):
        results += [{"image_id": image_id, "category_id": canvases.CATEGORY_IDS[int(k)],
                     "bbox": [float(x1), float(y1), float(x2 - x1), float(y2 - y1)],
                     "score": float(score)} for x1, y1, x2, y2, score, k in found]
    gt = coco_module.COCO(str(root / canvases.ANNOTATIONS / "instances_val2017.json"))
    check = COCOeval(gt, gt.loadRes(results), "bbox")
    check.evaluate()
    check.accumulate()
    check.summarize()
    assert check.stats[0] >= MAP_FLOOR and check.stats[1] >= MAP50_FLOOR, check.stats[:2]


def nms(output: np.ndarray, conf: float = 0.001, iou: float = 0.6, top: int = 100
        ) -> list[np.ndarray]:
    """Per image of a raw head ``[N, 4 + C, A]``: rows (x1, y1, x2, y2, score, class), greedy
    class-wise NMS, best first (the evaluation's usual settings)."""
    out = []
    for head in output:
        xyxy = np.concatenate([head[:2] - head[2:4] / 2, head[:2] + head[2:4] / 2]).T
        anchor, cls = np.nonzero(head[4:].T > conf)
        score = head[4:].T[anchor, cls]
        keep: list[int] = []
        for c in np.unique(cls):
            mine = np.flatnonzero(cls == c)
            todo = [int(i) for i in mine[np.argsort(-score[mine], kind="stable")]]
            while todo:
                best, todo = todo[0], todo[1:]
                keep.append(best)
                todo = [i for i in todo if _iou(xyxy[anchor[best]], xyxy[anchor[i]]) <= iou]
        keep = sorted(keep, key=lambda k: -score[k])[:top]
        out.append(np.column_stack([xyxy[anchor[keep]], score[keep], cls[keep]]).reshape(-1, 6))
    return out


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    inter = np.clip(np.minimum(a[2:], b[2:]) - np.maximum(a[:2], b[:2]), 0, None).prod()
    return float(inter / max((a[2:] - a[:2]).prod() + (b[2:] - b[:2]).prod() - inter, 1e-9))
