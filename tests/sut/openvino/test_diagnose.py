"""OpenVINO diagnosis on the digits CNN: layer capture of the INT8 and FP32 IRs, runtime
precision per layer, NNCF ignored-scope exclusion and injected weight damage."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
pytest.importorskip("nncf")

from quantmark.ground.errors import UserError  # noqa: E402
from quantmark.sut.interface import SutOptions  # noqa: E402
from quantmark.sut.layers import LayerCapture, Recipe  # noqa: E402
from quantmark.sut.openvino import diagnose  # noqa: E402
from quantmark.sut.openvino.recipe import ignored_names, widen_weight_range  # noqa: E402
from tests.digits_model import DIGITS_SPEC, top1  # noqa: E402

CONVS = ("node_Conv_54/WithoutBiases", "node_Conv_56/WithoutBiases",
         "node_Conv_58/WithoutBiases")
#: the digits CNN's layers as OpenVINO names them (conv + bias Add + its Relu are one layer)
EXPECTED = [
    (CONVS[0], "Convolution", (8, 16, 32, 32)), ("node_max_pool2d", "MaxPool", (8, 16, 16, 16)),
    (CONVS[1], "Convolution", (8, 32, 16, 16)),
    ("node_max_pool2d_1", "MaxPool", (8, 32, 8, 8)), (CONVS[2], "Convolution", (8, 64, 8, 8)),
    ("node_mean", "ReduceMean", (8, 64, 1, 1)), ("node_linear/WithoutBiases", "MatMul", (8, 10)),
]


def _options(weights: Path) -> SutOptions:
    return SutOptions(model=DIGITS_SPEC.name, scenario="Offline", threads=0,
                      model_path=str(weights))


def _sqnr(ref: np.ndarray, test: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(ref ** 2) / max(np.sum((ref - test) ** 2), 1e-30)))


def _by_name(capture: LayerCapture) -> dict[str, Any]:
    return {layer.name: layer for layer in capture.layers}


@pytest.fixture(scope="module")
def samples(digits_data: Any) -> np.ndarray:
    return digits_data.eval_x[:8]


@pytest.fixture(scope="module")
def suts(digits_weights: Path, digits_calibration: Any) -> Iterator[dict[str, Any]]:
    """ov-fp32 and ov-int8 as create builds them, loaded (the diagnosis must not disturb them)."""
    from quantmark.sut.openvino.backend import create

    loaded = {name: create(name, _options(digits_weights), DIGITS_SPEC, digits_calibration)
              for name in ("ov-fp32", "ov-int8")}
    for backend in loaded.values():
        backend.load()
    yield loaded
    for backend in loaded.values():
        backend.close()


@pytest.fixture(scope="module")
def captures(suts: dict[str, Any], samples: np.ndarray) -> dict[str, LayerCapture]:
    return {name: diagnose.capture(backend, samples) for name, backend in suts.items()}


def test_layers_named_alike_in_nchw(captures: dict[str, LayerCapture]) -> None:
    for capture in captures.values():
        found = [(layer.name, layer.op_type, layer.value.shape) for layer in capture.layers]
        assert found == EXPECTED
        assert all(layer.value.dtype == np.float32 for layer in capture.layers)
        layers = _by_name(capture)
        assert layers[CONVS[0]].inputs == ()  # fed by the input (through its FakeQuantize)
        assert layers["node_max_pool2d_1"].inputs == (CONVS[1],)
        assert layers[CONVS[1]].value.min() >= 0  # read after its folded Relu
        assert layers[CONVS[2]].inputs == ("node_max_pool2d_1",)


def test_precision_from_the_runtime_graph(captures: dict[str, LayerCapture]) -> None:
    assert {layer.precision for layer in captures["ov-fp32"].layers} == {"fp32"}
    assert {layer.precision for layer in captures["ov-int8"].layers} == {"int8"}
    assert "runtimePrecision" in captures["ov-int8"].precision_source
    assert captures["ov-fp32"].notes["inference_precision_hint"] == "f32"


def test_int8_close_to_fp32_and_logits_match_the_sut(captures: dict[str, LayerCapture],
                                                     suts: dict[str, Any],
                                                     samples: np.ndarray) -> None:
    ref, test = _by_name(captures["ov-fp32"]), _by_name(captures["ov-int8"])
    for name, layer in test.items():
        assert 15.0 < _sqnr(ref[name].value, layer.value) < 80.0, name  # quantized, not broken
    for name, backend in suts.items():  # the captured model is the benchmarked one
        logits = captures[name].layers[-1].value
        np.testing.assert_allclose(logits, backend.predict(samples), rtol=1e-4, atol=1e-4)


def test_a_layer_reads_what_the_next_layer_sees(captures: dict[str, LayerCapture]) -> None:
    """In the INT8 IR a conv's value (after its Relu) is the FakeQuantize's output: few
    distinct levels."""
    conv = _by_name(captures["ov-int8"])[CONVS[2]].value
    assert len(np.unique(conv)) <= 256
    assert len(np.unique(_by_name(captures["ov-fp32"])[CONVS[2]].value)) > 256


def test_exclude_keeps_the_layer_in_fp32(digits_weights: Path, digits_calibration: Any,
                                         captures: dict[str, LayerCapture],
                                         samples: np.ndarray, digits_data: Any) -> None:
    recipe = Recipe(exclude=(CONVS[1],))
    backend = diagnose.rebuild("ov-int8", _options(digits_weights), DIGITS_SPEC,
                               digits_calibration, recipe)
    assert backend.artifact.meta["nncf_ignored_scope"] == [CONVS[1]]
    layers = _by_name(diagnose.capture(backend, samples))
    assert layers[CONVS[1]].precision == "fp32"
    assert layers[CONVS[0]].precision == layers[CONVS[2]].precision == "int8"
    ref, normal = _by_name(captures["ov-fp32"]), _by_name(captures["ov-int8"])
    assert (_sqnr(ref[CONVS[1]].value, layers[CONVS[1]].value)
            > _sqnr(ref[CONVS[1]].value, normal[CONVS[1]].value) + 3.0)
    backend.load()
    try:
        assert backend.describe()["compute_layers_by_precision"]["fp32"] == {"Convolution": 1}
        assert top1(backend.predict(digits_data.eval_x), digits_data.eval_y) > 85.0
    finally:
        backend.close()


def test_damage_widens_the_weight_range(digits_weights: Path, digits_calibration: Any,
                                        captures: dict[str, LayerCapture],
                                        samples: np.ndarray) -> None:
    recipe = Recipe(damage=((CONVS[2], 16.0),))
    backend = diagnose.rebuild("ov-int8", _options(digits_weights), DIGITS_SPEC,
                               digits_calibration, recipe)
    layers = _by_name(diagnose.capture(backend, samples))
    ref, normal = _by_name(captures["ov-fp32"]), _by_name(captures["ov-int8"])
    for name in (CONVS[0], CONVS[1]):  # upstream: untouched
        np.testing.assert_allclose(layers[name].value, normal[name].value, atol=1e-5)
    assert (_sqnr(ref[CONVS[2]].value, layers[CONVS[2]].value)
            < _sqnr(ref[CONVS[2]].value, normal[CONVS[2]].value) - 10.0)
    assert layers[CONVS[2]].precision == "int8"


def test_empty_recipe_is_the_sut(suts: dict[str, Any], digits_weights: Path,
                                 digits_calibration: Any) -> None:
    for name, backend in suts.items():
        same = diagnose.rebuild(name, _options(digits_weights), DIGITS_SPEC,
                                digits_calibration, Recipe())
        assert same.artifact.key == backend.artifact.key
    fp32 = diagnose.rebuild("ov-fp32", _options(digits_weights), DIGITS_SPEC,
                            digits_calibration, Recipe(exclude=(CONVS[0],)))
    assert fp32.artifact.key == suts["ov-fp32"].artifact.key


def test_excluding_an_activation_ignores_its_consumers(suts: dict[str, Any]) -> None:
    model = ov.Core().read_model(suts["ov-fp32"].artifact.path)
    assert ignored_names(model, ("node_relu_1",)) == ["node_relu_1", "node_max_pool2d_1"]
    assert ignored_names(model, (CONVS[0],)) == [CONVS[0]]
    with pytest.raises(UserError, match="no layer 'nope'"):
        ignored_names(model, ("nope",))


def test_damage_needs_quantized_weights(suts: dict[str, Any]) -> None:
    fp32 = ov.Core().read_model(suts["ov-fp32"].artifact.path)
    with pytest.raises(UserError, match="no quantized weights"):
        widen_weight_range(fp32, ((CONVS[0], 4.0),))
    assert diagnose.EXCLUSION.startswith("NNCF ignored_scope") and diagnose.DAMAGE
