"""ONNX Runtime's layer capture and recipe changes for run.py diagnose, on the digits CNN."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from quantmark.diagnosis import layer_errors  # noqa: E402
from quantmark.ground.errors import UserError  # noqa: E402
from quantmark.sut.interface import SutOptions  # noqa: E402
from quantmark.sut.layers import Recipe  # noqa: E402
from quantmark.sut.onnxruntime import diagnose  # noqa: E402
from tests.digits_model import DIGITS_SPEC, top1  # noqa: E402


def _built(name, weights, calibration, recipe=None):
    recipe = recipe or Recipe()
    options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline", model_path=str(weights))
    backend = diagnose.rebuild(name, options, DIGITS_SPEC, calibration, recipe)
    backend.load()
    return backend


@pytest.fixture(scope="module")
def captures(digits_data, digits_weights, digits_calibration):
    x = digits_data.eval_x[:16]
    int8 = _built("ort-int8", digits_weights, digits_calibration)
    fp32 = _built("ort-fp32", digits_weights, digits_calibration)
    return int8, fp32, diagnose.capture(int8, x), diagnose.capture(fp32, x), x


def test_both_models_have_the_same_layers_by_name(captures):
    _, _, int8, fp32, _ = captures
    names = [layer.name for layer in int8.layers]
    assert names == [layer.name for layer in fp32.layers]
    ops = [layer.op_type for layer in int8.layers]
    assert ops.count("Conv") == 3 and ops[-1] == "Gemm"  # ReLU folded into each conv
    convs = [layer for layer in int8.layers if layer.op_type == "Conv"]
    assert [layer.value.shape[1:] for layer in convs] == [(16, 32, 32), (32, 16, 16),
                                                          (64, 8, 8)]
    assert convs[1].inputs and convs[1].inputs[0] in names  # a producer, through MaxPool
    assert all(layer.value.min() >= 0 for layer in convs)  # after the folded ReLU


def test_precision_is_the_kernel_that_ran(captures):
    _, _, int8, fp32, _ = captures
    assert all(layer.precision == "fp32" for layer in fp32.layers)
    assert all(layer.precision == "int8" for layer in int8.layers if layer.op_type == "Conv")
    assert "profiler" in int8.precision_source


def test_layer_errors_are_small_for_a_sound_int8_model_and_logits_match_predict(captures):
    int8_backend, _, int8, fp32, x = captures
    matching = layer_errors.match(int8.layers, fp32.layers)
    layer_errors.accumulate(matching, int8.layers, fp32.layers)
    assert matching.by_method() == {"name": len(int8.layers)}
    assert all(15 < pair.sqnr_db < layer_errors.CLEAN_DB for pair in matching.pairs)
    np.testing.assert_allclose(int8.layers[-1].value, int8_backend.predict(x), atol=1e-5)


def test_an_excluded_node_runs_fp32_and_the_model_still_predicts(
        captures, digits_data, digits_weights, digits_calibration):
    _, _, int8, _, x = captures
    second = [layer.name for layer in int8.layers if layer.op_type == "Conv"][1]
    kept = _built("ort-int8", digits_weights, digits_calibration, Recipe(exclude=(second,)))
    layers = {layer.name: layer for layer in diagnose.capture(kept, x).layers}
    assert layers[second].precision == "fp32"
    assert all(layer.precision == "int8" for name, layer in layers.items()
               if layer.op_type == "Conv" and name != second)
    fp32 = _built("ort-fp32", digits_weights, digits_calibration)
    assert abs(top1(kept.predict(digits_data.eval_x), digits_data.eval_y)
               - top1(fp32.predict(digits_data.eval_x), digits_data.eval_y)) <= 1.0


def test_the_normal_recipe_is_the_sut_itself(captures, digits_weights, digits_calibration):
    int8_backend = captures[0]
    again = _built("ort-int8", digits_weights, digits_calibration, Recipe())
    assert again.artifact.path == int8_backend.artifact.path


def test_a_damaged_layer_keeps_its_integer_kernel_and_loses_precision(
        captures, digits_weights, digits_calibration):
    _, _, int8, _, x = captures
    target = [layer.name for layer in int8.layers if layer.op_type == "Conv"][1]
    damaged = _built("ort-int8", digits_weights, digits_calibration,
                     Recipe(damage=((target, 100.0),)))
    layers = {layer.name: layer for layer in diagnose.capture(damaged, x).layers}
    healthy = {layer.name: layer for layer in int8.layers}
    assert layers[target].precision == "int8"  # the fault is in the INT8 kernel's weights
    first = int8.layers[0].name
    np.testing.assert_array_equal(layers[first].value, healthy[first].value)

    def sqnr(got):
        ref = healthy[target].value.astype(float)
        return 10 * np.log10((ref ** 2).sum() / ((ref - got) ** 2).sum())

    assert sqnr(layers[target].value) < 10


def test_bad_recipes_are_one_line_errors(digits_weights, digits_calibration):
    with pytest.raises(UserError, match="no node of that name"):
        _built("ort-int8", digits_weights, digits_calibration,
               Recipe(damage=(("no_such_node", 10.0),)))
    with pytest.raises(UserError, match="only ort-int8"):
        _built("ort-fp16", digits_weights, digits_calibration, Recipe(exclude=("x",)))
