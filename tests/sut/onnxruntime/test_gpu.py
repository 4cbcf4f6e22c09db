"""ONNX Runtime on the CUDA / TensorRT execution providers.

Everything that can be checked without a GPU is: provider options per SUT, node placement and
the CPU-fallback refusal from hand-written profiles, the one-line refusals on a machine without
CUDA. Tests marked ``gpu`` run the SUTs for real and skip with the reason where there is no
NVIDIA GPU (or no onnxruntime-gpu).
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from quantmark.ground.errors import SutError, UserError
from quantmark.ground.fingerprint import gpu_present
from quantmark.sut.interface import SutOptions
from quantmark.sut.onnxruntime import gpu as ortg
from quantmark.sut.onnxruntime import providers as ortp
from quantmark.sut.registry import SUTS, factory_module
from tests.digits_model import DIGITS_SPEC, top1
from tests.sut.side_by_side import predict_side_by_side


def _event(op: str, provider: str | None, types_: tuple[str, ...] = ("float",),
           name: str | None = None) -> dict:
    """One node event as ONNX Runtime's profiler writes it (the fields the SUT reads)."""
    args = {"op_name": op, "input_type_shape": [{t: [1, 3, 32, 32]} for t in types_],
            "output_type_shape": [{types_[0]: [1, 16, 32, 32]}], "thread_scheduling_stats": {}}
    if provider is not None:
        args["provider"] = provider
    return {"cat": "Node", "pid": 1, "tid": 1, "dur": 10, "ts": 5, "ph": "X",
            "name": name or f"{op}_0_kernel_time", "args": args}


def _session_events() -> list[dict]:
    """Session-level events carry no node placement and are skipped."""
    return [{"cat": "Session", "name": "model_loading_uri", "dur": 100, "ts": 0, "ph": "X",
             "args": {}},
            {"cat": "Node", "name": "Conv_0_fence_before", "ph": "X", "args": {"op_name": "Conv"}}]


# --------------------------------------------------------------------------- provider options

