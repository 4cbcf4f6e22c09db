"""Every SUT name quantmark knows, and whether this machine can run it.

The registry is plain data: looking a name up never imports a framework. ``availability``
checks installed packages with ``importlib.util.find_spec`` and the GPU with the driver's device
files, so ``--list-suts`` is fast and works with no framework installed at all.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass

from quantmark.errors import UserError


@dataclass(frozen=True)
class SutInfo:
    """One framework x precision x device combination."""

    name: str
    framework: str
    precision: str
    device: str  # "cpu" or "gpu"
    extra: str  # the setup.py extra that installs the framework
    requires: tuple[str, ...]  # importable module names the SUT needs
    factory: str | None  # "module:callable" building the SUT; None = not built yet
    note: str = ""
    # --sut-option KEY=VALUE the SUT reads: (key, accepted values) pairs
    options: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def implemented(self) -> bool:
        return self.factory is not None


def _cpu(name: str, framework: str, precision: str, extra: str, requires: tuple[str, ...],
         factory: str | None = None, note: str = "") -> SutInfo:
    return SutInfo(name, framework, precision, "cpu", extra, requires, factory, note)


# TFLite's invoke modes: the batch in one invoke, or one invoke per sample at batch 1
TFLITE_INVOKE_MODES = ("batched", "per-sample")
_TFLITE_OPTIONS = (("tflite_invoke", TFLITE_INVOKE_MODES),)


def _tflite(name: str, precision: str) -> SutInfo:
    return SutInfo(name, "tflite", precision, "cpu", "tflite", _TFLITE, "sut.tflite:create",
                   options=_TFLITE_OPTIONS)


def _gpu(name: str, framework: str, precision: str, extra: str, requires: tuple[str, ...],
         note: str = "") -> SutInfo:
    return SutInfo(name, framework, precision, "gpu", extra, requires, None, note)


_ORT = ("onnxruntime", "onnx")
_OV = ("openvino", "nncf")
_TFLITE = ("ai_edge_litert",)
_TF = ("tensorflow", "onnx2tf")
_TORCH = ("torch",)
_TRT = ("tensorrt",)

SUTS: dict[str, SutInfo] = {
    info.name: info
    for info in (
        _cpu("ort-fp32", "onnxruntime", "fp32", "ort", _ORT, "sut.onnxruntime:create"),
        _cpu("ort-int8", "onnxruntime", "int8 static (QDQ, per-channel)", "ort", _ORT,
             "sut.onnxruntime:create"),
        _cpu("ort-fp16", "onnxruntime", "fp16", "ort", _ORT, "sut.onnxruntime:create"),
        _cpu("ort-int8dyn", "onnxruntime", "int8 dynamic", "ort", _ORT, "sut.onnxruntime:create"),
        _cpu("ov-fp32", "openvino", "fp32", "openvino", _OV, "sut.openvino:create"),
        _cpu("ov-bf16", "openvino", "bf16", "openvino", _OV, "sut.openvino:create"),
        _cpu("ov-fp16", "openvino", "fp16", "openvino", _OV, "sut.openvino:create"),
        _cpu("ov-int8", "openvino", "int8 (NNCF)", "openvino", _OV, "sut.openvino:create"),
        _tflite("tflite-fp32", "fp32"),
        _tflite("tflite-fp16", "fp16 weights"),
        _tflite("tflite-int8dyn", "int8 dynamic range"),
        _tflite("tflite-int8", "int8 full integer"),
        _cpu("torch-fp32", "torch", "fp32", "torch", _TORCH, "sut.pytorch:create"),
        _cpu("torch-bf16", "torch", "bf16 autocast", "torch", _TORCH, "sut.pytorch:create"),
        _cpu("torch-int8", "torch", "int8 static (x86)", "torch", _TORCH, "sut.pytorch:create"),
        _cpu("torch-int8dyn", "torch", "int8 dynamic", "torch", _TORCH, "sut.pytorch:create"),
        _cpu("torch-compile", "torch", "fp32 torch.compile", "torch", _TORCH, "sut.pytorch:create"),
        _cpu("tf-fp32", "tensorflow", "fp32", "tf", _TF, "sut.tensorflow:create"),
        _cpu("tf-xla", "tensorflow", "fp32 XLA", "tf", _TF, "sut.tensorflow:create"),
        _cpu("tf-amp", "tensorflow", "mixed (bf16 CPU / fp16 GPU)", "tf", _TF,
             "sut.tensorflow:create"),
        _gpu("trt-fp32", "tensorrt", "fp32", "trt", _TRT),
        _gpu("trt-fp16", "tensorrt", "fp16", "trt", _TRT),
        _gpu("trt-int8", "tensorrt", "int8 (entropy calibration)", "trt", _TRT),
        SutInfo("tftrt-fp16", "tensorflow-tensorrt", "fp16", "gpu", "tf", _TF, None,
                note="TF-TRT was removed after TensorFlow 2.17; TensorFlow >= 2.18 has no "
                     "TensorRT"),
    )
}


# Each framework's FP32 SUT: the baseline its other precisions are compared with.
FP32_BASELINE: dict[str, str] = {"onnxruntime": "ort-fp32", "openvino": "ov-fp32",
                                 "tflite": "tflite-fp32", "torch": "torch-fp32",
                                 "tensorflow": "tf-fp32", "tensorrt": "trt-fp32"}


def get_sut(name: str) -> SutInfo:
    """Look a SUT up by name; unknown names get the list of valid ones."""
    try:
        return SUTS[name]
    except KeyError:
        raise UserError(f"unknown SUT '{name}'; valid SUTs: {', '.join(SUTS)}") from None


def gpu_present() -> bool:
    """An NVIDIA GPU is visible (driver device node); cheap and import-free."""
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/nvidia0")


def _missing_modules(modules: tuple[str, ...]) -> list[str]:
    return [module for module in modules if importlib.util.find_spec(module) is None]


def availability(info: SutInfo) -> tuple[bool, str]:
    """(can run here, why not): every blocker, each naming its fix where there is one."""
    if info.framework == "tensorflow-tensorrt":
        return False, info.note
    blockers: list[str] = []
    if not info.implemented:
        blockers.append("not built yet in this quantmark version")
    if info.device == "gpu" and not gpu_present():
        blockers.append("needs an NVIDIA GPU (none found)")
    missing = _missing_modules(info.requires)
    if missing:
        blockers.append(f"{', '.join(missing)} not installed: "
                        f"pip install 'quantmark[{info.extra}]'")
    return (not blockers), "; ".join(blockers)


def require_available(name: str) -> SutInfo:
    """The SutInfo for ``name`` if it can run here, else a one-line UserError saying why."""
    info = get_sut(name)
    ok, reason = availability(info)
    if not ok:
        raise UserError(f"SUT '{name}' cannot run here: {reason}")
    return info


def check_options(info: SutInfo, options: dict[str, str]) -> None:
    """Every --sut-option must be one this SUT reads, with a value it accepts."""
    accepted = dict(info.options)
    for key, value in options.items():
        if key not in accepted:
            known = ", ".join(accepted) or "none"
            raise UserError(f"--sut-option {key}={value}: {info.name} has no option {key!r} "
                            f"(its options: {known})")
        if value not in accepted[key]:
            raise UserError(f"--sut-option {key}={value}: choose one of "
                            f"{', '.join(accepted[key])}")


def load_factory(info: SutInfo):
    """Import the SUT's module (only now does the framework get imported)."""
    assert info.factory is not None
    module_name, _, attribute = info.factory.partition(":")
    return getattr(importlib.import_module(module_name), attribute)
