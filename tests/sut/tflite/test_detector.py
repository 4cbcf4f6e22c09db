"""TFLite / LiteRT SUTs on a detector: the tiny YOLO fixture (raw head and nms head) through
onnx2tf -> SavedModel -> TFLiteConverter, every precision (the nms head in the slow tier).

Measured here (seeded batch of 2, 64 px images, random weights), against the fp32 .tflite:
raw head, tflite-fp16 boxes within 0.001 px, tflite-int8dyn 0.005 px, tflite-int8 (decode kept
float) 0.05 px with scores within 0.002; the assertions leave 5-10x margin. The nms head ranks
80 anchors whose scores lie within 1e-4 of each other (random weights), so any precision that
moves a score by more reorders rows: its boxes are compared pairwise (``_paired``), not row by
row. fp32 matches onnxruntime's run of the file to 1e-4 (boxes reach 64 px).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")
pytest.importorskip("tensorflow")
pytest.importorskip("onnx2tf")

from quantmark.ground.errors import SutError, UserError  # noqa: E402
from quantmark.sut.interface import SutOptions  # noqa: E402
from quantmark.sut.tflite.backend import TFLiteBackend, create  # noqa: E402
from quantmark.sut.tflite.convert import load_user_tflite, tflite_key  # noqa: E402
from quantmark.sut.tflite.detection import _paired  # noqa: E402
from tests.digits_model import ArrayCalibration  # noqa: E402
from tests.tasks.detection.tiny_cases import (  # noqa: E402
    CLASSES,
    SIZE,
    detector_files,
    detector_spec,
    onnxruntime_output,
    seeded_images,
)

SUTS = ("tflite-fp32", "tflite-fp16", "tflite-int8dyn", "tflite-int8")
#: the raw head is the quick tier; the nms head's conversions run in the slow one
HEADS = ["raw", pytest.param("nms", marks=pytest.mark.slow)]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return detector_files(tmp_path_factory.mktemp("tiny-yolo"))


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    return seeded_images(2)


@pytest.fixture(scope="module")
def expected(files: dict[str, Path], images: np.ndarray) -> dict[str, np.ndarray]:
    return {head: onnxruntime_output(path, images) for head, path in files.items()}


def _load(name: str, head: str, path: Path) -> TFLiteBackend:
    calibration = ArrayCalibration(np.random.default_rng(0).random((32, 3, SIZE, SIZE),
                                                                   dtype=np.float32),
                                   source="uniform noise")
    options = SutOptions(model="tiny-yolo", scenario="Offline", threads=2, model_path=str(path))
    backend = create(name, options, detector_spec(head), calibration)
    backend.load()
    return backend


class _PerHead(dict):
    """(SUT, head) -> value; a head's four SUTs are built when a test first asks for one, so
    only the slow tier pays the nms head's conversions (~12 s each head on 2 cores)."""

    def __init__(self, make: Any) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, key: tuple[str, str]) -> Any:
        self.update({(name, key[1]): value for name, value in self.make(key[1]).items()})
        return self[key]


@pytest.fixture(scope="module")
def backends(files: dict[str, Path]) -> _PerHead:
    """Every TFLite SUT, per head: one onnx2tf conversion and four TFLite ones."""
    return _PerHead(lambda head: {name: _load(name, head, files[head]) for name in SUTS})


@pytest.fixture(scope="module")
def outputs(backends: _PerHead, images: np.ndarray) -> _PerHead:
    x = np.ascontiguousarray(images.transpose(0, 2, 3, 1))

    def predict(head: str) -> dict[str, np.ndarray]:
        return {name: backends[name, head].predict(backends[name, head].encode_samples(x))
                for name in SUTS}
    return _PerHead(predict)


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("name", SUTS)
def test_output_is_the_onnx_models(outputs, expected, backends, name: str, head: str) -> None:
    got, backend = outputs[name, head], backends[name, head]
    assert got.shape == expected[head].shape == ((2, 4 + CLASSES, 80) if head == "raw"
                                                   else (2, 20, 6))
    assert got.dtype == np.float32 and backend.layout == "NHWC" and backend.label_offset == 0
    output = backend.describe()["output"]
    assert output["task"] == "detection" and output["head"] == head
    assert output["transposed_back_to"] is None  # onnx2tf kept the ONNX layout here