def test_provider_options_per_sut(tmp_path):
    cuda = ortp.provider_options("ort-cuda-fp32")
    assert cuda[0][0] == "CUDAExecutionProvider" and cuda[-1] == "CPUExecutionProvider"
    assert cuda[0][1]["use_tf32"] == "0" and cuda[0][1]["cudnn_conv_algo_search"] == "EXHAUSTIVE"
    server = ortp.provider_options("ort-cuda-fp16", scenario="Server")
    assert server[0][1]["cudnn_conv_algo_search"] == "HEURISTIC"

    fp16 = ortp.provider_options("ort-trt-fp16", input_name="images", sample_shape=(3, 224, 224),
                                 batch_range=(1, 8), cache_dir=tmp_path)
    assert [p if isinstance(p, str) else p[0] for p in fp16] == [
        "TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    trt = fp16[0][1]
    assert trt["trt_fp16_enable"] == "True" and "trt_int8_enable" not in trt
    assert trt["trt_engine_cache_enable"] == "True"
    assert trt["trt_engine_cache_path"] == str(tmp_path)
    assert trt["trt_profile_min_shapes"] == "images:1x3x224x224"
    assert trt["trt_profile_opt_shapes"] == trt["trt_profile_max_shapes"] == "images:8x3x224x224"

    table = tmp_path / "calibration.flatbuffers"
    calibrated = ortp.trt_options("ort-trt-int8", input_name="x", sample_shape=(3, 32, 32),
                                  batch_range=(1, 1), cache_dir=tmp_path,
                                  calibration_table=table)
    assert calibrated["trt_int8_enable"] == "True" and calibrated["trt_fp16_enable"] == "True"
    assert calibrated["trt_int8_calibration_table_name"] == str(table)
    assert calibrated["trt_int8_use_native_calibration_table"] == "False"
    qdq = ortp.trt_options("ort-trt-int8", input_name="x", sample_shape=(3, 32, 32),
                           batch_range=(1, 1), cache_dir=tmp_path)
    assert qdq["trt_int8_enable"] == "True" and "trt_int8_calibration_table_name" not in qdq
    with pytest.raises(UserError, match="does not run on the TensorRT"):
        ortp.trt_options("ort-cuda-fp16", input_name="x", sample_shape=(3,), batch_range=(1, 1),
                         cache_dir=tmp_path)
    with pytest.raises(UserError, match="no SUT 'ort-cuda-int4'.*ort-cuda-fp32"):
        ortp.provider_options("ort-cuda-int4")


# --------------------------------------------------------------------------- CUDA streams

GPU_SUTS = sorted(name for name, info in SUTS.items()
                  if factory_module(info) == ortp.GPU_MODULE)


def test_the_gpu_suts_are_the_registry_s_ort_gpu_entries():
    assert GPU_SUTS == ["ort-cuda-fp16", "ort-cuda-fp32", "ort-trt-fp16", "ort-trt-int8"]
    assert ortp.requested_provider("ort-trt-int8") == ortg.TRT_EP
    assert ortp.requested_provider("ort-cuda-fp16") == ortg.CUDA_EP


@pytest.mark.parametrize("name", GPU_SUTS)
def test_every_gpu_sut_keeps_onnx_runtimes_own_streams(name, tmp_path):
    """No SUT passes a stream of its own or asks for one provider-level stream: each session
    keeps ONNX Runtime's per-session non-blocking streams, so two members never share one."""
    providers = ortp.provider_options(name, batch_range=(1, 8), cache_dir=tmp_path)
    options = [p[1] for p in providers if isinstance(p, tuple)]
    for option in options:
        assert not {"user_compute_stream", "has_user_compute_stream",
                    *ortp.UNIFIED_STREAM_OPTIONS} & set(option), option
    assert ortp.cuda_stream_policy(providers) == ortp.OWN_STREAMS
    assert ortp.OWN_STREAMS.startswith("own ")


def test_stream_policy_reads_the_documented_options():
    cuda = ortg.CUDA_EP
    assert ortp.cuda_stream_policy([(cuda, {"user_compute_stream": "140000"}), "CPU"]) \
        .startswith("user (user_compute_stream=140000)")
    assert "EP-level unified" in ortp.cuda_stream_policy(
        [(cuda, {"use_ep_level_unified_stream": "1"})])
    assert "EP-level unified" in ortp.cuda_stream_policy([(cuda, {"enable_cuda_graph": "True"})])
    for off in ({"use_ep_level_unified_stream": "0"}, {"enable_cuda_graph": "false"},
                {"user_compute_stream": "0"}, {}):
        policy = ortp.cuda_stream_policy([(cuda, off), "CPUExecutionProvider"])
        assert policy == ortp.OWN_STREAMS
    assert ortp.cuda_stream_policy(["CPUExecutionProvider"]) == ortp.OWN_STREAMS


# --------------------------------------------------------------------------- placement

def test_placement_counts_nodes_per_provider(tmp_path):
    events = _session_events() + [
        _event("MemcpyFromHost", "CUDAExecutionProvider"),
        _event("FusedConv", "CUDAExecutionProvider", ("float16",)),
        _event("FusedConv", "CUDAExecutionProvider", ("float16",), name="c2_kernel_time"),
        _event("Gemm", "CUDAExecutionProvider", ("float16",)),
        _event("Shape", "CPUExecutionProvider", ("int64",)),
        _event("Gather", "CPUExecutionProvider", ("int64",)),
        _event("MemcpyToHost", "CUDAExecutionProvider"),
        _event("Identity", None),
    ]
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(events))
    placement = ortg.node_placement(str(path))
    assert placement == ortg.node_placement(events)
    assert placement == {
        "CPUExecutionProvider": {"Gather": 1, "Shape": 1},
        "CUDAExecutionProvider": {"FusedConv": 2, "Gemm": 1, "MemcpyFromHost": 1,
                                  "MemcpyToHost": 1},
        "unknown": {"Identity": 1}}
    assert ortg.cpu_compute_nodes(placement) == {}
    summary = ortg.check_placement("ort-cuda-fp16", "CUDAExecutionProvider",
                                   ["CUDAExecutionProvider", "CPUExecutionProvider"], placement)
    assert summary["nodes_by_provider"] == {"CPUExecutionProvider": 2,
                                            "CUDAExecutionProvider": 5, "unknown": 1}
    assert summary["cpu_nodes"] == {"Gather": 1, "Shape": 1}
    assert summary["memcpy_nodes"] == {"MemcpyFromHost": 1, "MemcpyToHost": 1}
    assert summary["tensorrt_engine_nodes"] == 0 and summary["compute_outside_tensorrt"] == {}


