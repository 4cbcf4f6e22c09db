"""Layer-by-layer diagnosis of the OpenVINO SUTs (``run.py diagnose``).

* capture: the SUT's own IR is read again, every layer's tensor is added as a model output
  (``Model.add_outputs``), and the copy is compiled on the CPU plugin with the inference
  precision the SUT compiles with. A layer is an op that computes values (Convolution,
  GroupConvolution, MatMul, Add, Multiply, Relu/Clamp, pooling, ReduceMean, Concat, Softmax ...);
  a Convolution/MatMul, the bias Add that OpenVINO's ONNX frontend splits off it
  (``X/WithoutBiases`` + ``X``) and an activation that is its only consumer (Clamp) are one
  layer, named by the Convolution/MatMul, as NNCF's ignored scope takes it. Where a layer's
  tensor feeds a FakeQuantize (the INT8 IR), the FakeQuantize's output is read under the
  layer's name: that is what the next layer sees. NNCF keeps the FP32 IR's friendly names, so
  the two captures name their layers alike.
* precision: the compiled, unmodified model's runtime graph (``get_runtime_model()``): each
  runtime node's ``runtimePrecision`` applies to the original ops in its ``originalLayersNames``
  (an INT8 Convolution fused with its bias, activation and requantization is one u8/i8 node).
  Ops the plugin folded into a neighbour without listing them (a Clamp merged into the next
  FakeQuantize) take the precision of the layer feeding them.
* rebuild: the SUT made as ``create`` makes it, with the INT8 IR quantized by NNCF under an
  ignored scope of the excluded layers' names (an activation's consumers join it: NNCF quantizes
  a tensor at its consumers' inputs), and optionally weight damage (see DAMAGE); both
  applied by ``recipe``, which ``convert`` calls while quantizing.

Ops with several outputs (Split ...) are read at their first output.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from quantmark.ground.errors import UserError
from quantmark.models.text_graph import is_text
from quantmark.sut.layers import LayerCapture, LayerOutput, Recipe
from quantmark.sut.openvino.recipe import DAMAGE, EXCLUSION, SKIP_TYPES, consumers_of
from quantmark.sut.openvino.runtime_graph import PRECISION_CLASS
from quantmark.sut.registry import get_sut

log = logging.getLogger(__name__)

__all__ = ["DAMAGE", "EXCLUSION", "capture", "rebuild"]

#: ops whose bias OpenVINO's ONNX frontend splits into a following Add
BIASED_TYPES = frozenset({"Convolution", "GroupConvolution", "MatMul", "ConvolutionBackpropData",
                          "GroupConvolutionBackpropData"})
#: activations folded into the layer they follow when they are its only consumer (the export's
#: Conv -> Clamp is one layer, as ONNX Runtime's and TFLite's fused kernels make it): the
#: layer keeps the conv's name, the one NNCF's ignored scope takes
FOLDED = frozenset({"Relu", "Clamp", "Sigmoid", "Swish", "HSwish", "HSigmoid", "Gelu", "Elu",
                    "Tanh", "Mish", "SoftPlus"})
#: runtime nodes that are not the layers themselves
RUNTIME_SKIP = frozenset({"Reorder", "Const", "Input", "Output"})


@dataclass
class _Layer:
    """A planned capture: the op that names it, the op whose value is read, its members."""

    name: str
    op_type: str
    read: Any  # ov.Output read as the layer's value
    members: tuple[str, ...]  # original op names that belong to it (for precision lookup)
    inputs: tuple[str, ...] = ()


def _constant_names(model: Any) -> set[str]:
    """Ops computed from constants only (weight decompression, shape arithmetic)."""
    constant: set[str] = set()
    for op in model.get_ordered_ops():
        kind = op.get_type_name()
        sources = [i.get_source_output().get_node().get_friendly_name() for i in op.inputs()]
        if kind == "Constant" or (kind != "Parameter" and sources
                                  and all(s in constant for s in sources)):
            constant.add(op.get_friendly_name())
    return constant


def _bias_add(op: Any, constant: set[str]) -> Any | None:
    """The Add that carries ``op``'s bias (its only consumer, other operand constant)."""
    if op.get_type_name() not in BIASED_TYPES:
        return None
    consumers = consumers_of(op.output(0))
    if len(consumers) != 1 or consumers[0].get_type_name() != "Add":
        return None
    add = consumers[0]
    others = [i.get_source_output().get_node().get_friendly_name() for i in add.inputs()
              if i.get_source_output().get_node().get_friendly_name() != op.get_friendly_name()]
    return add if others and all(name in constant for name in others) else None