@pytest.mark.parametrize("head", HEADS)
def test_fp32_matches_onnxruntime(outputs, expected, backends, head: str) -> None:
    np.testing.assert_allclose(outputs["tflite-fp32", head], expected[head], rtol=0, atol=1e-4)
    info = backends["tflite-fp32", head].describe()
    assert info["executed_precision"] == "fp32" and info["int8_weight_tensors"] == 0
    saved = backends["tflite-fp32", head].artifact.meta
    assert saved["task"] == "detection" and saved["head"] == head


def test_raw_head_reduced_precision_box_error(outputs) -> None:
    """Box rows (cx, cy, w, h in pixels) and score rows against the fp32 .tflite."""
    fp32 = outputs["tflite-fp32", "raw"]
    limits = {"tflite-fp16": (0.01, 1e-3), "tflite-int8dyn": (0.05, 1e-3),
              "tflite-int8": (0.5, 0.01)}
    for name, (box_px, score) in limits.items():
        got = outputs[name, "raw"]
        assert np.abs(got[:, :4] - fp32[:, :4]).max() < box_px, name
        assert np.abs(got[:, 4:] - fp32[:, 4:]).max() < score, name


@pytest.mark.slow
def test_nms_head_reduced_precision_box_error(outputs) -> None:
    """Scores rank by rank (both sorted); boxes of the detections the two models share."""
    fp32 = outputs["tflite-fp32", "nms"]
    for name in ("tflite-fp16", "tflite-int8dyn", "tflite-int8"):
        got = outputs[name, "nms"]
        assert np.abs(got[..., 4] - fp32[..., 4]).max() < 0.01, name
        mine, theirs = _paired(got, fp32)
        assert len(mine) >= 0.5 * got.shape[0] * got.shape[1], name
        assert np.median(np.abs(mine[:, :4] - theirs[:, :4])) < 0.5, name


@pytest.mark.parametrize("head", HEADS)
def test_int8_proves_int8_kernels_with_a_float_head(backends, head: str) -> None:
    backend = backends["tflite-int8", head]
    info = backend.describe()
    assert info["executed_precision"].startswith("int8")
    # every backbone and head convolution int8; the DFL's bin weighting stays float
    assert info["compute_ops"]["integer"] == 8 and info["compute_ops"]["float"] == 1
    assert info["int8_weight_tensors"] > 0 and info["tensor_types"]["int8"] > 0
    assert info["input"]["dtype"] == info["output"]["dtype"] == "float32"
    assert info["xnnpack"]["partitions"] >= 1
    meta = backend.artifact.meta
    assert meta["file_precision"] == "int8" and meta["recipe"]["inference_output_type"] == \
        "float32"
    detector = meta["detector"]
    assert detector["float_head_tensors"] > 10
    assert set(detector["head_integer_ops"]) <= {"QUANTIZE"}  # the LOGISTIC's fixed int8 grid
    error = detector["int8_vs_fp32"]
    assert error["samples"] == 8 and error["score_max_abs"] < 0.01
    assert (error["box_max_abs_px"] if head == "raw" else error["box_median_abs_px"]) < 0.5
    if head == "nms":
        assert "TOPK_V2" in detector["float_head_op_types"]  # denied by type: kept float


def test_int8dyn_and_fp16_evidence(backends) -> None:
    dyn = backends["tflite-int8dyn", "raw"].describe()
    assert dyn["executed_precision"].startswith("int8 dynamic")
    assert dyn["compute_ops"]["hybrid"] > 0 and dyn["int8_weight_tensors"] > 0
    fp16 = backends["tflite-fp16", "raw"].describe()
    assert fp16["executed_precision"] == "fp32 (fp16 weights)"
    assert fp16["fp16_weight_dequantize_ops"] > 0


