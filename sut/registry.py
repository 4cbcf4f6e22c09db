"""Every SUT name quantmark knows, and whether this machine can run it.

The registry is plain data: looking a name up never imports a framework. ``availability``
checks installed packages with ``importlib.util.find_spec`` and package metadata, the GPU with
the driver's device files, and a GPU build of a framework by the files it ships (ONNX Runtime's
CUDA/TensorRT provider libraries, torch's CUDA library), so ``--list-suts`` is fast, works with
no framework installed at all, and names every blocker with its fix.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from quantmark.ground.errors import UserError
from quantmark.ground.fingerprint import gpu_present
from quantmark.ground.fingerprint import package_version as _dist_version

_Options = tuple[tuple[str, tuple[str, ...]], ...]  # (--sut-option key, accepted values) pairs


@dataclass(frozen=True)
class SutInfo:
    """One framework x precision x device combination."""

    name: str
    framework: str
    precision: str
    device: str  # "cpu" or "gpu"
    extra: str  # the setup.py extra that installs the framework
    requires: tuple[str, ...]  # importable module names the SUT needs
    # "module:callable" building the SUT, the module relative to quantmark.sut (".tflite") or
    # absolute; None = not built yet
    factory: str | None
    note: str = ""
    # --sut-option KEY=VALUE the SUT reads: (key, accepted values) pairs
    options: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # a GPU build the SUT needs beyond importable modules: an ONNX Runtime execution provider
    # ("ort:CUDAExecutionProvider") or torch's CUDA build ("torch:cuda"): _gpu_build_blocker
    gpu_build: str = ""

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
    return SutInfo(name, "tflite", precision, "cpu", "tflite", _TFLITE, ".tflite:create",
                   options=_TFLITE_OPTIONS)


def _gpu(name: str, framework: str, precision: str, extra: str, requires: tuple[str, ...],
         factory: str | None = None, note: str = "", gpu_build: str = "",
         options: _Options = ()) -> SutInfo:
    return SutInfo(name, framework, precision, "gpu", extra, requires, factory, note, options,
                   gpu_build)


_ORT = ("onnxruntime", "onnx")
_OV = ("openvino", "nncf")
_TFLITE = ("ai_edge_litert",)
_TF = ("tensorflow", "onnx2tf")
_TORCH = ("torch",)
_TRT = ("tensorrt", "cuda", "onnx", "onnxruntime")  # cuda: cuda-python
_ORT_TRT = ("onnxruntime", "onnx", "tensorrt")

# INT8 with TensorRT: a calibration table (implicit quantization: TensorRT's calibrator for
# trt-int8, ONNX Runtime's for ort-trt-int8) or a symmetric QDQ model (explicit quantization)
TRT_INT8_ROUTE_OPTION = "trt_int8_route"
TRT_INT8_ROUTES = ("calibrator", "qdq")
_TRT_INT8_OPTIONS = ((TRT_INT8_ROUTE_OPTION, TRT_INT8_ROUTES),)
# torch-cuda-compile: CUDA graphs captured over the compiled model, or plain compiled calls
CUDA_GRAPHS_OPTION = "cuda_graphs"
TORCH_CUDA_GRAPHS = ("on", "off")
_TORCH_COMPILE_OPTIONS = ((CUDA_GRAPHS_OPTION, TORCH_CUDA_GRAPHS),)
_CUDA_EP, _TRT_EP = "ort:CUDAExecutionProvider", "ort:TensorrtExecutionProvider"
_TF_DEVICE = "runs on the GPU when TensorFlow sees one (describe() reports where the ops ran)"


def _ort_gpu(name: str, precision: str, provider: str, options: _Options = ()) -> SutInfo:
    trt = provider == _TRT_EP
    return _gpu(name, "onnxruntime", precision, "ort-trt" if trt else "ort-gpu",
                _ORT_TRT if trt else _ORT, ".onnxruntime_gpu:create", gpu_build=provider,
                options=options)


def _torch_cuda(name: str, precision: str, requires: tuple[str, ...] = _TORCH,
                extra: str = "torch-cuda", options: _Options = ()) -> SutInfo:
    return _gpu(name, "torch", precision, extra, requires, ".pytorch_cuda:create",
                gpu_build="torch:cuda", options=options)


SUTS: dict[str, SutInfo] = {
    info.name: info
    for info in (
        _cpu("ort-fp32", "onnxruntime", "fp32", "ort", _ORT, ".onnxruntime:create"),
        _cpu("ort-int8", "onnxruntime", "int8 static (QDQ, per-channel)", "ort", _ORT,
             ".onnxruntime:create"),
        _cpu("ort-fp16", "onnxruntime", "fp16", "ort", _ORT, ".onnxruntime:create"),
        _cpu("ort-int8dyn", "onnxruntime", "int8 dynamic", "ort", _ORT, ".onnxruntime:create"),
        _cpu("ov-fp32", "openvino", "fp32", "openvino", _OV, ".openvino:create"),
        _cpu("ov-bf16", "openvino", "bf16", "openvino", _OV, ".openvino:create"),
        _cpu("ov-fp16", "openvino", "fp16", "openvino", _OV, ".openvino:create"),
        _cpu("ov-int8", "openvino", "int8 (NNCF)", "openvino", _OV, ".openvino:create"),
        _tflite("tflite-fp32", "fp32"),
        _tflite("tflite-fp16", "fp16 weights"),
        _tflite("tflite-int8dyn", "int8 dynamic range"),
        _tflite("tflite-int8", "int8 full integer"),
        _cpu("torch-fp32", "torch", "fp32", "torch", _TORCH, ".pytorch:create"),
        _cpu("torch-bf16", "torch", "bf16 autocast", "torch", _TORCH, ".pytorch:create"),
        _cpu("torch-int8", "torch", "int8 static (x86)", "torch", _TORCH, ".pytorch:create"),
        _cpu("torch-int8dyn", "torch", "int8 dynamic", "torch", _TORCH, ".pytorch:create"),
        _cpu("torch-compile", "torch", "fp32 torch.compile", "torch", _TORCH, ".pytorch:create"),
        _cpu("tf-fp32", "tensorflow", "fp32", "tf", _TF, ".tensorflow:create"),
        _cpu("tf-xla", "tensorflow", "fp32 XLA", "tf", _TF, ".tensorflow:create",
             note=_TF_DEVICE),
        _cpu("tf-amp", "tensorflow", "mixed (bf16 CPU / fp16 GPU)", "tf", _TF,
             ".tensorflow:create", note=_TF_DEVICE),
        _ort_gpu("ort-cuda-fp32", "fp32 (CUDA EP, TF32 off)", _CUDA_EP),
        _ort_gpu("ort-cuda-fp16", "fp16 (CUDA EP)", _CUDA_EP),
        _ort_gpu("ort-trt-fp16", "fp16 (TensorRT EP)", _TRT_EP),
        _ort_gpu("ort-trt-int8", "int8 (TensorRT EP: calibration table or QDQ)", _TRT_EP,
                 _TRT_INT8_OPTIONS),
        _torch_cuda("torch-cuda-fp32", "fp32 (TF32 off)"),
        _torch_cuda("torch-cuda-fp16", "fp16 (model and input .half())"),
        _torch_cuda("torch-cuda-bf16", "bf16 (model and input bfloat16)"),
        _torch_cuda("torch-cuda-compile", "fp32 torch.compile + CUDA graphs",
                    options=_TORCH_COMPILE_OPTIONS),
        _torch_cuda("torch-cuda-int8", "int8 dynamic (torchao, Linear layers)",
                    ("torch", "torchao"), "torchao"),
        _gpu("trt-fp32", "tensorrt", "fp32", "trt", _TRT, ".tensorrt:create"),
        _gpu("trt-fp16", "tensorrt", "fp16", "trt", _TRT, ".tensorrt:create"),
        _gpu("trt-int8", "tensorrt", "int8 (calibrator or QDQ)", "trt", _TRT,
             ".tensorrt:create", options=_TRT_INT8_OPTIONS),
        SutInfo("tftrt-fp16", "tensorflow-tensorrt", "fp16", "gpu", "tf", _TF, None,
                note="TF-TRT was removed after TensorFlow 2.17; TensorFlow >= 2.18 has no "
                     "TensorRT"),
    )
}


# Each framework's FP32 SUT: the baseline its other precisions are compared with.
FP32_BASELINE: dict[str, str] = {"onnxruntime": "ort-fp32", "openvino": "ov-fp32",
                                 "tflite": "tflite-fp32", "torch": "torch-fp32",
                                 "tensorflow": "tf-fp32", "tensorrt": "trt-fp32"}
# The same on the GPU: a GPU SUT is compared with its framework's FP32 on the GPU.
GPU_FP32_BASELINE: dict[str, str] = {"onnxruntime": "ort-cuda-fp32", "torch": "torch-cuda-fp32",
                                     "tensorrt": "trt-fp32"}


def fp32_baseline(name: str) -> str | None:
    """The FP32 SUT of the same framework on the same device as ``name`` (None if there is
    none): ort-cuda-fp16 -> ort-cuda-fp32, ort-int8 -> ort-fp32."""
    info = get_sut(name)
    table = GPU_FP32_BASELINE if info.device == "gpu" else FP32_BASELINE
    return table.get(info.framework)


def get_sut(name: str) -> SutInfo:
    """Look a SUT up by name; unknown names get the list of valid ones."""
    try:
        return SUTS[name]
    except KeyError:
        raise UserError(f"unknown SUT '{name}'; valid SUTs: {', '.join(SUTS)}") from None


# the pip name of a module whose distribution is called otherwise, for the blocker's text
_DISTRIBUTIONS = {"cuda": "cuda-python", "ai_edge_litert": "ai-edge-litert"}


def _missing_modules(modules: tuple[str, ...]) -> list[str]:
    return [module for module in modules if importlib.util.find_spec(module) is None]


def _package_dir(module: str) -> Path | None:
    """Where an installed package lives, found without importing it."""
    spec = importlib.util.find_spec(module)
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


def _ships(module: str, subdir: str, stem: str) -> bool:
    """The installed package ``module`` has a shared library named like ``stem`` in ``subdir``
    (``libonnxruntime_providers_cuda.so``, ``torch_cuda.dll`` ...)."""
    folder = _package_dir(module)
    return folder is not None and any((folder / subdir).glob(f"*{stem}.*"))


# ONNX Runtime's execution providers -> the provider library its GPU wheels ship in capi/
_ORT_PROVIDER_LIBS = {"CUDAExecutionProvider": "onnxruntime_providers_cuda",
                      "TensorrtExecutionProvider": "onnxruntime_providers_tensorrt"}


def _ort_provider_blocker(provider: str, extra: str) -> str | None:
    """Why the installed onnxruntime cannot offer ``provider`` (None if it can). The CPU
    wheel ("onnxruntime") has no GPU provider library; onnxruntime-gpu ships both. Read from
    the files, not by importing onnxruntime, so the listing stays import-free."""
    if _ships("onnxruntime", "capi", _ORT_PROVIDER_LIBS[provider]):
        return None
    fix = f"pip uninstall -y onnxruntime && pip install 'quantmark[{extra}]'"
    if _dist_version("onnxruntime-gpu") is None:
        cpu = _dist_version("onnxruntime")
        here = f" (onnxruntime {cpu} here is the CPU build, without {provider})" if cpu else ""
        return f"onnxruntime-gpu not installed{here}: {fix}"
    return (f"the installed onnxruntime files have no {provider} (the CPU onnxruntime "
            f"overwrote onnxruntime-gpu's): {fix}")


def _torch_cuda_blocker() -> str | None:
    """Why the installed torch cannot run CUDA (None if it is a CUDA build)."""
    if _ships("torch", "lib", "torch_cuda"):
        return None
    version = _dist_version("torch") or "here"
    return (f"torch {version} is a CPU-only build: install a CUDA build of torch "
            "(see https://pytorch.org/get-started/locally/)")


def _gpu_build_blocker(info: SutInfo) -> str | None:
    kind, _, what = info.gpu_build.partition(":")
    if kind == "ort":
        return _ort_provider_blocker(what, info.extra)
    if kind == "torch":
        return _torch_cuda_blocker()
    return None


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
    if "torchao" in missing:  # the one maintained INT8 path of torch on a GPU
        blockers.append("needs torchao (pip install torchao) and a CUDA GPU")
        missing.remove("torchao")
    # the framework is there but is its CPU build: the blocker names the fix (same extra)
    kind = info.gpu_build.partition(":")[0]
    module = "onnxruntime" if kind == "ort" else kind
    build = _gpu_build_blocker(info) if kind and module not in missing else None
    if missing:
        fix = "" if build else f": pip install 'quantmark[{info.extra}]'"
        names = [_DISTRIBUTIONS.get(module, module) for module in missing]
        blockers.append(f"{', '.join(names)} not installed{fix}")
    if build:
        blockers.append(build)
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
    return getattr(importlib.import_module(module_name, package=__package__), attribute)