def test_compute_on_the_cpu_provider_is_refused():
    placement = ortg.node_placement([
        _event("FusedConv", "CUDAExecutionProvider"),
        _event("Conv", "CPUExecutionProvider"), _event("Conv", "CPUExecutionProvider"),
        _event("MatMul", "CPUExecutionProvider"), _event("Shape", "CPUExecutionProvider")])
    assert ortg.cpu_compute_nodes(placement) == {"Conv": 2, "MatMul": 1}
    with pytest.raises(SutError) as info:
        ortg.check_placement("ort-cuda-fp32", "CUDAExecutionProvider",
                             ["CUDAExecutionProvider", "CPUExecutionProvider"], placement)
    message = str(info.value)
    assert "3 compute node(s) ran on CPUExecutionProvider (Conv x2, MatMul x1)" in message
    assert "silent CPU fallback" in message and "\n" not in message


@pytest.mark.parametrize("op", ["QLinearConv", "ConvInteger", "MatMulInteger", "QGemm",
                                "FusedMatMul", "NhwcFusedConv", "ConvTranspose", "Einsum"])
def test_every_compute_kind_counts(op):
    assert ortg.is_compute(op)


@pytest.mark.parametrize("op", ["Relu", "Add", "Shape", "MemcpyToHost", "QuantizeLinear",
                                "TRTKernel_graph_main_graph_1234_0"])
def test_other_nodes_are_not_compute(op):
    assert not ortg.is_compute(op)


def test_a_dropped_provider_is_refused_naming_it():
    placement = ortg.node_placement([_event("Conv", "CPUExecutionProvider")])
    with pytest.raises(SutError, match="did not enable TensorrtExecutionProvider \\(session "
                                       "providers: CPUExecutionProvider\\).*CUDA/cuDNN/TensorRT"):
        ortg.check_placement("ort-trt-fp16", "TensorrtExecutionProvider",
                             ["CPUExecutionProvider"], placement)
    with pytest.raises(SutError, match="no node ran on TensorrtExecutionProvider"):
        ortg.check_placement("ort-trt-fp16", "TensorrtExecutionProvider",
                             ["TensorrtExecutionProvider", "CUDAExecutionProvider",
                              "CPUExecutionProvider"],
                             ortg.node_placement([_event("Conv", "CUDAExecutionProvider")]))


def test_tensorrt_placement_reports_nodes_left_outside_the_engine():
    placement = ortg.node_placement([
        _event("TRTKernel_graph_main_graph_9876_0", "TensorrtExecutionProvider"),
        _event("TRTKernel_graph_main_graph_9876_1", "TensorrtExecutionProvider"),
        _event("Conv", "CUDAExecutionProvider"),
        _event("Reshape", "CPUExecutionProvider")])
    summary = ortg.check_placement(
        "ort-trt-int8", "TensorrtExecutionProvider",
        ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"], placement)
    assert summary["tensorrt_engine_nodes"] == 2
    assert summary["compute_outside_tensorrt"] == {"Conv": 1}
    assert ortg.tensorrt_precision("int8+fp16", {}) == "int8+fp16 (TensorRT)"
    assert ortg.tensorrt_precision("fp16", {"fp32": 1}) == "fp16 (TensorRT)+fp32 (CUDA EP)"


# --------------------------------------------------------------------------- ORT without a GPU

def _ort_options(weights, **extra) -> SutOptions:
    return SutOptions(model=DIGITS_SPEC.name, scenario="Offline", batch_size=4,
                      model_path=str(weights), extra=extra)


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="needs onnxruntime")
def test_cpu_onnxruntime_refuses_the_gpu_suts_in_one_line(digits_weights):
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has the CUDA provider")
    for name, extra in (("ort-cuda-fp16", "ort-gpu"), ("ort-trt-int8", "ort-trt")):
        with pytest.raises(SutError) as info:
            ortg.create(name, _ort_options(digits_weights), DIGITS_SPEC, None)
        message = str(info.value)
        assert f"pip install 'quantmark[{extra}]'" in message and "\n" not in message
        assert message.startswith(f"{name}: onnxruntime ")
    with pytest.raises(UserError, match="trt_int8_route=magic: choose one of calibrator, qdq"):
        ortg.create("ort-trt-int8", _ort_options(digits_weights, trt_int8_route="magic"),
                    DIGITS_SPEC, None)


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="needs onnxruntime")
def test_a_session_that_fell_back_to_the_cpu_is_refused(monkeypatch, digits_weights):
    """The real load path on a CPU onnxruntime: asked for the CUDA provider, ORT warns and runs
    everything on the CPU; the SUT reads the profile and refuses."""
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has the CUDA provider: nothing falls back")
    monkeypatch.setattr(ortg, "require_provider", lambda name: None)
    backend = ortg.create("ort-cuda-fp32", _ort_options(digits_weights), DIGITS_SPEC, None)
    assert backend.batch_range == (1, 4) and backend.sample_shape == (3, 32, 32)
    with pytest.raises(SutError, match="did not enable CUDAExecutionProvider \\(session "
                                       "providers: CPUExecutionProvider\\)"):
        backend.load()
    assert ortg.cpu_compute_nodes(backend._placement), backend._placement


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="needs onnxruntime")
def test_describe_and_speed_settings_name_the_stream(monkeypatch, digits_weights):
    monkeypatch.setattr(ortg, "require_provider", lambda name: None)
    backend = ortg.create("ort-cuda-fp32", _ort_options(digits_weights), DIGITS_SPEC, None)
    assert backend.speed_settings("Offline", 4)["cuda_stream"] == ortp.OWN_STREAMS
    assert backend.describe()["cuda_stream"] == ortp.OWN_STREAMS



