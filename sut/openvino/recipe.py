"""A ``sut.layers.Recipe`` applied to the NNCF INT8 IR (``convert.ov_int8_ir``).

* exclude: the layers' names, with an excluded activation's consumers, go into NNCF's ignored
  scope (``ignored_names``).
* damage: after quantization, a layer's weights are requantized over a range ``factor`` times
  wider (``widen_weight_range``).

Below ``convert``, which quantizes with a recipe, and ``diagnose``, whose layer plan walks the
graph the same way (``SKIP_TYPES``, ``consumers_of``) and whose report names these mechanisms
(``EXCLUSION``, ``DAMAGE``).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from quantmark.ground.errors import UserError

log = logging.getLogger(__name__)

EXCLUSION = ("NNCF ignored_scope (names); an excluded activation brings its consumers, at whose "
             "inputs NNCF quantizes its output")
DAMAGE = ("INT8 IR's compressed weights requantized over a range `factor` times wider "
          "(int8 values / factor, dequantization scale x factor)")

#: bookkeeping ops: no values of their own (quantize/convert/shape changes)
SKIP_TYPES = frozenset({
    "Parameter", "Constant", "Result", "FakeQuantize", "FakeConvert", "Convert", "Reshape",
    "Squeeze", "Unsqueeze", "Transpose", "ShapeOf", "Broadcast", "Gather", "StridedSlice",
})
#: ops NNCF never quantizes at their input: the FakeQuantize after one belongs to its consumers
ACTIVATIONS = frozenset({
    "Relu", "Clamp", "Sigmoid", "Swish", "HSwish", "HSigmoid", "Gelu", "Elu", "Tanh", "Mish",
    "SoftPlus", "SoftSign", "Exp", "Abs", "Sqrt", "Log", "Negative", "Floor", "Ceiling",
})


def consumers_of(output: Any) -> list[Any]:
    """The ops that read ``output`` (an ``ov.Output``)."""
    return [target.get_node() for target in output.get_target_inputs()]


def ignored_names(model: Any, exclude: tuple[str, ...]) -> list[str]:
    """NNCF ignored-scope names that keep ``exclude`` in FP32 in the FP32 ``model``.

    NNCF ignores an op by not quantizing its inputs. An activation has none of its own (its
    output's FakeQuantize serves its consumers), so its consumers join it: their inputs, the
    activation's output, then stay FP32.
    """
    ops = {op.get_friendly_name(): op for op in model.get_ops()}
    names: list[str] = []
    for name in exclude:
        if name not in ops:
            raise UserError(f"exclude: no layer {name!r} in {model.get_friendly_name()}")
        names.append(name)
        if ops[name].get_type_name() not in ACTIVATIONS:
            continue
        stack = consumers_of(ops[name].output(0))
        while stack:
            node = stack.pop(0)
            if node.get_type_name() in SKIP_TYPES:  # Reshape ...: look past it
                stack.extend(c for out in node.outputs() for c in consumers_of(out))
            elif node.get_friendly_name() not in names:
                names.append(node.get_friendly_name())
    return names


def _weight_source(op: Any) -> Any:
    """The node producing ``op``'s weights (input 1), past a Reshape of grouped weights."""
    node = op.input(1).get_source_output().get_node()
    while node.get_type_name() in ("Reshape", "Transpose") and node.get_input_size():
        node = node.input(0).get_source_output().get_node()
    return node


def _widen(op: Any, factor: float) -> str:
    """Requantize ``op``'s weights over a ``factor`` times wider range; says what changed."""
    import openvino as ov

    node = _weight_source(op)
    if node.get_type_name() == "FakeQuantize":  # uncompressed weights: widen the FQ's range
        for port in range(1, 5):
            bound = node.input(port).get_source_output().get_node()
            widened = ov.op.Constant(bound.get_data().astype(np.float32) * factor)
            node.input(port).replace_source_output(widened.output(0))
        return "weight FakeQuantize range"
    if node.get_type_name() != "Multiply":
        raise UserError(f"layer {op.get_friendly_name()!r} has no quantized weights to damage "
                        f"(weights come from {node.get_type_name()})")
    convert = node.input(0).get_source_output().get_node()
    scale = node.input(1).get_source_output().get_node()
    if convert.get_type_name() == "Subtract":  # asymmetric: zero point between Convert and *
        convert = convert.input(0).get_source_output().get_node()
    ints = convert.input(0).get_source_output().get_node() if (
        convert.get_type_name() == "Convert") else None
    if ints is None or ints.get_type_name() != "Constant" or scale.get_type_name() != "Constant":
        raise UserError(f"layer {op.get_friendly_name()!r}: unexpected weight pattern "
                        f"{convert.get_type_name()} x {scale.get_type_name()}")
    data = ints.get_data()
    info = np.iinfo(data.dtype)
    requantized = np.clip(np.round(data.astype(np.float64) / factor), info.min, info.max)
    convert.input(0).replace_source_output(ov.op.Constant(requantized.astype(data.dtype)).output(0))
    new_scale = ov.op.Constant(scale.get_data().astype(np.float32) * np.float32(factor))
    node.input(1).replace_source_output(new_scale.output(0))
    return "compressed int weights and scale"


def widen_weight_range(model: Any, damage: tuple[tuple[str, float], ...]) -> dict[str, str]:
    """Inject ``damage`` into a quantized ``model`` in place: each (layer, factor) has its
    weights quantized over a range ``factor`` times too wide (most int8 levels unused)."""
    ops = {op.get_friendly_name(): op for op in model.get_ops()}
    done: dict[str, str] = {}
    for layer, factor in damage:
        if layer not in ops:
            raise UserError(f"damage: no layer {layer!r} in the model")
        if factor < 1:
            raise UserError(f"damage: factor {factor} for {layer!r} must be >= 1")
        done[layer] = _widen(ops[layer], float(factor))
        log.info("damaged %s: %s widened %sx", layer, done[layer], factor)
    model.validate_nodes_and_infer_types()
    return done
