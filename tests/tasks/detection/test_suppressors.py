"""The suppression step a detector's postprocessing hands to its SUT's framework: the equivalence
cases can tell an NMS that differs from numpy's, boxes without an area are kept beside the op
as numpy keeps them, an op that fails to build is the SUT's one-line error (never numpy in its
place), a model with NMS inside builds none, and the profile times the op the SUT uses."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from quantmark.diagnosis import postprocess_times
from quantmark.ground.errors import SutError
from quantmark.sut import registry
from quantmark.sut.info import SutInfo
from quantmark.tasks.catalog import get_task
from quantmark.tasks.detection import definition
from quantmark.tasks.detection.postprocess import (
    SHARED_NMS,
    NativeSuppressor,
    NumpySuppressor,
    Postprocess,
    nms,
)
from tests.tasks.detection.nms_cases import differences
from tests.tasks.detection.tiny_cases import FixedHeadBackend, detector_spec


class _NumpyOp:
    """numpy's NMS posing as a framework's op."""

    name = "numpy posing as an op"

    def __call__(self, boxes, scores, iou_threshold, max_keep):
        assert (boxes[:, 2:] > boxes[:, :2]).all()  # NativeSuppressor passes boxes with area
        return nms(boxes, scores, iou_threshold, max_keep)


def _at_or_above(boxes, scores, iou_threshold, max_keep):
    return nms(boxes, scores, np.nextafter(iou_threshold, -1.0), max_keep)


def _ties_by_higher_index(boxes, scores, iou_threshold, max_keep):
    flipped = nms(boxes[::-1], scores[::-1], iou_threshold, max_keep)
    return len(scores) - 1 - flipped


def test_the_cases_tell_an_nms_that_differs_from_numpys() -> None:
    assert differences(NumpySuppressor()) == []
    assert any("exactly at the threshold" in d for d in differences(_at_or_above))
    assert any("tied scores" in d or "(ties)" in d for d in differences(_ties_by_higher_index))


def test_boxes_without_an_area_are_kept_beside_the_op_as_numpy_keeps_them() -> None:
    assert differences(NativeSuppressor(_NumpyOp())) == []


def _fake_sut(monkeypatch: pytest.MonkeyPatch, build) -> SutInfo:
    sut = replace(registry.get_sut("ort-fp32"), name="fake-fp32", framework="fakework")
    monkeypatch.setattr(registry, "load_nms", lambda info: build)
    monkeypatch.setattr(definition, "_SUPPRESSORS", {})
    return sut


def test_an_op_that_fails_to_build_is_one_line_and_never_numpy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken():
        raise RuntimeError("the op library is missing\nsecond line of a long report")

    task = get_task("detection").for_sut(_fake_sut(monkeypatch, broken))
    with pytest.raises(SutError) as raised:
        task.respond(detector_spec("raw"))
    assert str(raised.value) == ("fake-fp32: fakework's NMS op could not be built "
                                 "(RuntimeError: the op library is missing)")


def test_the_record_names_the_op_and_a_model_with_nms_inside_builds_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    built = []

    def build():
        built.append(1)
        return _NumpyOp()

    task = get_task("detection").for_sut(_fake_sut(monkeypatch, build))
    post = task.describe(detector_spec("raw"))["postprocess"]
    assert post["nms"] == _NumpyOp.name and post["nms_reason"] is None
    assert task.respond(detector_spec("raw")).suppressor.name == _NumpyOp.name
    assert built == [1]  # once per process
    inside = task.describe(detector_spec("nms"))["postprocess"]
    assert inside["nms"] == "in the model" and inside["nms_reason"] is None
    unbound = get_task("detection").describe(detector_spec("raw"))["postprocess"]
    assert unbound["nms"] == SHARED_NMS  # diagnose judges accuracy on the shared NMS


def test_the_profile_times_the_op_the_sut_uses_and_names_it() -> None:
    respond = Postprocess("raw", 3, suppressor=NativeSuppressor(_NumpyOp()))
    steps = postprocess_times.time_respond(respond, FixedHeadBackend(), np.zeros((2, 1)), 3, 1)
    row = postprocess_times.nms_row(_NumpyOp.name)
    assert [s.name for s in steps] == [row, postprocess_times.REST_ROW]
    assert steps[0].kernel == _NumpyOp.name and steps[0].median_ms > 0
    record = postprocess_times.record(steps, 1.0)
    assert record["steps"][0]["kernel"] == _NumpyOp.name
    assert respond.suppressor.op.__class__ is _NumpyOp  # the SUT's own step is left as it was
