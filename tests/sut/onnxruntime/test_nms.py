"""ONNX Runtime's NonMaxSuppression op keeps exactly what quantmark's numpy NMS keeps (seeded
box sets and the edges of tests/tasks/detection/nms_cases), a sample a call and a whole padded
batch in one run (each sample what numpy keeps of it alone; the postprocessing answering the
same bytes on both paths), and a detector's run on an ONNX Runtime SUT records that op as its
NMS."""

from __future__ import annotations

import pytest

pytest.importorskip("onnxruntime")

from quantmark.sut.onnxruntime.nms import NAME, create  # noqa: E402
from quantmark.tasks.detection.postprocess import NativeSuppressor  # noqa: E402
from tests.tasks.detection.nms_cases import (  # noqa: E402
    batch_differences,
    decode_paths,
    differences,
    recorded_nms,
)


def test_the_onnxruntime_op_keeps_what_numpy_keeps() -> None:
    assert differences(NativeSuppressor(create())) == []


def test_a_batch_in_one_run_keeps_per_sample_what_numpy_keeps() -> None:
    suppressor = NativeSuppressor(create())
    assert suppressor.batched
    assert batch_differences(suppressor.suppress_batch) == []


def test_the_batched_and_per_sample_paths_answer_the_same_bytes() -> None:
    assert decode_paths(create()) == []


def test_a_run_records_the_onnxruntime_op() -> None:
    # the run's record names it (tests/tasks/detection/test_run.py runs ov-int8 end to end,
    # tests/quantmark/diagnosis/test_detection.py profiles ov-int8 and ort-int8 with it)
    post = recorded_nms("ort-fp32")
    assert post["nms"] == NAME and post["nms_reason"] is None
