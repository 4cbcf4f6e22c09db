"""ONNX Runtime's per-layer profile (run.py profile) on the digits CNN: every convolution and
the classifier timed by ORT's own profiler, integer kernels named int8, quantize/dequantize
counted as overhead, and the per-layer sum read against the same runs' whole inference."""

from __future__ import annotations

import tempfile

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from quantmark.ground.errors import SutError, UserError  # noqa: E402
from quantmark.sut.interface import SutOptions  # noqa: E402
from quantmark.sut.onnxruntime import profile as ort_profile  # noqa: E402
from quantmark.sut.onnxruntime.backend import create  # noqa: E402
from quantmark.sut.profiling import CATEGORIES  # noqa: E402
from tests.digits_model import DIGITS_SPEC  # noqa: E402

CONV_OPS = {"Conv", "FusedConv", "NhwcFusedConv", "NhwcConv", "QLinearConv", "NhwcQLinearConv",
            "ConvInteger"}
GEMM_OPS = {"Gemm", "FusedGemm", "MatMul", "FusedMatMul", "QGemm", "QLinearMatMul",
            "MatMulInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat"}
SUTS = ("ort-fp32", "ort-int8", "ort-int8dyn")


@pytest.fixture(scope="module")
def backends(digits_weights, digits_calibration):
    out = {}
    for name in SUTS:
        options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline", threads=2,
                             model_path=str(digits_weights))
        out[name] = create(name, options, DIGITS_SPEC, digits_calibration)
        out[name].load()
    return out


@pytest.fixture(scope="module")
def profiles(backends, digits_data):
    x = digits_data.eval_x[:8]
    return {name: ort_profile.profile(backend, x, iterations=15, warmup=3)
            for name, backend in backends.items()}


@pytest.mark.parametrize("name", SUTS)
def test_every_conv_and_the_classifier_are_timed_compute_rows(profiles, name):
    prof = profiles[name]
    convs = [row for row in prof.layers if row.op_type in CONV_OPS]
    gemms = [row for row in prof.layers if row.op_type in GEMM_OPS]
    assert len(convs) == 3 and len(gemms) == 1, [(r.name, r.op_type) for r in prof.layers]
    for row in convs + gemms:
        assert row.category == "compute" and row.median_ms > 0 and row.calls == 1
        assert row.kernel == "CPUExecutionProvider"
    assert all(row.category in CATEGORIES for row in prof.layers)
    assert len({row.name for row in prof.layers}) == len(prof.layers)
    assert not any(row.name.endswith("_kernel_time") for row in prof.layers)


def test_fp32_runs_every_compute_node_in_fp32(profiles):
    rows = [row for row in profiles["ort-fp32"].layers if row.op_type in CONV_OPS | GEMM_OPS]
    assert {row.precision for row in rows} == {"fp32"}


def test_static_int8_convs_are_int8_and_its_quantize_dequantize_is_overhead(profiles):
    layers = profiles["ort-int8"].layers
    convs = [row for row in layers if row.op_type in CONV_OPS]
    assert {row.op_type for row in convs} <= {"QLinearConv", "NhwcQLinearConv"}
    assert {row.precision for row in convs} == {"int8"}
    qdq = [row for row in layers if row.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert any(row.op_type == "QuantizeLinear" for row in qdq)  # the float input, at least
    assert all(row.category == "overhead" and row.median_ms > 0 for row in qdq)


def test_dynamic_int8_names_its_activation_quantization_as_overhead(profiles):
    layers = profiles["ort-int8dyn"].layers
    convs = [row for row in layers if row.op_type in CONV_OPS]
    assert {row.op_type for row in convs} == {"ConvInteger"}
    assert {row.precision for row in convs} == {"int8"}
    dynamic = [row for row in layers if row.op_type == "DynamicQuantizeLinear"]
    assert len(dynamic) >= 3  # one per convolution's input at least
    assert all(row.category == "overhead" for row in dynamic)


@pytest.mark.parametrize("name", SUTS)
def test_whole_inference_and_per_layer_sum_come_from_the_same_runs(profiles, name):
    prof = profiles[name]
    assert prof.framework == "onnxruntime" and prof.sut == name
    assert prof.batch_size == 8 and prof.iterations == 15
    assert prof.method == ort_profile.PROFILER
    assert prof.end_to_end_ms > 0 and prof.layer_sum_ms > 0
    assert prof.layer_sum_ms <= 3 * prof.end_to_end_ms
    assert prof.notes["providers"] == "CPUExecutionProvider"


def test_the_trace_file_is_deleted(backends, digits_data, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ort_profile.profile(backends["ort-fp32"], digits_data.eval_x[:2], iterations=2, warmup=1)
    assert list(tmp_path.iterdir()) == []


def test_warm_up_runs_are_left_out_of_the_medians():
    def run(ts: int, dur: int) -> dict:
        return {"cat": "Session", "name": "model_run", "ts": ts, "dur": dur}

    def kernel(ts: int, dur: int) -> dict:
        return {"cat": "Node", "name": "conv_kernel_time", "ts": ts, "dur": dur,
                "args": {"op_name": "Conv", "provider": "CPUExecutionProvider",
                         "input_type_shape": [{"float": [1, 3, 8, 8]}]}}

    events = [run(0, 1000), kernel(10, 900),  # warm-up: slow
              run(2000, 100), kernel(2010, 40), kernel(2060, 20),  # the node runs twice
              kernel(5000, 7)]  # outside every run
    runs, kernels = ort_profile.split_runs(events)
    assert [len(k) for k in kernels] == [1, 2]
    (row,) = ort_profile._layers(kernels[1:])
    assert (row.name, row.calls, row.precision, row.category) == ("conv", 2, "fp32", "compute")
    assert row.median_ms == pytest.approx(0.06)


def test_categories_and_precisions_of_ops():
    assert ort_profile.category("ReorderInput") == "overhead"
    assert ort_profile.category("Transpose") == "overhead"
    assert ort_profile.category("MemcpyToHost") == "other"
    assert ort_profile.category("MaxPool") == "compute"
    assert ort_profile.precision("QGemm", {}) == "int8"
    assert ort_profile.precision("MaxPool", {"input_type_shape": [{"uint8": [1]}]}) == "int8"
    assert ort_profile.precision("Conv", {"input_type_shape": [{"float16": [1]}]}) == "fp16"
    assert ort_profile.precision("Relu", {}) == ""


def test_bad_calls_are_one_line_errors(backends, digits_data):
    with pytest.raises(UserError, match="iterations must be >= 1"):
        ort_profile.profile(backends["ort-fp32"], digits_data.eval_x[:1], 0, 0)
    wrong = np.zeros((1, 5, 32, 32), np.float32)  # five channels, not three
    with pytest.raises(SutError, match="could not run"):
        ort_profile.profile(backends["ort-fp32"], wrong, iterations=1, warmup=0)
