"""Precision as data: each SUT's precision key, the executed precisions that prove it and
whether it calibrates are fields of its registry entry, written once and read by its backend.

The key and the listing's display text cannot drift apart; a plugin that declares no key is
refused at registry load with one clear line; each backend's load-time check demands what its
entry's ``proof`` says (checked on hand-made evidence, no model needed).
"""

from __future__ import annotations

import importlib.metadata
import logging
import re
from dataclasses import replace
from types import SimpleNamespace

import pytest

from quantmark.ground.errors import SutError, UserError
from quantmark.sut import registry
from quantmark.sut.info import PRECISION_KEYS, SutInfo

BUILT_IN = [name for name, info in registry.SUTS.items()
            if info.package.startswith("quantmark.sut.")]
#: the precisions the built-in backends' evidence names (TFLite's: the file's class)
EXECUTED = {"fp32", "fp16", "bf16", "int8", "int8dyn"}


def test_every_entry_declares_a_known_key_that_agrees_with_its_display_text():
    """"int8 dynamic ..." is int8dyn, "mixed ..." is mixed, otherwise the first word."""
    assert len(BUILT_IN) >= 33
    for name in BUILT_IN:
        info = registry.SUTS[name]
        assert info.precision_key in PRECISION_KEYS, name
        first = re.split(r"[ (]", info.precision)[0]
        assert first == info.precision_key.removesuffix("dyn"), (name, info.precision)
        assert ("dynamic" in info.precision) == (info.precision_key == "int8dyn"), name


def test_calibration_follows_the_key_and_matches_what_results_recorded_so_far():
    """Static INT8 calibrates; the old display-text rule ("int8" in it, "dynamic" not) gives
    the same answer for every built-in SUT, so switching the record to the field changes no
    result."""
    for name in BUILT_IN:
        info = registry.SUTS[name]
        text_rule = "int8" in info.precision and "dynamic" not in info.precision
        assert info.needs_calibration is (info.precision_key == "int8") is text_rule, name
        assert registry.needs_calibration(name) is info.needs_calibration
    assert registry.SUTS["torch-cuda-int8"].precision_key == "int8dyn"  # torchao: dynamic


def test_proof_names_executed_precisions():
    for name in BUILT_IN:
        info = registry.SUTS[name]
        assert set(info.proof) <= EXECUTED, name
        assert info.proof or name in ("ort-trt-fp16", "ort-trt-int8"), name  # fused engine
    assert registry.SUTS["ort-int8dyn"].proof == ("int8",)
    assert registry.SUTS["tf-amp"].proof == ("bf16", "fp16")
    amp = registry.SUTS["tf-amp"]
    assert amp.proven({"bf16": 3, "fp32": 1}) and not amp.proven({"fp32": 4, "bf16": 0})
    assert registry.SUTS["ort-trt-int8"].proven({})  # nothing can prove it: its flags say


def test_undeclared_fields_derive_from_the_key_declared_ones_stay():
    info = SutInfo("x-int8", "x", "int8 whatever", "cpu", "x", (), None, precision_key="int8")
    assert info.proof == ("int8",) and info.needs_calibration is True
    info = SutInfo("x-int8", "x", "int8", "cpu", "x", (), None, precision_key="int8",
                   proof=(), needs_calibration=False)
    assert info.proof == () and info.needs_calibration is False


# --------------------------------------------------------------------------- plugins

PLUGIN = """
from quantmark.sut.info import FrameworkInfo, SutInfo

FRAMEWORK = FrameworkInfo(name="{name}", suts=(
    SutInfo("{name}-int4", "{name}", "int4 AWQ", "cpu", "{name}", (), None{extra}),),
    distributions=("{name}",))
"""


def _plugin(tmp_path, monkeypatch, name: str, extra: str = "") -> str:
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / name / "suts.py").write_text(PLUGIN.format(name=name, extra=extra))
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{name}.suts"


