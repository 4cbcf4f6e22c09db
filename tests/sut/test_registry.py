"""The registry: every name listed, availability reasons, no framework imported to list."""

from __future__ import annotations

import pytest

from quantmark.ground.errors import UserError
from quantmark.sut import registry
from tests.conftest import run_json

# the built-in frameworks' folders, and the names results folders and scripts already use (a
# rename would break them); a new framework adds to the registry without touching either
FRAMEWORK_FOLDERS = ("onnxruntime", "openvino", "pytorch", "tensorflow", "tensorrt", "tflite")
CONTRACT_NAMES = ("ort-fp32", "ort-int8", "ort-fp16", "ort-int8dyn", "ov-fp32", "ov-bf16",
                  "ov-fp16", "ov-int8", "tflite-fp32", "tflite-fp16", "tflite-int8dyn",
                  "tflite-int8", "torch-fp32", "torch-bf16", "torch-int8", "torch-int8dyn",
                  "torch-compile", "tf-fp32", "tf-xla", "tf-amp", "trt-fp32", "trt-fp16",
                  "trt-int8", "ort-cuda-fp32", "ort-cuda-fp16", "ort-trt-fp16", "ort-trt-int8",
                  "torch-cuda-fp32", "torch-cuda-fp16", "torch-cuda-bf16", "torch-cuda-compile",
                  "torch-cuda-int8")


def test_every_framework_folder_is_collected():
    """The registry is what the folders declare: every sut/<framework>/suts.py, each name once."""
    found = registry.builtin_data_modules()
    assert {f"quantmark.sut.{folder}.suts" for folder in FRAMEWORK_FOLDERS} <= set(found)
    assert len(found) == len(registry.FRAMEWORKS)  # no plugin installed here
    declared = [info.name for f in registry.FRAMEWORKS.values() for info in f.suts]
    assert len(declared) == len(set(declared)) and set(declared) == set(registry.SUTS)
    for name in CONTRACT_NAMES:
        assert name in registry.SUTS
    for info in registry.SUTS.values():
        assert info.package.startswith("quantmark.sut.") and info.distributions, info.name


def test_relative_factories_resolve_against_their_framework_folder():
    create = registry.load_factory(registry.get_sut("ort-fp32"))
    assert create.__module__ == "quantmark.sut.onnxruntime.backend"
    with pytest.raises(UserError, match="not built yet"):
        registry.load_factory(registry.get_sut("tftrt-fp16"))


def test_variant_order_merges_every_framework_s_own_order():
    assert registry.variant_order() == ("fp32", "fp16", "bf16", "int8", "int8dyn", "compile",
                                        "xla", "amp")
    for framework in registry.FRAMEWORKS.values():
        merged = [v for v in registry.variant_order() if v in framework.variant_order]
        assert merged == list(framework.variant_order), framework.name


def test_unknown_sut_lists_valid_names():
    with pytest.raises(UserError) as info:
        registry.get_sut("ort-int4")
    assert "unknown SUT 'ort-int4'" in str(info.value) and "ort-int8" in str(info.value)


def test_gpu_sut_without_gpu_says_why(monkeypatch):
    monkeypatch.setattr(registry, "gpu_present", lambda: False)
    ok, reason = registry.availability(registry.get_sut("trt-int8"))
    assert not ok and "NVIDIA GPU" in reason


def test_missing_framework_names_the_extra(monkeypatch):
    monkeypatch.setattr(registry, "_missing_modules", lambda modules: list(modules))
    ok, reason = registry.availability(registry.get_sut("ort-int8"))
    assert not ok and "pip install 'quantmark[ort]'" in reason
    with pytest.raises(UserError, match="cannot run here"):
        registry.require_available("ort-int8")


def test_every_cpu_sut_is_built_and_available_with_the_cpu_extra():
    for info in registry.SUTS.values():
        if info.device == "cpu":
            assert info.implemented, info.name
            assert registry.availability(info) == (True, ""), info.name


def test_every_fp32_baseline_is_a_known_sut():
    for framework, name in registry.FP32_BASELINE.items():
        assert registry.get_sut(name).framework == framework
        assert registry.get_sut(name).device == "cpu" and registry.get_sut(name).variant == "fp32"


def test_listing_imports_no_framework():
    result = run_json("""
        import json, sys
        from quantmark.sut.registry import SUTS, availability
        rows = [availability(info) for info in SUTS.values()]
        heavy = [m for m in ("onnxruntime", "torch", "tensorflow", "openvino", "tensorrt",
                             "ai_edge_litert", "nncf", "onnx") if m in sys.modules]
        print(json.dumps({"heavy": heavy, "count": len(rows)}))
    """)
    assert result["heavy"] == [] and result["count"] == len(registry.SUTS)


def test_sut_options_are_checked_against_what_the_sut_reads():
    suts = registry.SUTS
    registry.check_options(suts["tflite-int8"], {"tflite_invoke": "per-sample"})
    registry.check_options(suts["ort-int8"], {})
    from quantmark.sut.tflite.suts import TFLITE_INVOKE_MODES

    assert TFLITE_INVOKE_MODES == ("batched", "per-sample")
    with pytest.raises(UserError, match="choose one of batched, per-sample"):
        registry.check_options(suts["tflite-int8"], {"tflite_invoke": "sometimes"})
    with pytest.raises(UserError, match="ort-int8 has no option 'tflite_invoke'.*none"):
        registry.check_options(suts["ort-int8"], {"tflite_invoke": "batched"})


GPU_SUTS = [name for name, info in registry.SUTS.items() if info.device == "gpu"]


