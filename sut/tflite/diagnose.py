"""Layer-by-layer diagnosis of the TFLite SUTs (``run.py diagnose``): every op's output read
with LiteRT's preserve-all-tensors, and tflite-int8 rebuilt with layers kept in float.

* Capture: the SUT's own .tflite opened in a second ai-edge-litert ``Interpreter`` with
  ``experimental_preserve_all_tensors=True`` (the backend's interpreters are left alone), the
  samples encoded as the backend encodes them (``backend.quantize`` with the input tensor's
  scale and zero point), one invoke per chunk, then every op's output tensor read back.
  A layer is named by its op's output tensor name: that is what TF's QuantizationDebugger
  denylists by (``QuantizationDebugOptions(denylisted_nodes=...)``: "op's output tensor
  names"), and the converter gives the FP32 and INT8 models the same names (Lite0: 62 of 62
  ops). Integer outputs are dequantized with their tensor's scale and zero point; NHWC maps
  become NCHW. Ops that only move or re-type values (QUANTIZE, DEQUANTIZE, RESHAPE,
  TRANSPOSE, PAD ...) are not layers; a layer's ``inputs`` skip through them.
* Precision: read from the op's tensors in the model file: an integer output tensor means an
  integer kernel (int8); a float output from integer weights is a hybrid op (int8dyn); float
  otherwise (fp32, or fp16 for float16 outputs).
* Rebuild: ``convert_tflite`` with the ``Recipe`` (cached; its key gains the recipe only when
  it changes something). Excluded layers: ``QuantizationDebugger`` calibrates with the SUT's
  own converter settings and ``get_nondebug_quantized_model`` quantizes with those output
  tensor names denylisted, ``fully_quantize=True`` keeping int8 input and output; the
  backend's int8 check accepts such a mixed model, since it asks for some integer conv/FC ops
  and int8 weights, not for all of them. Damage: the converted flatbuffer's weights of the
  named op re-quantized over a ``factor`` times wider range (``flatbuffer_utils``). Both
  live in ``recipe``, which ``convert`` calls while converting.
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from quantmark.sut.interface import SutOptions
from quantmark.sut.layers import LayerCapture, LayerOutput, Recipe, to_nchw
from quantmark.sut.tflite.convert import prepare_tflite, tflite_sut
from quantmark.sut.tflite.inspection import open_interpreter
from quantmark.sut.tflite.interpreter_backend import TFLiteBackend, dequantize, quantize
from quantmark.sut.tflite.recipe import DAMAGE, EXCLUSION
from quantmark.sut.tflite.suts import TFLITE_INVOKE_OPTION, TFLITE_QUANTIZE_OPTION

__all__ = ["DAMAGE", "EXCLUSION", "capture", "plan_layers", "rebuild"]

log = logging.getLogger(__name__)

#: ops that move, pad or re-type values without computing new ones: not layers
BOOKKEEPING = frozenset({
    "QUANTIZE", "DEQUANTIZE", "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "PAD", "PADV2",
    "CAST", "SHAPE", "STRIDED_SLICE", "SLICE", "GATHER", "PACK", "UNPACK", "DELEGATE",
})
_VALUE_TYPES = {"float32": "fp32", "float16": "fp16", "int8": "int8", "uint8": "uint8",
                "int16": "int16"}
_INTEGER = ("int8", "uint8", "int16")


@dataclass(frozen=True)
class PlannedLayer:
    """One op the capture reads: its output tensor and what the model file says about it."""

    tensor: int
    name: str
    op_type: str
    precision: str
    inputs: tuple[str, ...]
    scale: float | None  # None: a float tensor, read as is
    zero_point: int


def _dtype(value: Any) -> str:
    return np.dtype(value).name


def _precision(op: dict[str, Any], out_type: str) -> str:
    """What the op computes in: its output type, or int8dyn for float out of integer weights."""
    if out_type in _INTEGER:
        return out_type
    operands = [_dtype(t) for t in op["operand_types"]]
    if out_type == "float32" and len(operands) > 1 and operands[1] in _INTEGER:
        return "int8dyn"
    return _VALUE_TYPES[out_type]


def plan_layers(interpreter: Any) -> tuple[list[PlannedLayer], dict[str, int]]:
    """The layers of a model in execution order, and how many ops of each type were skipped.

    A layer is an op (not DELEGATE) whose first output is a float or integer activation and
    whose type is not bookkeeping; its ``inputs`` are the nearest captured producers.
    """
    tensors = {int(t["index"]): t for t in interpreter.get_tensor_details()}
    ops = [op for op in interpreter._get_ops_details() if op["op_name"] != "DELEGATE"]
    producer = {int(t): op for op in ops for t in op["outputs"]}
    captured: dict[int, str] = {}  # op index -> layer name
    skipped: Counter[str] = Counter()
    for op in ops:
        out = int(op["outputs"][0]) if len(op["outputs"]) else -1
        if (op["op_name"] in BOOKKEEPING or out < 0
                or _dtype(tensors[out]["dtype"]) not in _VALUE_TYPES):
            skipped[op["op_name"]] += 1
            continue
        captured[op["index"]] = tensors[out]["name"]

    def feeders(tensor: int, seen: set[int]) -> list[str]:
        op = producer.get(tensor)
        if op is None or op["index"] in seen:
            return []  # a graph input or a constant
        seen.add(op["index"])
        if op["index"] in captured:
            return [captured[op["index"]]]
        return [name for t in op["inputs"] if t >= 0 for name in feeders(int(t), seen)]

    layers = []
    for op in ops:
        if op["index"] not in captured:
            continue
        out = int(op["outputs"][0])
        detail = tensors[out]
        out_type = _dtype(detail["dtype"])
        seen: set[int] = {op["index"]}
        inputs = [name for t in op["inputs"] if t >= 0 for name in feeders(int(t), seen)]
        scales = detail["quantization_parameters"]["scales"]
        integer = out_type in _INTEGER and len(scales) > 0
        layers.append(PlannedLayer(
            tensor=out, name=detail["name"], op_type=op["op_name"],
            precision=_precision(op, out_type), inputs=tuple(dict.fromkeys(inputs)),
            scale=float(scales[0]) if integer else None,
            zero_point=int(detail["quantization_parameters"]["zero_points"][0]) if integer
            else 0))
    return layers, dict(sorted(skipped.items()))


def _encode(samples: np.ndarray, detail: dict[str, Any]) -> np.ndarray:
    """The model's input from float samples, as the backend feeds it (quantized if integer)."""
    dtype = np.dtype(detail["dtype"])
    if dtype == np.float32 or samples.dtype == dtype:
        return np.ascontiguousarray(samples, dtype=dtype)
    scale, zero_point = detail["quantization"]
    return quantize(samples, scale, zero_point, dtype)