def _plan(model: Any) -> list[_Layer]:
    """The layers of ``model`` in topological order, with producers resolved."""
    constant = _constant_names(model)
    absorbed: set[str] = set()
    owner: dict[str, str] = {}  # op name -> the layer whose value it carries
    layers: list[_Layer] = []
    heads: dict[str, Any] = {}
    for op in model.get_ordered_ops():
        name = op.get_friendly_name()
        if (name in constant or name in absorbed or op.get_type_name() in SKIP_TYPES
                or op.get_output_size() == 0
                or not op.output(0).get_element_type().is_real()):
            continue
        members = [name]
        last = op
        bias = _bias_add(op, constant)
        if bias is not None:
            absorbed.add(bias.get_friendly_name())
            members.append(bias.get_friendly_name())
            last = bias
        after = consumers_of(last.output(0))
        if len(after) == 1 and after[0].get_type_name() in FOLDED:
            absorbed.add(after[0].get_friendly_name())
            members.append(after[0].get_friendly_name())
            last = after[0]
        read = last.output(0)
        quantizers = [n for n in consumers_of(read) if n.get_type_name() == "FakeQuantize"]
        if quantizers:
            read = quantizers[0].output(0)
            members.append(quantizers[0].get_friendly_name())
        for member in members:
            owner[member] = name
        layers.append(_Layer(name, op.get_type_name(), read, tuple(members)))
        heads[name] = op
    for layer in layers:
        layer.inputs = _producers(heads[layer.name], owner, constant)
    return layers


def _producers(op: Any, owner: dict[str, str], constant: set[str]) -> tuple[str, ...]:
    """Captured layers feeding ``op``, walking back through bookkeeping ops."""
    found: list[str] = []
    stack = [i.get_source_output().get_node() for i in op.inputs()]
    seen: set[str] = set()
    while stack:
        node = stack.pop(0)
        name = node.get_friendly_name()
        if name in seen or name in constant:
            continue
        seen.add(name)
        if name in owner:
            if owner[name] not in found:
                found.append(owner[name])
            continue
        stack.extend(i.get_source_output().get_node() for i in node.inputs())
    return tuple(found)


def _text(value: Any) -> str:
    """rt_info values are OVAny, properties may be ov.Type: both as plain strings."""
    if hasattr(value, "astype"):
        value = value.astype(str)
    return value.get_type_name() if hasattr(value, "get_type_name") else str(value)


def runtime_precisions(compiled: Any) -> dict[str, str]:
    """Original op name -> the precision of the runtime node that executes it."""
    found: dict[str, str] = {}
    for node in compiled.get_runtime_model().get_ordered_ops():
        info = node.get_rt_info()
        kind = _text(info["layerType"]) if "layerType" in info else node.get_type_name()
        if kind in RUNTIME_SKIP or "runtimePrecision" not in info:
            continue
        precision = _text(info["runtimePrecision"])
        names = _text(info["originalLayersNames"]).split(",") if (
            "originalLayersNames" in info) else []
        for name in [node.get_friendly_name(), *names]:
            if name:
                found.setdefault(name, PRECISION_CLASS.get(precision, precision))
    return found