def test_every_gpu_sut_says_exactly_why_it_cannot_run_here():
    if registry.gpu_present():
        pytest.skip("this machine has an NVIDIA GPU")
    for name in GPU_SUTS:
        ok, reason = registry.availability(registry.SUTS[name])
        assert not ok and reason, name
        if name != "tftrt-fp16":
            assert reason.startswith("needs an NVIDIA GPU (none found)"), (name, reason)
            assert "not built yet" not in reason, (name, reason)


def _cpu_machine(monkeypatch, missing=("tensorrt", "torchao")):
    """A machine like the CI box: no GPU, the CPU wheels of onnxruntime and torch."""
    versions = {"onnxruntime": "1.31.1", "torch": "2.13.0+cpu"}
    monkeypatch.setattr(registry, "gpu_present", lambda: False)
    monkeypatch.setattr(registry, "_ships", lambda module, subdir, stem: False)
    monkeypatch.setattr(registry, "_dist_version", versions.get)
    monkeypatch.setattr(registry, "_missing_modules",
                        lambda modules: [m for m in modules if m in missing])


def test_gpu_reasons_name_the_missing_gpu_builds(monkeypatch):
    _cpu_machine(monkeypatch)
    reason = {name: registry.availability(registry.SUTS[name])[1] for name in GPU_SUTS}
    assert reason["ort-cuda-fp16"] == (
        "needs an NVIDIA GPU (none found); onnxruntime-gpu not installed (onnxruntime 1.31.1 "
        "here is the CPU build, without CUDAExecutionProvider): pip uninstall -y onnxruntime "
        "&& pip install 'quantmark[ort-gpu]'")
    assert reason["ort-trt-int8"] == (
        "needs an NVIDIA GPU (none found); tensorrt not installed; onnxruntime-gpu not "
        "installed (onnxruntime 1.31.1 here is the CPU build, without "
        "TensorrtExecutionProvider): pip uninstall -y onnxruntime && pip install "
        "'quantmark[ort-trt]'")
    assert reason["torch-cuda-fp16"] == (
        "needs an NVIDIA GPU (none found); torch 2.13.0+cpu is a CPU-only build: install a "
        "CUDA build of torch (see https://pytorch.org/get-started/locally/)")
    assert reason["torch-cuda-int8"].startswith(
        "needs an NVIDIA GPU (none found); needs torchao (pip install torchao) and a CUDA GPU; "
        "torch 2.13.0+cpu is a CPU-only build")
    assert reason["trt-fp16"] == ("needs an NVIDIA GPU (none found); tensorrt not installed: "
                                  "pip install 'quantmark[trt]'")
    _cpu_machine(monkeypatch, missing=("tensorrt", "cuda"))
    assert registry.availability(registry.SUTS["trt-int8"])[1] == (
        "needs an NVIDIA GPU (none found); tensorrt, cuda-python not installed: "
        "pip install 'quantmark[trt]'")


def test_gpu_suts_run_on_a_gpu_machine_with_the_gpu_builds(monkeypatch):
    monkeypatch.setattr(registry, "gpu_present", lambda: True)
    monkeypatch.setattr(registry, "_ships", lambda module, subdir, stem: True)
    monkeypatch.setattr(registry, "_missing_modules", lambda modules: [])
    for name in GPU_SUTS:
        if name != "tftrt-fp16":
            assert registry.availability(registry.SUTS[name]) == (True, ""), name


def test_a_cpu_onnxruntime_over_onnxruntime_gpu_is_named(monkeypatch):
    _cpu_machine(monkeypatch, missing=())
    monkeypatch.setattr(registry, "gpu_present", lambda: True)
    monkeypatch.setattr(registry, "_dist_version",
                        {"onnxruntime": "1.31.1", "onnxruntime-gpu": "1.31.1"}.get)
    ok, reason = registry.availability(registry.SUTS["ort-cuda-fp32"])
    assert not ok and "the CPU onnxruntime overwrote onnxruntime-gpu's" in reason
    # no onnxruntime at all: the extra, not the provider, is what is missing
    _cpu_machine(monkeypatch, missing=("onnxruntime", "onnx"))
    ok, reason = registry.availability(registry.SUTS["ort-cuda-fp32"])
    assert reason.endswith("onnxruntime, onnx not installed: pip install 'quantmark[ort-gpu]'")


def test_gpu_suts_factories_options_and_baselines():
    suts = registry.SUTS
    for name in ("trt-fp32", "trt-fp16", "trt-int8"):
        assert suts[name].factory == ".backend:create"
        assert suts[name].package == "quantmark.sut.tensorrt"
        assert suts[name].requires == ("tensorrt", "cuda", "onnx", "onnxruntime")
        assert suts[name].extra == "trt"
    assert suts["trt-int8"].options == (("trt_int8_route", ("calibrator", "qdq")),)
    registry.check_options(suts["ort-trt-int8"], {"trt_int8_route": "qdq"})
    registry.check_options(suts["torch-cuda-compile"], {"cuda_graphs": "off"})
    with pytest.raises(UserError, match="ort-cuda-fp16 has no option 'trt_int8_route'"):
        registry.check_options(suts["ort-cuda-fp16"], {"trt_int8_route": "qdq"})
    for name in GPU_SUTS:
        info = suts[name]
        assert info.implemented or name == "tftrt-fp16", name
    assert registry.fp32_baseline("ort-cuda-fp16") == "ort-cuda-fp32"
    assert registry.fp32_baseline("torch-cuda-int8") == "torch-cuda-fp32"
    assert registry.fp32_baseline("trt-int8") == "trt-fp32"
    assert registry.fp32_baseline("ort-int8") == "ort-fp32"
    for name in registry.GPU_FP32_BASELINE.values():
        assert suts[name].device == "gpu" and suts[name].precision.startswith("fp32")
