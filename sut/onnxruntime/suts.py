"""ONNX Runtime's SUTs as plain data (read by ``sut.registry``; imports no framework).

CPU execution provider: ``ort-fp32``, ``ort-int8`` (static QDQ), ``ort-fp16``, ``ort-int8dyn``
(``backend``, quantized by ``quantize``); on an NVIDIA GPU the CUDA and TensorRT execution
providers (``gpu``).
"""

from __future__ import annotations

from quantmark.sut.info import FrameworkInfo, Options, SutInfo

_ORT = ("onnxruntime", "onnx")
_ORT_TRT = ("onnxruntime", "onnx", "tensorrt")
# INT8 with the TensorRT provider: ONNX Runtime's calibration table (implicit quantization) or
# the symmetric QDQ model (explicit quantization)
TRT_INT8_ROUTE_OPTION = "trt_int8_route"
TRT_INT8_ROUTES = ("calibrator", "qdq")
CUDA_EP, TRT_EP = "CUDAExecutionProvider", "TensorrtExecutionProvider"


# the profiler names an integer kernel "int8", a dynamic one too
_INTEGER = ("int8",)


def _cpu(name: str, precision: str, key: str, proof: tuple[str, ...] | None = None) -> SutInfo:
    return SutInfo(name, "onnxruntime", precision, "cpu", "ort", _ORT, ".backend:create",
                   precision_key=key, proof=proof)


def _gpu(name: str, precision: str, key: str, provider: str, options: Options = ()) -> SutInfo:
    trt = provider == TRT_EP
    # TensorRT's per-layer precision is inside its fused engine node, out of ORT's profile:
    # such a SUT reports its engine's build flags instead (trt-* proves it per layer)
    return SutInfo(name, "onnxruntime", precision, "gpu", "ort-trt" if trt else "ort-gpu",
                   _ORT_TRT if trt else _ORT, ".gpu:create", options=options,
                   gpu_build=f"ort:{provider}", precision_key=key,
                   proof=() if trt else None)


FRAMEWORK = FrameworkInfo(
    name="onnxruntime",
    suts=(
        _cpu("ort-fp32", "fp32", "fp32"),
        _cpu("ort-int8", "int8 static (QDQ, per-channel)", "int8"),
        _cpu("ort-fp16", "fp16", "fp16"),
        _cpu("ort-int8dyn", "int8 dynamic", "int8dyn", _INTEGER),
        _gpu("ort-cuda-fp32", "fp32 (CUDA EP, TF32 off)", "fp32", CUDA_EP),
        _gpu("ort-cuda-fp16", "fp16 (CUDA EP)", "fp16", CUDA_EP),
        _gpu("ort-trt-fp16", "fp16 (TensorRT EP)", "fp16", TRT_EP),
        _gpu("ort-trt-int8", "int8 (TensorRT EP: calibration table or QDQ)", "int8", TRT_EP,
             ((TRT_INT8_ROUTE_OPTION, TRT_INT8_ROUTES),)),
    ),
    # onnxruntime-gpu installs the same "onnxruntime" package under its own distribution name
    distributions=("onnxruntime", "onnxruntime-gpu"),
    fp32_baseline="ort-fp32",
    gpu_fp32_baseline="ort-cuda-fp32",
    variant_order=("fp32", "fp16", "int8", "int8dyn"),
    rank=10,
    nms=".nms:create",
)
