"""ONNX Runtime's kernels as its profiler names them, sorted by what they compute in: the one
vocabulary the backend's proof of precision, the detector's float-head evidence, diagnose and
profile read (its own module, so none of them imports another for it)."""

from __future__ import annotations

INTEGER_KERNELS = frozenset({
    "QLinearConv", "ConvInteger", "QLinearMatMul", "MatMulInteger", "QGemm",
    "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "NhwcQLinearConv",
})
FLOAT_COMPUTE = frozenset({"Conv", "FusedConv", "NhwcFusedConv", "Gemm", "FusedGemm", "MatMul",
                           "FusedMatMul", "NhwcConv"})
TYPE_PRECISION = {"float": "fp32", "float16": "fp16", "bfloat16": "bf16", "double": "fp64"}
