"""A ``sut.layers.Recipe`` applied to the tflite-int8 conversion (``convert``, and a detector's
in ``detection``), with TensorFlow's own tools.

* exclude: ``tf.lite.experimental.QuantizationDebugger`` calibrates with the SUT's converter
  and quantizes with the excluded op output tensor names denylisted (``convert_excluding``).
* damage: the converted flatbuffer's weights of the named op re-quantized over a ``factor``
  times wider range (``damage_weights``, with ``flatbuffer_utils``).
* what the artifact records of it (``recipe_meta``), read back with ai-edge-litert.

Below ``convert`` and ``detection``, which convert with a recipe, and ``diagnose``, whose report
names these mechanisms (``EXCLUSION``, ``DAMAGE``).
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.errors import UserError
from quantmark.sut.layers import Recipe
from quantmark.sut.tflite.inspection import open_interpreter

log = logging.getLogger(__name__)

#: how a recipe's excluded layers are kept in float (part of such an artifact's cache key)
EXCLUSION = ("TFLite QuantizationDebugger denylisted_nodes (op output tensor names kept in "
             "float, fully_quantize=True)")
#: how a recipe's damage is injected
DAMAGE = ("the converted .tflite edited with tensorflow.lite.tools.flatbuffer_utils: the op's "
          "int8 weight scales x factor and values / factor (rounded), its int32 bias likewise")


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
    found = {tensors[int(o)]["name"]: np.dtype(tensors[int(o)]["dtype"]).name
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
