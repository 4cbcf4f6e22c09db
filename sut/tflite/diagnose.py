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
  named op re-quantized over a ``factor`` times wider range (``flatbuffer_utils``).
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.errors import UserError
from quantmark.sut.interface import SutOptions
from quantmark.sut.layers import LayerCapture, LayerOutput, Recipe, to_nchw
from quantmark.sut.tflite.backend import TFLiteBackend, dequantize, quantize
from quantmark.sut.tflite.convert import (
    DAMAGE,
    EXCLUSION,
    prepare_tflite,
    tflite_sut,
)
from quantmark.sut.tflite.inspection import open_interpreter
from quantmark.sut.tflite.suts import TFLITE_INVOKE_OPTION, TFLITE_QUANTIZE_OPTION

__all__ = ["DAMAGE", "EXCLUSION", "capture", "convert_excluding", "damage_weights",
           "plan_layers", "rebuild", "recipe_meta"]

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
def convert_excluding(converter: Any, representative: Any, exclude: tuple[str, ...],
                      fully_quantize: bool = True, ops: tuple[str, ...] = ()) -> bytes:
    """Calibrate with ``converter`` and quantize all but ``exclude`` (output tensor names) and
    ops of the types ``ops``; ``fully_quantize=False`` keeps float input and output."""
    import tensorflow as tf

    options = tf.lite.experimental.QuantizationDebugOptions(
        denylisted_nodes=list(exclude), denylisted_ops=list(ops), fully_quantize=fully_quantize)
    with warnings.catch_warnings():  # the debugger checks its debug model with tf.lite's
        warnings.filterwarnings("ignore", message=".*tf.lite.Interpreter is deprecated")
        debugger = tf.lite.experimental.QuantizationDebugger(
            converter=converter, debug_dataset=representative, debug_options=options)
    calibrated = open_interpreter(None, model_content=debugger.calibrated_model)
    tensors = {int(t["index"]): t["name"] for t in calibrated.get_tensor_details()}
    known = {tensors[int(o)] for op in calibrated._get_ops_details() for o in op["outputs"]}
    unknown = sorted(set(exclude) - known)
    if unknown:
        raise UserError(f"tflite-int8: no op outputs tensor {unknown[0]!r} ({len(unknown)} of "
                        f"{len(exclude)} excluded names unknown); exclude op output tensor "
                        "names of this model, as run.py diagnose lists them")
    return debugger.get_nondebug_quantized_model()


def _requantize(model: Any, tensor: Any, factor: float, dtype: type) -> None:
    """``tensor``'s stored integers over a ``factor`` times wider range: scale x factor."""
    buffer = model.buffers[tensor.buffer]
    stored = np.dtype(dtype).newbyteorder("<")  # flatbuffers are little-endian
    values = np.frombuffer(np.asarray(buffer.data, np.uint8).tobytes(), stored)
    info = np.iinfo(dtype)
    low = -info.max if dtype is np.int8 else info.min  # int8 weights are symmetric
    scaled = np.clip(np.rint(values / factor), low, info.max)
    buffer.data = scaled.astype(stored).view(np.uint8)
    tensor.quantization.scale = [float(s) * factor for s in tensor.quantization.scale]


def damage_weights(flatbuffer: bytes, damage: tuple[tuple[str, float], ...]) -> bytes:
    """The model with each named op's weights (input 1) and bias (input 2) re-quantized."""
    from tensorflow.lite.python import schema_py_generated as schema
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(flatbuffer))
    graph = model.subgraphs[0]
    ops = {graph.tensors[op.outputs[0]].name.decode(): op for op in graph.operators
           if len(op.outputs)}
    for name, factor in damage:
        op = ops.get(name)
        weight = graph.tensors[op.inputs[1]] if op is not None and len(op.inputs) > 1 else None
        if weight is None or weight.type != schema.TensorType.INT8 or weight.quantization is None \
                or len(weight.quantization.scale) == 0:
            raise UserError(f"tflite-int8: cannot damage {name!r}: no op with int8 weights "
                            "outputs that tensor (conv, depthwise conv or fully connected)")
        _requantize(model, weight, factor, np.int8)
        bias = graph.tensors[op.inputs[2]] if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
        if bias is not None and bias.type == schema.TensorType.INT32:
            _requantize(model, bias, factor, np.int32)
    return flatbuffer_utils.convert_object_to_bytearray(model)


def _output_types(path: str | Path, names: tuple[str, ...]) -> dict[str, str]:
    """The output tensor type of the ops named ``names`` (float32: an excluded op kept in
    float; "missing": no op outputs that name)."""
    from ai_edge_litert.interpreter import OpResolverType

    interpreter = open_interpreter(
        path, experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    tensors = {int(t["index"]): t for t in interpreter.get_tensor_details()}
    found = {tensors[int(o)]["name"]: _dtype(tensors[int(o)]["dtype"])
             for op in interpreter._get_ops_details() for o in op["outputs"]}
    return {name: found.get(name, "missing") for name in names}


def recipe_meta(out: Path, recipe: Recipe | None) -> dict[str, Any]:
    """What a changed recipe did, for the artifact: each excluded op's output type now."""
    if recipe is None or not recipe.key():
        return {}
    types = _output_types(out, recipe.exclude)
    quantized = sorted(name for name, dtype in types.items() if dtype != "float32")
    if quantized:
        log.warning("tflite-int8: %d of %d excluded layers are still not float after "
                    "denylisting (e.g. %s: %s)", len(quantized), len(types), quantized[0],
                    types[quantized[0]])
    return {"recipe_changes": recipe.key(), "exclusion": EXCLUSION,
            "damage": DAMAGE if recipe.damage else None,
            "excluded_output_types": types, "excluded_not_float": quantized}


def rebuild(name: str, options: SutOptions, spec: Any, calibration: Any,
            recipe: Recipe) -> TFLiteBackend:
    """The SUT ``name`` as ``create`` makes it, with ``recipe``'s layers kept in float and its
    damage injected (tflite-int8 only; not loaded). ``Recipe()``: the normal model, same key."""
    precision = tflite_sut(name).precision_key  # another SUT: one line naming the TFLite ones
    artifact = prepare_tflite(name, spec, options.model_path, calibration, recipe)
    return TFLiteBackend(artifact, precision, options.threads,
                         str(options.extra.get(TFLITE_INVOKE_OPTION, "batched")),
                         str(options.extra.get(TFLITE_QUANTIZE_OPTION, "at-load")))
