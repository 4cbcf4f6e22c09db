"""TensorRT's SUTs as plain data (read by ``sut.registry``; imports no framework).

``trt-fp32``, ``trt-fp16`` and ``trt-int8`` run engines ``build`` makes from the canonical ONNX
(INT8: TensorRT's calibrator, ``calibration``, or the symmetric QDQ model of ``models.qdq``),
through cuda-python (``cuda_runtime``).
"""

from __future__ import annotations

from quantmark.sut.info import FrameworkInfo, SutInfo

_TRT = ("tensorrt", "cuda", "onnx", "onnxruntime")  # cuda: cuda-python
# INT8: TensorRT's calibrator (implicit quantization) or a symmetric QDQ model (explicit)
TRT_INT8_ROUTE_OPTION = "trt_int8_route"
TRT_INT8_ROUTES = ("calibrator", "qdq")


def _gpu(name: str, precision: str, key: str, **kwargs) -> SutInfo:
    return SutInfo(name, "tensorrt", precision, "gpu", "trt", _TRT, ".backend:create",
                   precision_key=key, **kwargs)


FRAMEWORK = FrameworkInfo(
    name="tensorrt",
    suts=(_gpu("trt-fp32", "fp32", "fp32"), _gpu("trt-fp16", "fp16", "fp16"),
          _gpu("trt-int8", "int8 (calibrator or QDQ)", "int8",
               options=((TRT_INT8_ROUTE_OPTION, TRT_INT8_ROUTES),))),
    distributions=("tensorrt",),
    gpu_fp32_baseline="trt-fp32",
    variant_order=("fp32", "fp16", "int8"),
    pip_names={"cuda": "cuda-python"},
    rank=45,
)
