"""The registry: every name listed, availability reasons, no framework imported to list."""

from __future__ import annotations

import pytest

from quantmark.errors import UserError
from sut import registry
from tests.conftest import run_json


def test_contract_names_are_listed():
    for name in ("ort-fp32", "ort-int8", "ort-fp16", "ort-int8dyn", "ov-fp32", "ov-bf16",
                 "ov-fp16", "ov-int8", "tflite-fp32", "tflite-fp16", "tflite-int8dyn",
                 "tflite-int8", "torch-fp32", "torch-bf16", "torch-int8", "torch-int8dyn",
                 "torch-compile", "tf-fp32", "tf-xla", "tf-amp", "trt-fp32", "trt-fp16",
                 "trt-int8"):
        assert name in registry.SUTS


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


def test_listing_imports_no_framework():
    result = run_json("""
        import json, sys
        from sut.registry import SUTS, availability
        rows = [availability(info) for info in SUTS.values()]
        heavy = [m for m in ("onnxruntime", "torch", "tensorflow", "openvino") if m in sys.modules]
        print(json.dumps({"heavy": heavy, "count": len(rows)}))
    """)
    assert result["heavy"] == [] and result["count"] == len(registry.SUTS)


def test_sut_options_are_checked_against_what_the_sut_reads():
    suts = registry.SUTS
    registry.check_options(suts["tflite-int8"], {"tflite_invoke": "per-sample"})
    registry.check_options(suts["ort-int8"], {})
    assert registry.TFLITE_INVOKE_MODES == ("batched", "per-sample")
    with pytest.raises(UserError, match="choose one of batched, per-sample"):
        registry.check_options(suts["tflite-int8"], {"tflite_invoke": "sometimes"})
    with pytest.raises(UserError, match="ort-int8 has no option 'tflite_invoke'.*none"):
        registry.check_options(suts["ort-int8"], {"tflite_invoke": "batched"})
