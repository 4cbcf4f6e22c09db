"""GPU SUTs: ONNX Runtime on the CUDA / TensorRT providers, PyTorch on CUDA, TensorFlow's device
evidence and the GPU fingerprint.

Everything that can be checked without a GPU is: provider options per SUT, node placement and
the CPU-fallback refusal from hand-written profiles, the one-line refusals on a machine without
CUDA, the calibration table the TensorRT provider reads. Tests marked ``gpu`` run the SUTs for
real and skip with the reason where there is no NVIDIA GPU (or no GPU build of the framework).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
import types

import numpy as np
import pytest

from quantmark.ground import fingerprint
from quantmark.ground.errors import SutError, UserError
from quantmark.sut import onnxruntime_gpu as ortg
from quantmark.sut import tensorflow as tf_sut
from quantmark.sut.interface import SutOptions
from quantmark.sut.registry import gpu_present
from tests.conftest import run_cli
from tests.digits_model import DIGITS_SPEC, top1


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
    cuda = ortg.provider_options("ort-cuda-fp32")
    assert cuda[0][0] == "CUDAExecutionProvider" and cuda[-1] == "CPUExecutionProvider"
    assert cuda[0][1]["use_tf32"] == "0" and cuda[0][1]["cudnn_conv_algo_search"] == "EXHAUSTIVE"
    server = ortg.provider_options("ort-cuda-fp16", scenario="Server")
    assert server[0][1]["cudnn_conv_algo_search"] == "HEURISTIC"

    fp16 = ortg.provider_options("ort-trt-fp16", input_name="images", sample_shape=(3, 224, 224),
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
    calibrated = ortg.trt_options("ort-trt-int8", input_name="x", sample_shape=(3, 32, 32),
                                  batch_range=(1, 1), cache_dir=tmp_path,
                                  calibration_table=table)
    assert calibrated["trt_int8_enable"] == "True" and calibrated["trt_fp16_enable"] == "True"
    assert calibrated["trt_int8_calibration_table_name"] == str(table)
    assert calibrated["trt_int8_use_native_calibration_table"] == "False"
    qdq = ortg.trt_options("ort-trt-int8", input_name="x", sample_shape=(3, 32, 32),
                           batch_range=(1, 1), cache_dir=tmp_path)
    assert qdq["trt_int8_enable"] == "True" and "trt_int8_calibration_table_name" not in qdq
    with pytest.raises(UserError, match="does not run on the TensorRT"):
        ortg.trt_options("ort-cuda-fp16", input_name="x", sample_shape=(3,), batch_range=(1, 1),
                         cache_dir=tmp_path)
    with pytest.raises(UserError, match="no SUT 'ort-cuda-int4'.*ort-cuda-fp32"):
        ortg.provider_options("ort-cuda-int4")


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


# --------------------------------------------------------------------------- torch on CUDA

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs torch")
TORCH_CUDA_SUTS = ["torch-cuda-fp32", "torch-cuda-fp16", "torch-cuda-bf16", "torch-cuda-compile",
                   "torch-cuda-int8"]


def _pytorch_cuda():
    from quantmark.sut import pytorch_cuda

    return pytorch_cuda


def _torch_options(weights, **extra) -> SutOptions:
    return SutOptions(model=DIGITS_SPEC.name, scenario="Offline", batch_size=8,
                      model_path=str(weights), extra=extra)


@needs_torch
@pytest.mark.parametrize("name", TORCH_CUDA_SUTS)
def test_torch_cuda_suts_refuse_cleanly_without_cuda(name, digits_weights):
    pytorch_cuda = _pytorch_cuda()
    assert set(TORCH_CUDA_SUTS) == set(pytorch_cuda.MODES)
    if pytorch_cuda.cuda_blocker() is None:
        pytest.skip("CUDA is available here")
    with pytest.raises(SutError) as info:
        pytorch_cuda.create(name, _torch_options(digits_weights), DIGITS_SPEC, None)
    message = str(info.value)
    assert message.startswith(f"{name}: ") and "\n" not in message
    assert "needs an NVIDIA GPU and a CUDA build of torch" in message


@needs_torch
def test_torch_cuda_option_and_name_errors(digits_weights):
    pytorch_cuda = _pytorch_cuda()
    with pytest.raises(UserError, match="cuda_graphs=maybe: choose one of on, off"):
        pytorch_cuda.create("torch-cuda-compile", _torch_options(digits_weights,
                                                                 cuda_graphs="maybe"),
                            DIGITS_SPEC, None)
    with pytest.raises(UserError, match="no SUT 'torch-cuda-int4'"):
        pytorch_cuda.create("torch-cuda-int4", _torch_options(digits_weights), DIGITS_SPEC, None)


@needs_torch
def test_executed_precision_from_layer_dtypes():
    pytorch_cuda = _pytorch_cuda()
    half = {"Conv2d": {"float16": 3}, "Linear": {"float16": 1}}
    assert pytorch_cuda.dtype_evidence("torch-cuda-fp16", half, "float16")["executed_precision"] \
        == "fp16"
    mixed = {"Conv2d": {"float16": 3}, "Linear": {"float32": 1}}
    evidence = pytorch_cuda.dtype_evidence("torch-cuda-fp16", mixed, "float16")
    assert evidence["executed_precision"] == "fp16+fp32"
    assert evidence["evidence"] == {"fp16_layers": 3, "other_layers": 1}
    with pytest.raises(SutError, match="refusing to measure them as fp16"):
        pytorch_cuda.dtype_evidence("torch-cuda-fp16", {"Conv2d": {"float32": 3}}, "float16")
    with pytest.raises(SutError, match="refusing to measure them as fp32"):
        pytorch_cuda.dtype_evidence("torch-cuda-fp32", mixed, "float32")


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None,
                    reason="needs torchao (pip install torchao)")
def test_torchao_int8_quantizes_linear_layers_only():
    pytorch_cuda = _pytorch_cuda()
    model = DIGITS_SPEC.builder(10).eval()
    classes = pytorch_cuda.torchao_int8(model)
    assert classes and "Parameter" not in classes
    evidence = pytorch_cuda.int8_evidence("torch-cuda-int8", model, classes)
    assert evidence["executed_precision"] == "int8+fp32"  # the convolutions stay FP32
    assert evidence["evidence"] == {"torchao_int8_linear": 1, "float_compute_layers": 3}
    plain = DIGITS_SPEC.builder(10).eval()
    with pytest.raises(SutError, match="torchao quantized no Linear layer"):
        pytorch_cuda.int8_evidence("torch-cuda-int8", plain,
                                   pytorch_cuda.linear_weight_classes(plain))


# --------------------------------------------------------------------------- TensorFlow device

def test_tensorflow_compute_on_the_cpu_is_counted():
    assert tf_sut.cpu_fallback({"device:GPU:0": 12}) == 0
    assert tf_sut.cpu_fallback({"device:GPU:0": 10, "device:CPU:0": 2}) == 2
    with pytest.raises(SutError, match="changed nothing on this GPU"):
        tf_sut.executed_precision("tf-amp", {"float32": {"Conv2D": 3}}, tf_sut.HALF_DTYPES,
                                  "GPU")
    assert tf_sut.executed_precision("tf-amp", {"float16": {"Conv2D": 3},
                                                "float32": {"MatMul": 1}},
                                     tf_sut.HALF_DTYPES, "GPU") == "fp16+fp32"


# --------------------------------------------------------------------------- fingerprint

def test_fingerprint_has_no_gpu_here():
    if gpu_present():
        pytest.skip("this machine has an NVIDIA GPU")
    assert fingerprint.machine()["gpu"] is None


def test_fingerprint_reads_nvml_and_never_fails(monkeypatch):
    handle = object()
    memory = types.SimpleNamespace(total=80 * 2**30)
    nvml = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: handle,
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3",
        nvmlDeviceGetMemoryInfo=lambda h: memory,
        nvmlDeviceGetCudaComputeCapability=lambda h: (9, 0),
        nvmlSystemGetDriverVersion=lambda: "550.54.15",
        nvmlSystemGetCudaDriverVersion=lambda: 12040)
    monkeypatch.setattr("quantmark.sut.registry.gpu_present", lambda: True)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    facts = fingerprint.gpu_facts()
    assert facts["source"] == "nvml" and facts["driver"] == "550.54.15"
    assert facts["cuda_driver_api"] == "12.4"
    assert facts["devices"] == [{"index": 0, "name": "NVIDIA H100 80GB HBM3",
                                 "memory_mb": 81920, "compute_capability": "sm_90"}]

    def broken():
        raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setitem(sys.modules, "pynvml", types.SimpleNamespace(nvmlInit=broken))
    facts = fingerprint.gpu_facts()  # torch: only if this process runs it with CUDA
    assert facts is None or facts["source"] == "torch.cuda"


# --------------------------------------------------------------------------- on a GPU

def _torch_gpu_skip() -> str | None:
    if not gpu_present():
        return "needs an NVIDIA GPU (none found)"
    if not HAS_TORCH:
        return "needs torch"
    return _pytorch_cuda().cuda_blocker()


@pytest.mark.gpu
@pytest.mark.skipif(_torch_gpu_skip() is not None, reason=str(_torch_gpu_skip()))
def test_torch_cuda_fp16_against_fp32(digits_weights, digits_data):
    pytorch_cuda = _pytorch_cuda()
    scores, described = {}, {}
    for name in ("torch-cuda-fp32", "torch-cuda-fp16", "torch-cuda-compile"):
        backend = pytorch_cuda.create(name, _torch_options(digits_weights), DIGITS_SPEC, None)
        backend.load()
        scores[name] = backend.predict(digits_data.eval_x)
        assert backend.predict(digits_data.eval_x[:3]).shape == (3, 10)
        described[name] = backend.describe()
        backend.close()
    fp32 = top1(scores["torch-cuda-fp32"], digits_data.eval_y)
    assert fp32 > 90
    assert abs(top1(scores["torch-cuda-fp16"], digits_data.eval_y) - fp32) <= 1.0
    assert described["torch-cuda-fp32"]["executed_precision"] == "fp32"
    assert described["torch-cuda-fp32"]["gpu_settings"]["cudnn_allow_tf32"] is False
    assert described["torch-cuda-fp16"]["executed_precision"] == "fp16"
    assert described["torch-cuda-compile"]["compile"]["cuda_graphs"] is True
    np.testing.assert_allclose(scores["torch-cuda-compile"], scores["torch-cuda-fp32"],
                               rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.skipif(_torch_gpu_skip() is not None, reason=str(_torch_gpu_skip()))
def test_torch_cuda_fp16_offline_valid_with_its_ratio_and_gpu_trackers(tmp_path):
    """What a GPU user runs: a sweep of torch-cuda-fp32 and -fp16, Offline, through LoadGen.
    Both VALID, fp16 proven, its ratio to the GPU FP32, GPU memory tracked, GPU fingerprinted."""
    out = tmp_path / "sweep"
    proc = run_cli("sweep", "--models", "resnet50", "--suts", "torch-cuda-fp32,torch-cuda-fp16",
                   "--scenarios", "Offline", "--batch-sizes", "32", "--seconds", "5",
                   "--output", str(out), timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out / "report.csv", newline="") as handle:
        rows = {row["sut"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"torch-cuda-fp32", "torch-cuda-fp16"}
    assert all(row["validity"] == "VALID" for row in rows.values()), rows
    assert rows["torch-cuda-fp32"]["executed_precision"] == "fp32"
    assert rows["torch-cuda-fp16"]["executed_precision"] == "fp16"
    assert float(rows["torch-cuda-fp32"]["speedup_vs_fp32"]) == 1.0
    assert float(rows["torch-cuda-fp16"]["speedup_vs_fp32"]) > 0
    results = [json.loads(p.read_text()) for p in (out / "runs").rglob("results.json")]
    assert results and all(r["machine"]["gpu"]["devices"] for r in results)
    assert {r["sut"]["fp32_baseline"] for r in results} == {"torch-cuda-fp32"}
    if importlib.util.find_spec("pynvml") is not None:
        assert all(float(row["gpu_memory_mb"]) > 0 for row in rows.values()), rows


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