# --------------------------------------------------------------------------- on a GPU

def _ort_gpu_skip() -> str | None:
    if not gpu_present():
        return "needs an NVIDIA GPU (none found)"
    if importlib.util.find_spec("onnxruntime") is None:
        return "onnxruntime-gpu not installed"
    import onnxruntime

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        return "onnxruntime-gpu not installed (no CUDAExecutionProvider)"
    return None


@pytest.mark.gpu
@pytest.mark.skipif(_ort_gpu_skip() is not None, reason=str(_ort_gpu_skip()))
def test_ort_cuda_places_compute_on_the_gpu(digits_weights, digits_data):
    results = {}
    for name in ("ort-cuda-fp32", "ort-cuda-fp16"):
        backend = ortg.create(name, _ort_options(digits_weights), DIGITS_SPEC, None)
        backend.load()
        described = backend.describe()
        placement = described["placement"]
        assert "CUDAExecutionProvider" in described["providers"]
        assert ortg.cpu_compute_nodes(placement["nodes"]) == {}
        assert sum(op_count for op, op_count in placement["nodes"]["CUDAExecutionProvider"]
                   .items() if ortg.is_compute(op)) > 0
        results[name] = (top1(backend.predict(digits_data.eval_x), digits_data.eval_y),
                         described["executed_precision"])
        backend.close()
    assert results["ort-cuda-fp32"][1] == "fp32" and results["ort-cuda-fp16"][1] == "fp16"
    assert abs(results["ort-cuda-fp16"][0] - results["ort-cuda-fp32"][0]) <= 1.0


@pytest.mark.gpu
@pytest.mark.skipif(_ort_gpu_skip() is not None, reason=str(_ort_gpu_skip()))
def test_two_ort_cuda_sessions_answer_alike_from_two_threads_at_once(digits_weights,
                                                                     digits_data):
    """Two sessions in one process (ensemble members), one thread each: the concurrent answers
    equal the sequential ones and each session reports ONNX Runtime's own providers."""
    backends = [ortg.create(name, _ort_options(digits_weights), DIGITS_SPEC, None)
                for name in ("ort-cuda-fp32", "ort-cuda-fp16")]
    for backend in backends:
        backend.load()
    data = digits_data.eval_x[:64]
    expected = [backend.predict(data) for backend in backends]
    results = predict_side_by_side(backends, data)
    for k, backend in enumerate(backends):
        for got in results[k]:
            np.testing.assert_allclose(got, expected[k], rtol=1e-3, atol=1e-3)
        assert backend.describe()["cuda_stream"] == ortp.OWN_STREAMS
        backend.close()