def test_a_plugin_sut_without_a_precision_key_is_refused_with_one_line(tmp_path, monkeypatch):
    module = _plugin(tmp_path, monkeypatch, "qm_plugin_nokey")
    with pytest.raises(TypeError) as info:
        registry._load(module, "FRAMEWORK")
    message = str(info.value)
    assert message.startswith("qm_plugin_nokey.suts.FRAMEWORK: SUT 'qm_plugin_nokey-int4' "
                              "declares precision_key=none: declare")
    assert "fp32, fp16, bf16, int8, int8dyn, mixed" in message and "\n" not in message
    bad = _plugin(tmp_path, monkeypatch, "qm_plugin_text", ', precision_key="int4 AWQ"')
    with pytest.raises(TypeError, match="precision_key='int4 AWQ', not a key"):
        registry._load(bad, "FRAMEWORK")


def test_a_plugin_of_its_own_key_loads_and_a_refused_one_is_skipped(tmp_path, monkeypatch,
                                                                    caplog):
    good = _plugin(tmp_path, monkeypatch, "qm_plugin_int4", ', precision_key="int4"')
    framework, _ = registry._load(good, "FRAMEWORK")
    info = framework.suts[0]
    assert (info.precision_key, info.proof, info.needs_calibration) == ("int4", ("int4",), False)
    broken = _plugin(tmp_path, monkeypatch, "qm_plugin_broken")
    points = [importlib.metadata.EntryPoint(name, f"{module}", registry.ENTRY_POINT_GROUP)
              for name, module in (("broken", broken), ("int4", good))]
    monkeypatch.setattr(registry, "plugin_data_modules", lambda: points)
    with caplog.at_level(logging.WARNING, logger=registry.__name__):
        names = [framework.name for framework, _ in registry._declared()]
    assert "qm_plugin_int4" in names and "qm_plugin_broken" not in names
    assert "framework plugin 'broken'" in caplog.text and "declares precision_key" in caplog.text


# --------------------------------------------------------------------------- look-ups

def test_a_backend_module_answers_only_for_its_own_suts():
    assert registry.module_sut("torch-int8", "quantmark.sut.pytorch.backend").name == "torch-int8"
    with pytest.raises(UserError, match=r"quantmark.sut.pytorch.backend has no SUT "
                                        r"'torch-cuda-fp16'; it runs torch-fp32, torch-bf16"):
        registry.module_sut("torch-cuda-fp16", "quantmark.sut.pytorch.backend")
    assert registry.find_sut("tflite", "int8dyn").name == "tflite-int8dyn"
    assert registry.find_sut("tensorrt", "fp16", "gpu").name == "trt-fp16"
    with pytest.raises(UserError, match="tflite has no cpu SUT computing in 'bf16'"):
        registry.find_sut("tflite", "bf16")
    with pytest.raises(UserError, match="more than one"):
        registry.find_sut("torch", "fp32")  # eager and compiled


# --------------------------------------------------------------------------- backends read it

def _ort_cpu(precision: str, sut: SutInfo | None = None):
    pytest.importorskip("onnxruntime")
    from quantmark.sut.onnxruntime.backend import OnnxRuntimeBackend

    backend = OnnxRuntimeBackend("m.onnx", precision, 1, SimpleNamespace(meta={}), sut=sut)
    backend._executed = {"executed_precision": "?"}
    return backend


def test_onnxruntime_cpu_demands_its_entry_s_proof():
    _ort_cpu("int8dyn")._check({"int8": 3, "fp32": 1})
    with pytest.raises(SutError, match="ort-int8dyn: onnxruntime ran no int8 compute kernel.*"
                                       "refusing to measure FP32 as INT8"):
        _ort_cpu("int8dyn")._check({"fp32": 4})
    with pytest.raises(SutError, match="measure a run with no compute kernel as FP32"):
        _ort_cpu("fp32")._check({})
    fp16 = _ort_cpu("fp16")
    fp16._check({"fp32": 4})  # the CPU provider's known gap: runs, with a note
    assert "no FP16 convolution" in fp16._executed["precision_note"]
    stricter = replace(registry.get_sut("ort-int8dyn"), proof=("fp16",))
    with pytest.raises(SutError, match="ran no fp16 compute kernel"):
        _ort_cpu("int8dyn", stricter)._check({"int8": 3})


