"""TFLite layer diagnosis on the digits CNN: every op's output read from the SUT's own .tflite,
INT8 against FP32 by name, and tflite-int8 rebuilt with a layer kept in float or damaged."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")

from quantmark.ground.errors import UserError  # noqa: E402
from quantmark.sut.interface import SutOptions  # noqa: E402
from quantmark.sut.layers import LayerCapture, Recipe  # noqa: E402
from quantmark.sut.tflite import diagnose  # noqa: E402
from quantmark.sut.tflite.backend import TFLiteBackend, create  # noqa: E402
from tests.digits_model import DIGITS_SPEC, top1  # noqa: E402

#: the digits CNN as TFLite runs it: Conv+BN+ReLU fused, TRANSPOSE and RESHAPE (flatten) skipped
OP_TYPES = ["CONV_2D", "MAX_POOL_2D", "CONV_2D", "MAX_POOL_2D", "CONV_2D", "MEAN",
            "FULLY_CONNECTED"]
SHAPES = [(16, 16, 32, 32), (16, 16, 16, 16), (16, 32, 16, 16), (16, 32, 8, 8), (16, 64, 8, 8),
          (16, 64, 1, 1), (16, 10)]


def _nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def sqnr(reference: np.ndarray, test: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(reference ** 2) / np.sum((reference - test) ** 2)))


@pytest.fixture(scope="module")
def options(digits_weights) -> SutOptions:
    return SutOptions(model=DIGITS_SPEC.name, scenario="Offline", threads=2,
                      model_path=str(digits_weights))


@pytest.fixture(scope="module")
def backends(options, digits_calibration) -> dict[str, TFLiteBackend]:
    pytest.importorskip("tensorflow")
    pytest.importorskip("onnx2tf")
    return {name: create(name, options, DIGITS_SPEC, digits_calibration)
            for name in ("tflite-fp32", "tflite-int8")}


@pytest.fixture(scope="module")
def samples(digits_data) -> np.ndarray:
    return _nhwc(digits_data.eval_x[:16])


@pytest.fixture(scope="module")
def captures(backends, samples) -> dict[str, LayerCapture]:
    return {name: diagnose.capture(backend, samples) for name, backend in backends.items()}


@pytest.fixture(scope="module")
def excluded(captures) -> str:
    """The second conv: a layer with int8 layers both before and after it."""
    return captures["tflite-int8"].layers[2].name


def test_layers_named_alike_in_nchw(captures) -> None:
    fp32, int8 = captures["tflite-fp32"], captures["tflite-int8"]
    assert [layer.name for layer in fp32.layers] == [layer.name for layer in int8.layers]
    for capture in (fp32, int8):
        assert [layer.op_type for layer in capture.layers] == OP_TYPES
        assert [layer.value.shape for layer in capture.layers] == SHAPES
        assert all(layer.value.dtype == np.float32 for layer in capture.layers)
        assert capture.notes["ops_skipped"] == {"RESHAPE": 1, "TRANSPOSE": 1}
        assert capture.notes["duplicate_names"] == []
    names = [layer.name for layer in int8.layers]
    assert int8.layers[0].inputs == ()  # fed by the graph input
    assert int8.layers[1].inputs == (names[0],)
    assert int8.layers[-1].inputs == (names[5],)  # through RESHAPE and TRANSPOSE to MEAN
    # ReLU output in NCHW: channels on axis 1, non-negative
    assert int8.layers[0].value.min() >= 0 and fp32.layers[0].value.min() >= 0


def test_precision_read_from_the_model(captures) -> None:
    assert {layer.precision for layer in captures["tflite-fp32"].layers} == {"fp32"}
    assert {layer.precision for layer in captures["tflite-int8"].layers} == {"int8"}
    assert captures["tflite-int8"].notes["input"]["dtype"] == "int8"


def test_last_layer_is_what_the_sut_predicts(backends, captures, samples) -> None:
    for name, backend in backends.items():
        backend.load()
        np.testing.assert_allclose(captures[name].layers[-1].value, backend.predict(samples),
                                   rtol=0, atol=1e-6)


def test_int8_layers_track_fp32(captures) -> None:
    pairs = zip(captures["tflite-fp32"].layers, captures["tflite-int8"].layers, strict=True)
    values = [sqnr(f.value, q.value) for f, q in pairs]
    assert all(np.isfinite(values)) and min(values) > 15, values


def test_empty_recipe_is_the_sut_artifact(backends, options, digits_calibration) -> None:
    rebuilt = diagnose.rebuild("tflite-int8", options, DIGITS_SPEC, digits_calibration, Recipe())
    assert rebuilt.artifact.key == backends["tflite-int8"].artifact.key
    assert rebuilt.artifact.path == backends["tflite-int8"].artifact.path


def test_excluded_layer_runs_in_float(backends, captures, excluded, options, samples,
                                      digits_calibration, digits_data) -> None:
    backend = diagnose.rebuild("tflite-int8", options, DIGITS_SPEC, digits_calibration,
                               Recipe(exclude=(excluded,)))
    assert backend.artifact.key != backends["tflite-int8"].artifact.key
    assert backend.artifact.meta["excluded_output_types"] == {excluded: "float32"}
    capture = diagnose.capture(backend, samples)
    normal = captures["tflite-int8"].layers
    assert [layer.name for layer in capture.layers] == [layer.name for layer in normal]
    assert [layer.precision for layer in capture.layers] == [
        "fp32" if layer.name == excluded else "int8" for layer in normal]
    # same calibration, same quantization upstream: the layers before it are bit-identical
    for before, again in zip(normal[:2], capture.layers[:2], strict=True):
        np.testing.assert_array_equal(before.value, again.value)
    # the float layer is closer to FP32 than its int8 version was
    fp32 = captures["tflite-fp32"].layers[2].value
    assert sqnr(fp32, capture.layers[2].value) > sqnr(fp32, normal[2].value)
    backend.load()  # the tflite-int8 checks accept a mostly-int8 model
    assert backend.describe()["executed_precision"] == "int8 (3 of 4 conv/FC ops; 1 float)"
    assert backend.describe()["input"]["dtype"] == "int8"
    x = _nhwc(digits_data.eval_x)
    backends["tflite-fp32"].load()
    reference = top1(backends["tflite-fp32"].predict(x), digits_data.eval_y)
    assert top1(backend.predict(x), digits_data.eval_y) >= reference - 1.0


def test_damage_widens_one_layers_weight_range(captures, excluded, options, samples,
                                               digits_calibration) -> None:
    backend = diagnose.rebuild("tflite-int8", options, DIGITS_SPEC, digits_calibration,
                               Recipe(damage=((excluded, 40.0),)))
    capture = diagnose.capture(backend, samples)
    normal, fp32 = captures["tflite-int8"].layers, captures["tflite-fp32"].layers
    assert [layer.precision for layer in capture.layers] == ["int8"] * len(OP_TYPES)
    for before, again in zip(normal[:2], capture.layers[:2], strict=True):
        np.testing.assert_array_equal(before.value, again.value)
    assert sqnr(fp32[2].value, capture.layers[2].value) < sqnr(fp32[2].value,
                                                               normal[2].value) - 10


def test_recipes_it_cannot_apply(excluded, options, digits_calibration) -> None:
    with pytest.raises(UserError, match="only tflite-int8 takes a recipe"):
        diagnose.rebuild("tflite-fp32", options, DIGITS_SPEC, digits_calibration,
                         Recipe(exclude=(excluded,)))
    with pytest.raises(UserError, match="no op outputs tensor 'no/such/layer'"):
        diagnose.rebuild("tflite-int8", options, DIGITS_SPEC, digits_calibration,
                         Recipe(exclude=("no/such/layer",)))
    with pytest.raises(UserError, match="cannot damage 'no/such/layer'"):
        diagnose.rebuild("tflite-int8", options, DIGITS_SPEC, digits_calibration,
                         Recipe(damage=(("no/such/layer", 10.0),)))
