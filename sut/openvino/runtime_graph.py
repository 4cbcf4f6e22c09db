"""The CPU plugin's runtime graph (``compiled.get_runtime_model()``) in quantmark's words: which
layer types do the arithmetic, and the precision name of each ``runtimePrecision`` string.

Plain data below the backend's load-time proof, the detector head's evidence (``detection``)
and the diagnosis, which all read the runtime graph.
"""

from __future__ import annotations

#: layer types (CPU plugin names) that do the arithmetic; the rest is data movement
COMPUTE_LAYERS = frozenset({
    "Convolution", "GroupConvolution", "Deconvolution", "BinaryConvolution", "FullyConnected",
    "FullyConnectedCompressed", "MatMul", "Gemm", "RNNCell", "RNNSeq", "MHA",
    "ScaledDotProductAttention", "LLMMLP", "QKVProjection",
})
#: runtimePrecision strings -> the precision name quantmark reports
PRECISION_CLASS = {"i8": "int8", "u8": "int8", "bf16": "bf16", "f16": "fp16", "f32": "fp32"}