def _assign_precisions(layers: list[_Layer], runtime: dict[str, str]) -> tuple[list[str],
                                                                             list[str]]:
    """Each layer's precision; also the names that inherited their producer's."""
    result: dict[str, str] = {}
    inherited: list[str] = []
    for layer in layers:
        direct = next((runtime[m] for m in layer.members if m in runtime), None)
        if direct is None:
            direct = next((result[p] for p in layer.inputs if p in result), "fp32")
            inherited.append(layer.name)
        result[layer.name] = direct
    return [result[layer.name] for layer in layers], inherited


def capture(backend: Any, samples: np.ndarray) -> LayerCapture:
    """Every layer's output for ``samples`` in the IR ``backend`` runs (its own compile)."""
    import openvino as ov

    from quantmark.sut.openvino.ir import make_batch_dynamic

    if is_text(backend.artifact.meta or {}):
        raise UserError(f"{backend.sut.name}: the layer diagnosis feeds one image input; a "
                        "text model's token inputs are not supported (run it without diagnose)")
    path = str(backend.artifact.path)
    core = ov.Core()
    model = core.read_model(path)
    make_batch_dynamic(model)
    # the SUT's own compile settings (inference precision f32 for ov-fp32 and ov-int8)
    config = backend._config()
    runtime = runtime_precisions(core.compile_model(model, "CPU", config))
    layers = _plan(model)
    precisions, inherited = _assign_precisions(layers, runtime)
    added = model.add_outputs([layer.read for layer in layers])
    # a tensor that already was an output (the logits) is not added twice: find each's port
    ports = [next(i for i, out in enumerate(model.outputs) if out == new) for new in added]
    compiled = core.compile_model(model, "CPU", config)
    batch = np.ascontiguousarray(samples, dtype=np.float32)
    result = compiled.create_infer_request().infer({0: batch})
    outputs = []
    for layer, precision, port in zip(layers, precisions, ports, strict=True):
        value = np.array(result[port], dtype=np.float32, copy=True)
        outputs.append(LayerOutput(layer.name, layer.op_type, precision, value, layer.inputs))
    hint = _text(compiled.get_property("INFERENCE_PRECISION_HINT"))
    return LayerCapture(
        layers=outputs,
        method=("openvino: intermediate tensors added as outputs (Model.add_outputs); a "
                "tensor that feeds a FakeQuantize is read after it"),
        precision_source=("runtimePrecision of the compiled unmodified model's runtime nodes "
                          "(get_runtime_model, originalLayersNames); ops fused without a name "
                          "take their producer's"),
        notes={"model_file": path, "inference_precision_hint": hint,
               "precision_inherited": inherited,
               "layout": "OpenVINO ops are channels-first: 4-D values are NCHW as computed"},
    )


def rebuild(name: str, options: Any, spec: Any, calibration: Any, recipe: Recipe) -> Any:
    """The SUT ``name`` as ``create`` makes it, its INT8 IR quantized with ``recipe``."""
    from quantmark.sut.openvino.backend import (
        DEFAULT_API,
        OpenVinoBackend,
        create,
    )
    from quantmark.sut.openvino.convert import ov_fp32_ir, ov_int8_ir
    from quantmark.sut.openvino.suts import OV_API_OPTION

    if get_sut(name).precision_key != "int8" or not recipe.key():
        return create(name, options, spec, calibration)
    if is_text(spec):
        raise UserError(f"{name}: a layer recipe (excluded layers, damage) quantizes an image "
                        "model's IR; the text INT8 recipe takes none")
    artifact = ov_fp32_ir(spec, options.model_path)
    if artifact.precision == "int8":
        raise UserError(f"{name}: --model-path {options.model_path} is already quantized; "
                        "a recipe (excluded layers, damage) needs the FP32 model to quantize")
    layout = (artifact.meta or {}).get("layout", "NCHW")
    artifact = ov_int8_ir(artifact, calibration.arrays(layout), calibration.hash(),
                          recipe=recipe)
    return OpenVinoBackend(str(artifact.path), "int8", options.scenario, options.threads,
                           artifact, str(options.extra.get(OV_API_OPTION, DEFAULT_API)),
                           co_located=options.co_located)
