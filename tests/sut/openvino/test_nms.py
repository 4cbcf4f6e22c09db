"""OpenVINO's NMS-9 op keeps exactly what quantmark's numpy NMS keeps (seeded box sets and the
edges of tests/tasks/detection/nms_cases) once its threshold is moved to the next float32
(it drops IoU >= t, numpy IoU > t; unmoved, the edges tell), a sample a call and a whole padded
batch in one infer request (each sample what numpy keeps of it alone; the postprocessing
answering the same bytes on both paths), and a detector's run on an OpenVINO SUT records that
op as its NMS."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("openvino")

from quantmark.sut.openvino import nms  # noqa: E402
from quantmark.tasks.detection.postprocess import NativeSuppressor  # noqa: E402
from tests.tasks.detection.nms_cases import (  # noqa: E402
    batch_differences,
    decode_paths,
    differences,
    recorded_nms,
)


def test_the_openvino_op_keeps_what_numpy_keeps() -> None:
    assert differences(NativeSuppressor(nms.create())) == []


def test_a_batch_in_one_request_keeps_per_sample_what_numpy_keeps() -> None:
    suppressor = NativeSuppressor(nms.create())
    assert suppressor.batched
    assert batch_differences(suppressor.suppress_batch) == []


def test_the_batched_and_per_sample_paths_answer_the_same_bytes() -> None:
    assert decode_paths(nms.create()) == []


def test_the_unmoved_threshold_would_drop_boxes_at_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nms, "op_threshold", np.float32)
    found = differences(NativeSuppressor(nms.create()))
    assert any("exactly at the threshold" in line for line in found)
    batched = batch_differences(NativeSuppressor(nms.create()).suppress_batch)
    assert any("exactly at the threshold" in line for line in batched)


def test_a_run_records_the_openvino_op() -> None:
    # the run's record names it (tests/tasks/detection/test_run.py runs ov-int8 end to end,
    # tests/quantmark/diagnosis/test_detection.py profiles ov-int8 and ort-int8 with it)
    post = recorded_nms("ov-fp32")
    assert post["nms"] == nms.NAME and post["nms_reason"] is None