def test_int8_refuses_a_float_detector(backends) -> None:
    with pytest.raises(SutError, match="refusing to measure FP32 as INT8"):
        TFLiteBackend(backends["tflite-fp32", "raw"].artifact, "int8", threads=1).load()


def test_artifact_keys_never_meet_a_classifiers(backends) -> None:
    saved_meta = {"model": "tiny-yolo", "num_classes": CLASSES}
    from quantmark.models.artifacts import Artifact

    saved = Artifact(path=Path("saved_model.pb"), format="saved_model", precision="fp32",
                     key="k", weights="w", source_hash="s", meta=saved_meta)
    detector = dataclasses.replace(saved, meta={**saved_meta, "task": "detection",
                                                "head": "raw"})
    for precision in ("fp32", "int8"):
        assert tflite_key(saved, precision, "c") != tflite_key(detector, precision, "c")
    assert len({backends[name, "raw"].artifact.key for name in SUTS}) == len(SUTS)


def test_user_tflite_detector_and_one_line_refusals(backends, images, outputs) -> None:
    path = backends["tflite-fp32", "raw"].artifact.path
    artifact = load_user_tflite(path, detector_spec("raw"))
    assert artifact.meta["task"] == "detection" and artifact.meta["output_transposed"] is False
    backend = TFLiteBackend(artifact, "fp32", threads=1)
    backend.load()
    x = np.ascontiguousarray(images.transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(backend.predict(x), outputs["tflite-fp32", "raw"])
    for spec, wanted in ((dataclasses.replace(detector_spec("raw"), num_classes=5), "raw"),
                         (detector_spec("nms"), "nms")):
        with pytest.raises(UserError, match=f"no {wanted} detector output") as caught:
            load_user_tflite(path, spec)
        assert "\n" not in str(caught.value)


def _transposed_detector(path: Path) -> Path:
    """A .tflite whose raw head is [N, anchors, 4+C] (64 anchors, 3 classes)."""
    import tensorflow as tf

    weight = tf.constant(np.random.default_rng(0).standard_normal((8, 8, 3, 7), np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, SIZE, SIZE, 3], tf.float32)])
    def forward(x):
        return tf.reshape(tf.nn.conv2d(x, weight, 8, "VALID"), [-1, 64, 4 + CLASSES])

    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [forward.get_concrete_function()], forward)
    path.write_bytes(converter.convert())
    return path


def test_a_transposed_output_is_turned_back_and_recorded(tmp_path, images) -> None:
    path = _transposed_detector(tmp_path / "transposed.tflite")
    artifact = load_user_tflite(path, detector_spec("raw"))
    assert artifact.meta["output_transposed"] is True
    backend = TFLiteBackend(artifact, "fp32", threads=1)
    backend.load()
    x = np.ascontiguousarray(images.transpose(0, 2, 3, 1))
    got = backend.predict(x)
    assert got.shape == (2, 4 + CLASSES, 64) and got.flags["C_CONTIGUOUS"]
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    interpreter.resize_tensor_input(0, list(x.shape))
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    raw = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    np.testing.assert_array_equal(got, raw.transpose(0, 2, 1))
    assert backend.describe()["output"]["transposed_back_to"] == "[N,4+classes,anchors]"


def test_profile_and_layer_capture_run_on_the_detector(backends, images) -> None:
    """The diagnose and profile hooks take the detector's graph: its shape arithmetic feeds
    0-d operands, which the op-isolation profile once turned 1-d."""
    from quantmark.sut.tflite.diagnose import capture
    from quantmark.sut.tflite.profile import isolated_profile

    backend = backends["tflite-int8", "raw"]
    x = np.ascontiguousarray(images.transpose(0, 2, 3, 1))
    profile = isolated_profile(backend, x, 2, 1, "test: ops timed in isolation")
    assert {"SHAPE", "STRIDED_SLICE", "CONV_2D"} <= {layer.op_type for layer in profile.layers}
    captured = capture(backend, x)
    assert any(layer.precision == "int8" for layer in captured.layers)
    assert any(layer.precision == "fp32" and layer.op_type == "SOFTMAX"
               for layer in captured.layers)  # the DFL softmax: float head