def test_onnxruntime_gpu_demands_its_proof_unless_tensorrt_fused_it():
    pytest.importorskip("onnxruntime")
    from quantmark.sut.onnxruntime import gpu

    def check(name: str, provider: str, per_precision: dict[str, int]) -> dict:
        backend = object.__new__(gpu.OnnxRuntimeGpuBackend)
        sut = registry.get_sut(name)
        backend.name, backend.provider, backend.sut = name, provider, sut
        backend.precision = sut.precision_key
        backend._session = SimpleNamespace(get_providers=lambda: [provider])
        backend._placement = {provider: {"Conv": 3}}
        backend._executed = {}
        backend._check(per_precision)
        return backend._executed

    check("ort-cuda-fp16", gpu.CUDA_EP, {"fp16": 3})
    with pytest.raises(SutError, match="ort-cuda-fp16: no compute kernel ran in FP16.*"
                                       "refusing to measure FP32 as FP16"):
        check("ort-cuda-fp16", gpu.CUDA_EP, {"fp32": 3})
    with pytest.raises(SutError, match="not only FP32"):
        check("ort-cuda-fp32", gpu.CUDA_EP, {"fp32": 2, "fp16": 1})
    executed = check("ort-trt-int8", gpu.TRT_EP, {})
    assert executed["executed_precision"] == "int8+fp16 (TensorRT)"


def test_openvino_demands_its_entry_s_proof():
    pytest.importorskip("openvino")
    from quantmark.sut.openvino.backend import OpenVinoBackend

    def backend(precision: str, sut: SutInfo | None = None) -> OpenVinoBackend:
        return OpenVinoBackend("m.xml", precision, "Offline", 1, SimpleNamespace(meta={}),
                               sut=sut)

    backend("int8")._check({"int8": {"Convolution": 2}, "fp32": {"MatMul": 1}})
    backend("bf16")._check({"bf16": {"Convolution": 2}})
    with pytest.raises(SutError, match="ov-int8: no compute layer runs i8/u8"):
        backend("int8")._check({"fp32": {"Convolution": 2}})
    with pytest.raises(SutError, match="ov-bf16: compute layers run"):
        backend("bf16")._check({"fp32": {"Convolution": 2}})
    either = replace(registry.get_sut("ov-bf16"), proof=("bf16", "fp32"))
    backend("bf16", either)._check({"fp32": {"Convolution": 2}})


def test_tflite_demands_the_file_class_its_entry_names():
    pytest.importorskip("ai_edge_litert")
    from quantmark.sut.tflite.backend import TFLiteBackend

    def summary(integer=0, hybrid=0, float16=0, dequantize=0, weights=0) -> dict:
        return {"compute_ops": {"integer": integer, "hybrid": hybrid, "float": 3,
                                "float16": float16},
                "int8_weight_tensors": weights, "fp16_weight_dequantize_ops": dequantize}

    artifact = SimpleNamespace(path="m.tflite", meta={})
    TFLiteBackend(artifact, "int8dyn")._check(summary(hybrid=2, weights=2), "int8 dynamic")
    TFLiteBackend(artifact, "fp16")._check(summary(dequantize=3), "fp32 (fp16 weights)")
    with pytest.raises(SutError, match="tflite-int8dyn: .*refusing to measure FP32 as INT8"):
        TFLiteBackend(artifact, "int8dyn")._check(summary(hybrid=2), "int8 dynamic")
    with pytest.raises(SutError, match="tflite-fp32: m.tflite holds a fp16 model, not fp32; "
                                       "run it as tflite-fp16"):
        TFLiteBackend(artifact, "fp32")._check(summary(dequantize=3), "fp32 (fp16 weights)")