def _run(interpreter: Any, x: np.ndarray, layers: list[PlannedLayer]) -> list[np.ndarray]:
    """One invoke at ``x``'s batch; every layer's output (copies)."""
    detail = interpreter.get_input_details()[0]
    if list(detail["shape"]) != list(x.shape):
        interpreter.resize_tensor_input(int(detail["index"]), list(x.shape))
        interpreter.allocate_tensors()
    interpreter.set_tensor(int(detail["index"]), x)
    interpreter.invoke()
    return [interpreter.get_tensor(layer.tensor) for layer in layers]


def capture(backend: TFLiteBackend, samples: np.ndarray) -> LayerCapture:
    """Every layer's output for ``samples`` (float32, batch first, NHWC) in the SUT's model."""
    path = backend.model_path
    with warnings.catch_warnings():  # "intended for debugging purposes only": it is
        warnings.filterwarnings("ignore", message=".*experimental_preserve_all_tensors")
        interpreter = open_interpreter(path, num_threads=backend.threads,
                                       experimental_preserve_all_tensors=True)
    interpreter.allocate_tensors()
    layers, skipped = plan_layers(interpreter)
    detail = interpreter.get_input_details()[0]
    x = _encode(np.asarray(samples), detail)
    static = int(detail["shape_signature"][0]) != -1  # a fixed batch of 1: one sample a run
    chunks = [x[i:i + 1] for i in range(len(x))] if static else [x]
    runs = [_run(interpreter, chunk, layers) for chunk in chunks]
    outputs = []
    for i, layer in enumerate(layers):
        value = np.concatenate([run[i] for run in runs])
        if layer.scale is not None:
            value = dequantize(value, layer.scale, layer.zero_point)
        outputs.append(LayerOutput(name=layer.name, op_type=layer.op_type,
                                   precision=layer.precision,
                                   value=to_nchw(value.astype(np.float32, copy=False)),
                                   inputs=layer.inputs))
    names = Counter(layer.name for layer in layers)
    scale, zero_point = detail["quantization"]
    notes: dict[str, object] = {
        "model_file": str(path), "ops_skipped": skipped, "layers": len(layers),
        "input": {"dtype": _dtype(detail["dtype"]), "scale": float(scale),
                  "zero_point": int(zero_point)},
        "invokes": "per sample (static batch)" if static else "one per chunk",
        "duplicate_names": sorted(name for name, n in names.items() if n > 1),
    }
    return LayerCapture(
        layers=outputs,
        method=("ai-edge-litert Interpreter(experimental_preserve_all_tensors=True): each op's "
                "output tensor read after invoke, integer tensors dequantized"),
        precision_source=("each op's tensor types in the .tflite (_get_ops_details / "
                          "get_tensor_details): integer output = integer kernel, float output "
                          "from integer weights = int8dyn, else float"),
        notes=notes)


# ---------------------------------------------------------------- rebuilding (needs TF)
def rebuild(name: str, options: SutOptions, spec: Any, calibration: Any,
            recipe: Recipe) -> TFLiteBackend:
    """The SUT ``name`` as ``create`` makes it, with ``recipe``'s layers kept in float and its
    damage injected (tflite-int8 only; not loaded). ``Recipe()``: the normal model, same key."""
    precision = tflite_sut(name).precision_key  # another SUT: one line naming the TFLite ones
    artifact = prepare_tflite(name, spec, options.model_path, calibration, recipe)
    return TFLiteBackend(artifact, precision, options.threads,
                         str(options.extra.get(TFLITE_INVOKE_OPTION, "batched")),
                         str(options.extra.get(TFLITE_QUANTIZE_OPTION, "at-load")))
