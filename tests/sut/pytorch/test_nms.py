"""torch has no NMS op without torchvision (which quantmark does not depend on): a detector on a
torch SUT suppresses with the shared numpy NMS, and the record says so and why."""

from __future__ import annotations

from quantmark.sut.registry import get_sut, load_nms
from quantmark.tasks.catalog import get_task
from quantmark.tasks.detection.postprocess import SHARED_NMS, NumpySuppressor
from tests.tasks.detection.tiny_cases import detector_spec


def test_torch_suts_record_the_shared_numpy_nms_and_why() -> None:
    sut = get_sut("torch-fp32")
    assert load_nms(sut) is None
    task = get_task("detection").for_sut(sut)
    respond = task.respond(detector_spec("raw"))
    assert isinstance(respond.suppressor, NumpySuppressor)
    post = task.describe(detector_spec("raw"))["postprocess"]
    assert post["nms"] == SHARED_NMS
    assert post["nms_reason"] == "torch has no NMS op without torchvision"
