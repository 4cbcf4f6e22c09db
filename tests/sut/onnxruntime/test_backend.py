"""ONNX Runtime SUTs on the trained digits CNN: agreement, accuracy, executed precision."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from quantmark.ground.errors import SutError, UserError  # noqa: E402
from quantmark.sut.interface import SutOptions  # noqa: E402
from quantmark.sut.onnxruntime.backend import create  # noqa: E402
from tests.digits_model import DIGITS_SPEC, top1  # noqa: E402


def _backend(name, weights, calibration, scenario="Offline"):
    options = SutOptions(model=DIGITS_SPEC.name, scenario=scenario, model_path=str(weights))
    backend = create(name, options, DIGITS_SPEC, calibration)
    backend.load()
    return backend


@pytest.fixture(scope="module")
def scores(digits_data, digits_weights, digits_calibration):
    """Eval-set scores and descriptions of every ORT SUT (each built once)."""
    out = {}
    for name in ("ort-fp32", "ort-fp16", "ort-int8", "ort-int8dyn"):
        backend = _backend(name, digits_weights, digits_calibration)
        out[name] = (backend.predict(digits_data.eval_x), backend.describe())
    return out


def test_fp32_matches_torch(scores, digits_data, digits_weights):
    import torch

    model = DIGITS_SPEC.builder(10)
    model.load_state_dict(torch.load(digits_weights))
    with torch.no_grad():
        reference = model.eval()(torch.from_numpy(digits_data.eval_x)).numpy()
    ours = scores["ort-fp32"][0]
    # same function, different kernels: agree to 1e-4 of the logit range
    assert np.abs(ours - reference).max() <= 1e-4 * np.abs(reference).max()


@pytest.mark.parametrize("name", ["ort-fp16", "ort-int8", "ort-int8dyn"])
def test_reduced_precision_keeps_top1_within_one_point(scores, digits_data, name):
    fp32 = top1(scores["ort-fp32"][0], digits_data.eval_y)
    assert fp32 > 90
    assert abs(top1(scores[name][0], digits_data.eval_y) - fp32) <= 1.0


def test_executed_precision_comes_from_the_profiled_run(scores):
    assert scores["ort-fp32"][1]["executed_precision"] == "fp32"
    static = scores["ort-int8"][1]
    assert static["compute_nodes_by_precision"]["int8"] >= 3  # the three convolutions
    assert "QLinearConv" in static["executed_kernels"] or "QGemm" in static["executed_kernels"]
    dynamic = scores["ort-int8dyn"][1]
    assert dynamic["executed_kernels"]["ConvInteger"] == {"int8": 3}
    fp16 = scores["ort-fp16"][1]
    # no FP16 conv kernels on the x86 CPU provider: ORT runs them in FP32, and says so
    if "fp16" not in fp16["compute_nodes_by_precision"]:
        assert fp16["executed_precision"] == "fp32" and "precision_note" in fp16


def test_int8_that_would_run_fp32_fails_loudly(monkeypatch, digits_weights, digits_calibration):
    from quantmark.sut.onnxruntime import quantize as ort_quantize

    monkeypatch.setattr(ort_quantize, "quantize_static_int8", lambda fp32, *a: fp32)
    with pytest.raises(SutError, match="refusing to measure FP32 as INT8"):
        _backend("ort-int8", digits_weights, digits_calibration)


def test_bad_model_path_is_one_line(tmp_path, digits_calibration):
    options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline",
                         model_path=str(tmp_path / "model.tflite"))
    with pytest.raises(UserError, match="take an .onnx file or a torch state_dict"):
        create("ort-fp32", options, DIGITS_SPEC, digits_calibration)


def _fixed_batch_onnx(path, batch: int):
    """A linear classifier over DIGITS_SPEC's input, exported with a fixed batch dimension
    (torch.onnx.export without dynamic axes does this)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    size = DIGITS_SPEC.input_size
    weights = numpy_helper.from_array(
        np.random.default_rng(0).normal(0, 0.1, (10, 3 * size * size)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Flatten", ["input"], ["flat"]),
         helper.make_node("Gemm", ["flat", "w"], ["logits"], transB=1)], "fixed",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])],
        initializer=[weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("fixed, batch, needle", [
    (1, 8, "the model's input has a fixed batch of 1; pass --batch-size 1 (not 8)"),
    (4, 4, "fixed batch of 4, but queries are split into batches of 1 to --batch-size"),
])
def test_a_fixed_batch_model_is_refused_before_running(tmp_path, fixed, batch, needle):
    path = _fixed_batch_onnx(tmp_path / "fixed.onnx", fixed)
    options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline", batch_size=batch,
                         model_path=str(path))
    with pytest.raises(UserError) as raised:
        create("ort-fp32", options, DIGITS_SPEC, None)
    assert needle in str(raised.value) and str(path) in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_fixed_batch_of_one_runs_at_batch_one(tmp_path, digits_data):
    path = _fixed_batch_onnx(tmp_path / "fixed.onnx", 1)
    options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline", batch_size=1,
                         model_path=str(path))
    backend = create("ort-fp32", options, DIGITS_SPEC, None)
    backend.load()
    assert backend.predict(digits_data.eval_x[:1]).shape == (1, 10)
