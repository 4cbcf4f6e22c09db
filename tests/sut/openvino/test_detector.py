"""OpenVINO SUTs on a YOLO-style detector (the tiny Ultralytics-shaped fixture): every SUT runs
both heads, FP32 is the file's own function, ov-int8 proves INT8 convolutions ran while NNCF's
ignored scope kept the head's post-processing float, and unfit files are refused in one line."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
pytest.importorskip("nncf")
ort = pytest.importorskip("onnxruntime")

from quantmark.ground.errors import UserError  # noqa: E402
from quantmark.sut.openvino.backend import create  # noqa: E402
from tests.tasks.detection.tiny_cases import (  # noqa: E402
    SHAPES,
    box_errors,
    built_outputs,
    detector_files,
    detector_options,
    detector_spec,
    onnxruntime_output,
    seeded_images,
)

SUTS = ("ov-fp32", "ov-bf16", "ov-fp16", "ov-int8")
HEADS = ("raw", "nms")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return detector_files(tmp_path_factory.mktemp("tiny-yolo"))


@pytest.fixture(scope="module")
def batch() -> np.ndarray:
    return seeded_images(1)


@pytest.fixture(scope="module")
def runs(files: dict[str, Path], batch: np.ndarray) -> Iterator[dict[tuple[str, str], Any]]:
    """(sut, head) -> (output, describe(), artifact meta, label offset), each built once."""
    yield built_outputs(create, SUTS, HEADS, files, batch)


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("name", SUTS)
def test_every_sut_returns_the_heads_own_output(runs: dict, name: str, head: str) -> None:
    output, described, _, label_offset = runs[name, head]
    assert output.shape == SHAPES[head] and output.dtype == np.float32
    assert label_offset == 0 and described["detector"]["head"] == head


@pytest.mark.parametrize("head", HEADS)
def test_fp32_is_the_files_own_function(runs: dict, files: dict, batch: np.ndarray,
                                        head: str) -> None:
    reference = onnxruntime_output(files[head], batch)
    output, described, meta, _ = runs["ov-fp32", head]
    assert np.abs(output - reference).max() <= 1e-5 * np.abs(reference).max()
    assert described["executed_precision"] == "fp32"
    # the nms head's Slice -> GatherElements trips convert_model: the fix is on record
    assert ("converter_workaround" in meta) == (head == "nms")


@pytest.mark.parametrize("head", HEADS)
def test_int8_runs_int8_convolutions_with_a_float_head(runs: dict, files: dict,
                                                       batch: np.ndarray, head: str) -> None:
    """INT8 executed (the runtime graph's u8 convolutions: all but the DFL one) and the head
    stayed float: NNCF's ignored scope recorded, the head's runtime layers f32 and the boxes
    close to FP32's. Measured: box median 0.001 px, scores within 1e-4 (NNCF on the whole
    graph: 0.14 px median, 0.6 px max)."""
    output, described, meta, _ = runs["ov-int8", head]
    assert described["compute_layers_by_precision"] == {"int8": {"Convolution": 8},
                                                        "fp32": {"Convolution": 1}}
    recorded = meta["detector_float_head"]
    assert meta["nncf_ignored_scope"] == recorded["nodes"]
    assert {"/dfl/Conv", "/Softmax", "/Sigmoid"} <= set(recorded["nodes"])
    assert len(recorded["after"]) == 4  # the box and class convolutions of both strides
    layers = described["detector"]["float_head_layers"]
    assert {"Convolution:f32", "Softmax:f32", "Concatenation:f32"} <= set(layers)
    assert not any(key.endswith((":i8", ":u8")) for key in layers)
    box, score = box_errors(output, onnxruntime_output(files[head], batch), head)
    assert box < 0.25 and score < 0.01, (box, score)


@pytest.mark.parametrize("name", ["ov-bf16", "ov-fp16"])
def test_reduced_float_boxes_stay_within_a_pixel(runs: dict, files: dict, batch: np.ndarray,
                                                 name: str) -> None:
    """bf16 (what this CPU runs for both hints) rounds 240 px boxes to 1-2 px steps: measured
    0.04 px median, 0.4 px max."""
    output, _, _, _ = runs[name, "raw"]
    box, score = box_errors(output, onnxruntime_output(files["raw"], batch), "raw")
    assert box < 1.0 and score < 0.05, (box, score)


def test_a_users_detector_ir_runs_and_a_classifier_ir_is_refused(files: dict, batch: np.ndarray,
                                                                  tmp_path: Path) -> None:
    detector = tmp_path / "detector.xml"
    ov.save_model(ov.convert_model(str(files["raw"])), str(detector), compress_to_fp16=False)
    backend = create("ov-fp32", detector_options(detector), detector_spec("raw"), None)
    backend.load()
    assert backend.predict(batch).shape == SHAPES["raw"]
    assert backend.describe()["detector"]["head"] == "raw"
    backend.close()
    classifier = tmp_path / "classifier.xml"
    ov.save_model(_classifier_model(), str(classifier))
    with pytest.raises(UserError) as refused:
        create("ov-fp32", detector_options(classifier), detector_spec("raw"), None)
    assert "\n" not in str(refused.value) and "[N, 3]" in str(refused.value)


def _classifier_model() -> Any:
    import openvino.opset13 as ops

    images = ops.parameter([-1, 3, 64, 64], np.float32, name="images")
    pooled = ops.reduce_mean(images, ops.constant(np.array([2, 3])), keep_dims=False)
    return ov.Model([pooled], [images], "classifier")


def test_a_classifier_onnx_is_refused_for_a_detector(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("GlobalAveragePool", ["images"], ["pooled"]),
         helper.make_node("Flatten", ["pooled"], ["logits"])], "classifier",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, 64, 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])])
    path = tmp_path / "classifier.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(UserError) as refused:
        create("ov-int8", detector_options(path), detector_spec("raw"), None)
    assert "\n" not in str(refused.value) and "detector" in str(refused.value)


def test_a_file_of_the_other_head_is_refused(files: dict) -> None:
    with pytest.raises(UserError) as refused:
        create("ov-fp32", detector_options(files["nms"]), detector_spec("raw"), None)
    message = str(refused.value)
    assert "\n" not in message and "[N, 20, 6]" in message and "[N, 4+3, anchors]" in message


def test_a_detectors_artifacts_never_share_a_classifiers_key(files: dict) -> None:
    from quantmark.models.onnx_export import load_user_onnx
    from quantmark.sut.openvino.convert import convert_key, quantize_key

    detector = load_user_onnx(files["raw"], detector_spec("raw"))
    classifier = replace(detector, meta={**detector.meta, "task": "classification", "head": ""})
    other_head = replace(detector, meta={**detector.meta, "head": "nms"})
    trio = (detector, classifier, other_head)
    assert len({convert_key(art, detector_spec("raw")) for art in trio}) == 3
    assert len({quantize_key(art, "calibration") for art in trio}) == 3
