"""The SUT-side post-processing: NMS against a brute-force reference, the two heads, the
thresholds, and LoadGen's response arrays."""

from __future__ import annotations

import numpy as np
import pytest

from quantmark.ground.errors import UserError
from quantmark.tasks.detection.postprocess import Postprocess, decode, nms, responses


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    inter = max(width, 0.0) * max(height, 0.0)
    union = (max(a[2] - a[0], 0.0) * max(a[3] - a[1], 0.0)
             + max(b[2] - b[0], 0.0) * max(b[3] - b[1], 0.0) - inter)
    return inter / union if union > 0 else 0.0


def _brute_nms(boxes: np.ndarray, scores: np.ndarray, threshold: float) -> list[int]:
    """Greedy NMS as the textbook states it: best first, keep a box unless a kept box
    overlaps it by more than the threshold."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    kept: list[int] = []
    for i in order:
        if all(_iou(boxes[i], boxes[k]) <= threshold for k in kept):
            kept.append(i)
    return kept


def _random_boxes(rng: np.random.Generator, count: int) -> np.ndarray:
    corner = rng.uniform(0, 100, (count, 2))
    return np.hstack((corner, corner + rng.uniform(1, 40, (count, 2))))


def _raw(boxes_cxcywh: list, scores: list[list[float]], transposed: bool = False
         ) -> np.ndarray:
    """A one-sample raw head ``[1, 4 + C, A]`` (or its transpose) from per-anchor boxes and
    class scores."""
    head = np.hstack((np.asarray(boxes_cxcywh, np.float32), np.asarray(scores, np.float32)))
    return head[None] if transposed else head.T[None].copy()


@pytest.mark.parametrize("seed", range(60))
def test_nms_matches_a_brute_force_reference(seed):
    rng = np.random.default_rng(seed)
    count = int(rng.integers(0, 80))
    boxes = _random_boxes(rng, count)
    scores = rng.random(count)
    if count > 4:  # ties are broken by index, as in the reference
        scores[:3] = scores[3]
    threshold = float(rng.uniform(0.05, 0.95))
    kept = nms(boxes, scores, threshold)
    assert kept.tolist() == _brute_nms(boxes, scores, threshold)
    assert kept.dtype == np.intp
    assert nms(boxes, scores, threshold, max_keep=5).tolist() == kept[:5].tolist()


def test_nms_of_degenerate_boxes_keeps_them_apart():
    boxes = np.array([[5, 5, 5, 5], [5, 5, 5, 5], [0, 0, 10, 10]], float)
    assert sorted(nms(boxes, np.array([0.9, 0.8, 0.7]), 0.5).tolist()) == [0, 1, 2]


def test_raw_head_decodes_boxes_scores_and_best_class():
    out = decode(_raw([[50, 40, 20, 10]], [[0.1, 0.8, 0.3]]), "raw", num_classes=3)[0]
    assert out.dtype == np.float32 and out.shape == (1, 6)
    assert out[0].tolist() == pytest.approx([40, 35, 60, 45, 0.8, 1])


def test_nms_is_class_aware():
    boxes = [[50, 50, 20, 20], [51, 50, 20, 20]]  # IoU about 0.9
    other_class = decode(_raw(boxes, [[0.9, 0.0], [0.0, 0.8]]), "raw", 2)[0]
    assert sorted(other_class[:, 5].tolist()) == [0, 1]
    same_class = decode(_raw(boxes, [[0.9, 0.0], [0.8, 0.0]]), "raw", 2)[0]
    assert len(same_class) == 1 and same_class[0, 4] == pytest.approx(0.9)


def test_class_aware_nms_equals_nms_per_class():
    rng = np.random.default_rng(7)
    count, classes = 300, 4
    corner = rng.uniform(0, 600, (count, 2))
    size = rng.uniform(5, 80, (count, 2))
    scores = rng.random((count, classes)) ** 3
    got = decode(_raw(np.hstack((corner + size / 2, size)).tolist(), scores.tolist()), "raw",
                 classes, conf_threshold=0.05, iou_threshold=0.5, max_detections=1000)[0]
    best, label = scores.max(axis=1), scores.argmax(axis=1)
    xyxy = np.hstack((corner, corner + size))
    expected = []
    for k in range(classes):
        members = np.flatnonzero((label == k) & (best > 0.05))
        expected += [(best[i], k) for i in members[_brute_nms(xyxy[members], best[members],
                                                                0.5)]]
    expected.sort(key=lambda pair: -pair[0])
    assert [(round(float(s), 5), int(c)) for s, c in got[:, 4:]] == [
        (round(float(s), 5), c) for s, c in expected]


def test_transposed_raw_head_gives_the_same_detections():
    rng = np.random.default_rng(3)
    boxes = np.hstack((rng.uniform(20, 300, (500, 2)), rng.uniform(4, 60, (500, 2))))
    scores = rng.random((500, 5)) ** 4
    plain = decode(_raw(boxes.tolist(), scores.tolist()), "raw", 5)
    turned = decode(_raw(boxes.tolist(), scores.tolist(), transposed=True), "raw", 5)
    assert len(plain[0]) > 10
    np.testing.assert_array_equal(plain[0], turned[0])


def test_square_raw_head_is_read_untransposed():
    """Both axes 4 + C (A = 4 + C anchors): the untransposed form is assumed."""
    head = np.zeros((1, 6, 6), np.float32)
    head[0, :4, 0] = [10, 10, 4, 4]
    head[0, 5, 0] = 0.9  # anchor 0, class 1
    out = decode(head, "raw", num_classes=2)[0]
    assert out.tolist() == [pytest.approx([8, 8, 12, 12, 0.9, 1])]


def test_thresholds_and_the_detection_cap_are_respected():
    rng = np.random.default_rng(11)
    boxes = np.hstack((rng.uniform(20, 600, (4000, 2)), rng.uniform(4, 120, (4000, 2))))
    scores = rng.random((4000, 3)) ** 6
    head = _raw(boxes.tolist(), scores.tolist())
    for conf, iou, cap in ((0.001, 0.7, 300), (0.25, 0.45, 1000), (0.5, 0.3, 5)):
        out = decode(head, "raw", 3, conf, iou, cap)[0]
        assert 0 < len(out) <= cap
        assert (out[:, 4] > conf).all()
        assert (np.diff(out[:, 4]) <= 0).all()
        for k in range(3):
            same = out[out[:, 5] == k, :4]
            for i in range(len(same)):
                assert all(_iou(same[i], same[j]) <= iou + 1e-6 for j in range(i))
    assert len(decode(head, "raw", 3, 0.001, 0.7, 300)[0]) == 300


def test_nan_boxes_are_no_detections():
    head = _raw([[50, 50, 10, 10], [np.nan, 50, 10, 10]], [[0.9], [0.95]])
    out = decode(head, "raw", 1)[0]
    assert out[:, 4].tolist() == [pytest.approx(0.9)]


def test_nms_head_passes_through_without_padding():
    rows = np.array([[[0, 0, 10, 10, 0.3, 2], [5, 5, 20, 20, 0.9, 0], [0, 0, 0, 0, 0, 0],
                      [1, 1, 2, 2, 0.0005, 1], [3, 3, 9, 9, -1, 0]],
                     [[0, 0, 0, 0, 0, 0]] * 5], np.float32)
    first, second = decode(rows, "nms", num_classes=3)
    assert first.tolist() == [pytest.approx([5, 5, 20, 20, 0.9, 0]),
                              pytest.approx([0, 0, 10, 10, 0.3, 2])]
    assert second.shape == (0, 6)
    assert len(decode(rows, "nms", 3, max_detections=1)[0]) == 1
    assert len(decode(rows, "nms", 3, conf_threshold=0.5)[0]) == 1


def test_responses_are_contiguous_float32_rows_with_a_sentinel_when_empty():
    found = [np.array([[1, 2, 3, 4, 0.5, 7]], np.float32), np.zeros((0, 6), np.float32)]
    first, empty = responses(found, [12, 40])
    for response in (first, empty):
        assert response.dtype == np.float32 and response.flags.c_contiguous
        assert response.shape == (1, 7)
    assert first.tolist() == [[12, 1, 2, 3, 4, 0.5, 7]]
    assert empty.tolist() == [[40, 0, 0, 0, 0, 0, -1]]
    with pytest.raises(ValueError):
        responses(found, [1])


def test_postprocess_is_decode_then_responses_and_describes_itself():
    rng = np.random.default_rng(5)
    head = rng.random((3, 4 + 2, 200)).astype(np.float32) * 50
    head[:, 4:] = rng.random((3, 2, 200)) ** 8
    post = Postprocess("raw", 2, conf_threshold=0.2, iou_threshold=0.5, max_detections=20)
    got = post(head, [7, 8, 9])
    want = responses(decode(head, "raw", 2, 0.2, 0.5, 20), [7, 8, 9])
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    assert post.describe()["nms"] == "quantmark numpy NMS (shared)"
    assert post.describe()["max_detections"] == 20
    assert Postprocess("nms", 80).describe()["nms"] == "in the model"


@pytest.mark.parametrize("args", [("box", 3), ("raw", 0)])
def test_bad_settings_are_user_errors(args):
    with pytest.raises(UserError):
        Postprocess(*args)
    with pytest.raises(UserError):
        Postprocess("raw", 3, conf_threshold=1.5)


def test_bad_outputs_are_user_errors():
    with pytest.raises(UserError, match="4 \\+ num_classes"):
        decode(np.zeros((1, 10, 30), np.float32), "raw", num_classes=80)
    with pytest.raises(UserError, match="3 axes"):
        decode(np.zeros((10, 30), np.float32), "raw", num_classes=6)
    with pytest.raises(UserError, match="K, 6"):
        decode(np.zeros((1, 10, 7), np.float32), "nms", num_classes=6)


def test_decode_of_a_full_size_head_keeps_300_a_sample():
    """The timed path's shape: a YOLO11-sized batch of 8 (80 classes, 8400 anchors) at
    MLPerf's conf 0.001 (each anchor's best score spread as a real detector's). Its speed is
    measured in ``bench/nms_ops.py`` (BENCHMARKS.md), not asserted here."""
    rng = np.random.default_rng(0)
    head = np.empty((8, 84, 8400), np.float32)
    head[:, :2] = rng.uniform(0, 640, (8, 2, 8400))
    head[:, 2:4] = rng.uniform(4, 200, (8, 2, 8400))
    head[:, 4:] = rng.random((8, 80, 8400)) ** 40
    found = decode(head, "raw", 80)
    assert all(len(f) == 300 for f in found)
