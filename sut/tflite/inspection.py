"""What a .tflite contains, read with ai-edge-litert only (never TensorFlow): tensor types, ops,
input and output details, and the precision its compute ops prove (``file_precision``: the
class ``convert``'s recipes produce; ``executed_precision``: the label the evidence shows). The
SUT's load, a user's file (``convert.load_user_tflite``) and the diagnosis tools read models
through here, so a Raspberry Pi with just ai-edge-litert + numpy can inspect and run them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

#: ops doing the network's multiply-accumulates: their operand types say what precision ran
COMPUTE_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV",
               "BATCH_MATMUL", "CONV_3D")
_INTEGER = ("int8", "uint8", "int16")
#: tensor types a model's image input and its class or detector output may have (an integer
#: one quantized per tensor, or a raw-pixel model's unquantized uint8 input)
INPUT_TYPES = ("float32", "int8", "uint8")


def _dtype(value: Any) -> str:
    return np.dtype(value).name


def open_interpreter(path: str | Path | None, **kwargs: Any) -> Any:
    """An ai-edge-litert interpreter for ``path`` (None: pass ``model_content``); kwargs go to
    ``Interpreter``."""
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_path=None if path is None else str(path), **kwargs)


def inspect_file(path: str | Path) -> dict[str, Any]:
    """``inspect_interpreter`` on an interpreter without the default delegate: a quick look,
    which leaves XNNPACK's once-per-process log line for the SUT's load to capture."""
    from ai_edge_litert.interpreter import OpResolverType

    return inspect_interpreter(open_interpreter(
        path, experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))


def inspect_interpreter(interpreter: Any) -> dict[str, Any]:
    """What a model contains: tensor types, ops, compute-op precision, I/O and quantization.

    Works on an interpreter with or without delegates (``DELEGATE`` nodes are left out of the
    op counts; ``sut.tflite.backend`` analyses them separately).
    """
    tensors = interpreter.get_tensor_details()
    ops = [op for op in interpreter._get_ops_details() if op["op_name"] != "DELEGATE"]
    inputs = {int(t["index"]) for t in interpreter.get_input_details()}
    produced = {int(t) for op in ops for t in op["outputs"]}
    constants = [t for t in tensors if int(t["index"]) not in produced | inputs]
    compute = {"integer": 0, "hybrid": 0, "float": 0, "float16": 0}
    for op in ops:
        if op["op_name"] not in COMPUTE_OPS or len(op["operand_types"]) < 2:
            continue
        activation, weight = (_dtype(t) for t in op["operand_types"][:2])
        if activation in _INTEGER:
            compute["integer"] += 1
        elif activation == "float16":
            compute["float16"] += 1
        elif weight in _INTEGER:
            compute["hybrid"] += 1
        else:
            compute["float"] += 1
    fp16_dequantize = sum(1 for op in ops if op["op_name"] == "DEQUANTIZE"
                          and _dtype(op["operand_types"][0]) == "float16")
    return {
        "tensor_types": dict(sorted(Counter(_dtype(t["dtype"]) for t in tensors).items())),
        "constant_tensor_types": dict(sorted(Counter(_dtype(t["dtype"])
                                                     for t in constants).items())),
        "int8_weight_tensors": sum(1 for t in constants if _dtype(t["dtype"]) in _INTEGER),
        "ops": dict(sorted(Counter(op["op_name"] for op in ops).items())),
        "compute_ops": compute,
        "fp16_weight_dequantize_ops": fp16_dequantize,
        "inputs": [_io(t) for t in interpreter.get_input_details()],
        "outputs": [_io(t) for t in interpreter.get_output_details()],
    }


def _io(detail: dict[str, Any]) -> dict[str, Any]:
    scale, zero_point = detail["quantization"]
    return {"name": detail["name"], "index": int(detail["index"]),
            "dtype": _dtype(detail["dtype"]),
            "shape_signature": [int(d) for d in detail["shape_signature"]],
            "scale": float(scale), "zero_point": int(zero_point),
            "per_channel": len(detail["quantization_parameters"]["scales"]) > 1}


def file_precision(summary: dict[str, Any]) -> str:
    """The precision class a model's compute ops prove: int8, int8dyn, fp16 (weights) or fp32."""
    compute = summary["compute_ops"]
    if compute["integer"]:
        return "int8"
    if compute["hybrid"]:
        return "int8dyn"
    if compute["float16"] or summary["fp16_weight_dequantize_ops"]:
        return "fp16"
    return "fp32"


def executed_precision(summary: dict[str, Any]) -> str:
    """Human label of what computes, from the op operand types (the recipes: ``convert``)."""
    compute = summary["compute_ops"]
    total = sum(compute.values())
    kind = file_precision(summary)
    if kind == "int8":
        rest = total - compute["integer"]
        return "int8" if not rest else f"int8 ({compute['integer']} of {total} conv/FC ops; " \
                                       f"{rest} float)"
    if kind == "int8dyn":
        label = "int8 dynamic (weights int8, activations quantized on the fly)"
        rest = total - compute["hybrid"]
        return label if not rest else f"{label}; {rest} of {total} conv/FC ops stay fp32"
    if kind == "fp16":
        return "fp16" if compute["float16"] else "fp32 (fp16 weights)"
    return "fp32"
