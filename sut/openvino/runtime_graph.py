"""The CPU plugin's runtime graph (``compiled.get_runtime_model()``) in quantmark's words: which
layer types do the arithmetic, the precision name of each ``runtimePrecision`` string, and the
count of compute layers per precision that every load-time proof reads.

Below the backend's load-time proof, the text encoder's evidence (``text``), the detector
head's evidence (``detection``), the profiler and the diagnosis, which all read the runtime
graph. Imports no framework: it reads the compiled model it is handed.
"""

from __future__ import annotations

import collections
from typing import Any

#: layer types (CPU plugin names) that do the arithmetic; the rest is data movement
COMPUTE_LAYERS = frozenset({
    "Convolution", "GroupConvolution", "Deconvolution", "BinaryConvolution", "FullyConnected",
    "FullyConnectedCompressed", "MatMul", "Gemm", "RNNCell", "RNNSeq", "MHA",
    "ScaledDotProductAttention", "LLMMLP", "QKVProjection",
})
#: runtimePrecision strings -> the precision name quantmark reports
PRECISION_CLASS = {"i8": "int8", "u8": "int8", "bf16": "bf16", "f16": "fp16", "f32": "fp32"}


def rt_text(value: Any) -> str:
    """rt_info values are OVAny; property values may be ov.Type: both as plain strings."""
    if hasattr(value, "astype"):
        value = value.astype(str)
    if hasattr(value, "get_type_name"):
        return value.get_type_name()
    return str(value)


def layer_precisions(compiled: Any, layer_types: frozenset[str] = COMPUTE_LAYERS
                     ) -> list[tuple[str, str, str]]:
    """(layerType, precision name, friendly name) of each runtime node of ``layer_types``."""
    found = []
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        layer_type = rt_text(info["layerType"]) if "layerType" in info else op.get_type_name()
        if layer_type not in layer_types:
            continue
        precision = rt_text(info["runtimePrecision"]) if "runtimePrecision" in info else "?"
        found.append((layer_type, PRECISION_CLASS.get(precision, precision),
                      op.get_friendly_name()))
    return found


def runtime_evidence(compiled: Any) -> dict[str, Any]:
    """Count compute layers per (layerType, runtimePrecision) in the compiled runtime graph."""
    by_precision: dict[str, collections.Counter[str]] = collections.defaultdict(
        collections.Counter)
    layers: dict[str, list[str]] = collections.defaultdict(list)
    for layer_type, name, friendly in layer_precisions(compiled):
        by_precision[name][layer_type] += 1
        layers[name].append(friendly)
    counts = {k: dict(sorted(v.items())) for k, v in sorted(by_precision.items())}
    return {"counts": counts, "layers": dict(layers)}


def executed_precision(counts: dict[str, dict[str, int]]) -> str:
    """"int8", "bf16", ... or e.g. "int8+fp32" (most compute layers first) when mixed."""
    totals = {name: sum(per_type.values()) for name, per_type in counts.items()}
    ordered = sorted(totals, key=lambda name: (-totals[name], name))
    return "+".join(ordered) if ordered else "none"
