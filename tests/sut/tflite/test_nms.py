"""LiteRT's NON_MAX_SUPPRESSION_V4 (converted once by TF's TFLite converter, cached, run in
ai-edge-litert) keeps exactly what quantmark's numpy NMS keeps (seeded box sets, sets with
tied scores and the edges of tests/tasks/detection/nms_cases) with its inputs adapted: the
threshold moved to the next float32, ranks as scores; unadapted, the edges tell. A
detector's run on a TFLite SUT records that op as its NMS."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")
pytest.importorskip("tensorflow")

from quantmark.sut.tflite import nms  # noqa: E402
from quantmark.tasks.detection.postprocess import NativeSuppressor  # noqa: E402
from tests.tasks.detection.nms_cases import differences, recorded_nms  # noqa: E402


def test_the_litert_op_keeps_what_numpy_keeps() -> None:
    op = nms.create()
    ops = {detail["op_name"] for detail in op._interpreter()._get_ops_details()}
    assert ops == {nms.OP}  # the builtin op itself, no TF fallback
    assert differences(NativeSuppressor(op)) == []


def test_the_unmoved_threshold_would_drop_boxes_at_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nms, "op_threshold", np.float32)
    found = differences(NativeSuppressor(nms.create()))
    assert any("exactly at the threshold" in line for line in found)


def test_boxes_without_an_area_would_be_kept_again_and_again() -> None:
    """The reason NativeSuppressor keeps such boxes away from the op."""
    boxes = np.array([[5, 5, 6, 6], [3, 3, 3, 3], [7, 7, 8, 8]], np.float32)
    scores = np.array([0.9, 0.8, 0.7], np.float32)
    assert nms.create()(boxes, scores, 0.5, 3).tolist() == [0, 1, 1]
    assert NativeSuppressor(nms.create())(boxes, scores, 0.5, 3).tolist() == [0, 1, 2]


def test_a_run_records_the_litert_op() -> None:
    # the run's record names it (tests/tasks/detection/test_run.py runs ov-int8 end to end,
    # tests/quantmark/diagnosis/test_detection.py profiles ov-int8 and ort-int8 with it)
    post = recorded_nms("tflite-fp32")
    assert post["nms"] == nms.NAME and post["nms_reason"] is None
