"""Layer-by-layer capture and exclusion for ``run.py diagnose`` (contract: ``sut.layers``).

The layers are ``models.onnx_layers``' (a compute node with its folded activation; its value is
what the next layer sees, after the QuantizeLinear/DequantizeLinear pair). Their tensors are
added as graph outputs of a copy of the SUT's own model and read in one run. The precision of
each layer is read from ONNX Runtime's profiler on the unmodified model, as the SUT's load-time
evidence is: the kernel that ran the node (QLinearConv, QGemm ... is int8; Conv on float is
fp32).
"""

from __future__ import annotations

import os
import re
import tempfile
from typing import Any

import numpy as np
import onnx

from quantmark.ground.errors import UserError
from quantmark.models.onnx_layers import graph_layers, with_outputs
from quantmark.models.text_graph import is_text, text_artifact, token_feeds
from quantmark.sut.interface import Backend, SutOptions
from quantmark.sut.layers import LayerCapture, LayerOutput, Recipe

EXCLUSION = "onnxruntime.quantization.quantize_static(nodes_to_exclude=...)"
#: captures a text model's layers (its token feeds: ``feeds``)
TEXT_MODELS = True
DAMAGE = "the node's INT8 weights re-quantized with a scale `factor` times too large"


def providers(backend: Backend) -> list[Any]:
    """The execution providers the SUT's session runs on (the GPU SUTs' CUDA or TensorRT)."""
    chosen = getattr(backend, "_providers", None)
    return chosen() if callable(chosen) else ["CPUExecutionProvider"]


def feeds(backend: Backend, session: Any, samples: np.ndarray) -> dict[str, np.ndarray]:
    """The session's feeds for ``samples`` (one batch in ``backend.layout``) as the backend's
    ``predict`` feeds them: a text model's token inputs (cut to the batch's longest sequence
    where its padding is dynamic), else the one input in its type (float32, a raw-pixel
    model's uint8)."""
    from quantmark.sut.onnxruntime.backend import ONNX_INPUT_TYPES

    meta = backend.artifact.meta or {}
    if is_text(meta):
        found = token_feeds(np.asarray(samples), tuple(meta["inputs"]),
                            bool(getattr(backend, "_dynamic", False)))
        return {name: np.ascontiguousarray(value) for name, value in found.items()}
    first = session.get_inputs()[0]
    return {first.name: np.ascontiguousarray(
        samples, dtype=ONNX_INPUT_TYPES.get(first.type, np.float32))}


def executed_precisions(model_path: str, feed: dict[str, np.ndarray], extras: dict[str, Any],
                        where: list[Any]) -> dict[str, str]:
    """{node name: precision its kernel ran in} from one profiled run of the unmodified model
    on the first sample of ``feed``. Kernel events are named after the node
    (``node_Conv_881_token_1_kernel_time`` ...)."""
    import onnxruntime as ort

    from quantmark.sut.onnxruntime.backend import (
        INTEGER_KERNELS,
        TYPE_PRECISION,
        node_kernel_events,
    )

    options = ort.SessionOptions()
    options.log_severity_level = 3
    with tempfile.TemporaryDirectory(prefix="quantmark-ort-diag-") as tmp:
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tmp, "profile")
        session = ort.InferenceSession(model_path, options, providers=where, **extras)
        session.run(None, {name: value[:1] for name, value in feed.items()})
        events = node_kernel_events(session.end_profiling())
    found: dict[str, str] = {}
    for event in events:
        node = re.sub(r"(_token_\d+)?(_nchwc)?_kernel_time$", "", event["name"])
        args = event.get("args", {})
        op = args.get("op_name", "")
        types = [next(iter(t)) for t in args.get("input_type_shape", [])[:1]]
        kind = TYPE_PRECISION.get(types[0], types[0]) if types else "?"
        found[node] = "int8" if op in INTEGER_KERNELS or kind in ("uint8", "int8") else kind
    return found


#: element types of a layer's value that quantization can disturb
FLOAT_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                         onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE})


def float_layers(proto: onnx.ModelProto, layers: list[Any]) -> list[Any]:
    """The layers whose value is floating point: a detector's head computes anchor grids and
    shapes in integers (an int64 Add), a dynamic quantizer's DynamicQuantizeLinear hands on
    uint8, which are no precision's to lose and which a float graph output cannot carry. A
    layer fed by one left out is fed by what fed that one (so its input's error is known). A
    tensor shape inference cannot type is kept."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto).graph
    except Exception:  # noqa: BLE001 - inference is a filter only: keep every layer
        return layers
    types = {value.name: value.type.tensor_type.elem_type
             for value in (*inferred.value_info, *inferred.output, *inferred.input)}
    kept = [layer for layer in layers if types.get(layer.tensor) in (None, 0, *FLOAT_TYPES)]
    chosen = {id(layer) for layer in kept}
    left_out = {layer.name: layer.inputs for layer in layers if id(layer) not in chosen}
    for layer in kept:
        layer.inputs = _seen_through(layer.inputs, left_out)
    return kept


def _seen_through(inputs: tuple[str, ...], left_out: dict[str, tuple[str, ...]]
                  ) -> tuple[str, ...]:
    """``inputs`` with each layer left out replaced by its own inputs, as far as it takes."""
    found: list[str] = []
    stack, seen = list(inputs)[::-1], set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in left_out:
            stack.extend(left_out[name][::-1])
        else:
            found.append(name)
    return tuple(found)


#: ONNX Runtime's integer kernels whose int32 output a Cast and a Mul by the scales turn back
#: into the float value of the node they replaced (``quantize_dynamic``'s)
RESCALED = frozenset({"MatMulInteger", "ConvInteger"})
#: what ``quantize_dynamic`` appends to the name of the node it replaces
QUANT_SUFFIX = "_quant"


def _only(consumers: dict[str, list[Any]], tensor: str, op: str) -> Any:
    users = consumers.get(tensor, [])
    return users[0] if len(users) == 1 and users[0].op_type == op else None


def rescaled_layers(proto: onnx.ModelProto, layers: list[Any]) -> list[Any]:
    """A dynamically quantized node (MatMulInteger -> Cast -> Mul by the scales) as one layer:
    the float node it replaced, whose value is the Mul's output, named as that node was
    (without ``QUANT_SUFFIX``, so it pairs with the FP32 model's by name); the Mul of the two
    scales, no value of the model's, left out."""
    consumers: dict[str, list[Any]] = {}
    for node in proto.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    nodes = {node.name for node in proto.graph.node}
    by_name = {layer.name: layer for layer in layers}
    renamed: dict[str, str] = {}
    dropped: set[str] = set()  # the layers folded away, by their names in ``layers``
    for node in proto.graph.node:
        cast = (_only(consumers, node.output[0], "Cast")
                if node.op_type in RESCALED and node.name in by_name else None)
        mul = _only(consumers, cast.output[0], "Mul") if cast is not None else None
        if mul is None or mul.name not in by_name:
            continue
        layer, scaled = by_name[node.name], by_name[mul.name]
        plain = node.name.removesuffix(QUANT_SUFFIX)
        layer.name = plain if plain not in nodes else node.name
        layer.tensor = scaled.tensor
        layer.aliases += [cast.name, *scaled.aliases]
        renamed.update({node.name: layer.name, mul.name: layer.name})
        # the other input: the product of the input's and the weight's scales
        dropped.update({mul.name, *(other for other in scaled.inputs if other != node.name)})
    kept = [layer for layer in layers if layer.aliases[0] not in dropped]
    for layer in kept:
        layer.inputs = tuple(dict.fromkeys(renamed.get(name, name) for name in layer.inputs))
    return kept


def _precision(aliases: list[str], precisions: dict[str, str]) -> str:
    """The precision of the kernel that ran a layer: one named as the layer or one of its
    aliases, else one ORT named by fusing it (``<node>/MatMulScaleFusion/``); "fused" where
    no kernel of the profile is its own (ORT fused it into another, a bias Add into its
    MatMul, or folded it away)."""
    found = next((precisions[a] for a in aliases if a in precisions), None)
    if found is None:
        found = next((kind for node, kind in precisions.items()
                      if any(node.startswith(f"{a}/") for a in aliases)), None)
    return found or "fused"


def capture(backend: Backend, samples: np.ndarray) -> LayerCapture:
    """Every layer's output for ``samples`` (one batch in ``backend.layout``: float32 images,
    a text model's token rows) in the model ``backend`` runs."""
    import onnxruntime as ort

    from quantmark.sut.onnxruntime.backend import session_extras

    path = str(backend.artifact.path)
    extras = session_extras(backend.artifact)  # the SUT's own session keywords
    proto = onnx.load(path)
    layers = float_layers(proto, rescaled_layers(proto, graph_layers(proto)))
    if not layers:
        raise UserError(f"{path} has no compute node to diagnose")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(
        with_outputs(proto, [layer.tensor for layer in layers]).SerializeToString(), options,
        providers=providers(backend), **extras)
    feed = feeds(backend, session, samples)
    values = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed),
                      strict=True))
    precisions = executed_precisions(path, feed, extras, providers(backend))
    outputs = [LayerOutput(layer.name, layer.op_type, _precision(layer.aliases, precisions),
                           np.asarray(values[layer.tensor], dtype=np.float32), layer.inputs)
               for layer in layers]
    return LayerCapture(
        outputs, method="onnxruntime: intermediate tensors added as graph outputs "
        "(after each layer's QuantizeLinear/DequantizeLinear: what the next layer sees)",
        precision_source="onnxruntime profiler: the kernel each node ran in one run of the "
        "unmodified model", notes={"model_file": path})


def rebuild(name: str, options: SutOptions, spec: Any, calibration: Any,
            recipe: Recipe) -> Backend:
    """``name``'s SUT with its static INT8 model quantized by ``recipe`` (nodes kept in FP32,
    injected faults); any other ORT SUT only as it is."""
    from quantmark.models.source import fp32_onnx
    from quantmark.sut.onnxruntime import quantize
    from quantmark.sut.onnxruntime.backend import OnnxRuntimeBackend
    from quantmark.sut.registry import get_sut, load_factory

    if not recipe.key():  # the SUT as a run builds it, the GPU SUTs included
        return load_factory(get_sut(name))(name, options, spec, calibration)
    if name != "ort-int8":
        raise UserError(f"{name}: only ort-int8's static quantization takes a changed recipe "
                        "(nodes kept in FP32, injected faults)")
    fp32 = (text_artifact(options.model_path, spec, f"--model-path {options.model_path}")
            if is_text(spec) else fp32_onnx(spec, options.model_path))
    if fp32.precision == "int8":
        raise UserError(f"--model-path {options.model_path} is already quantized: diagnose can "
                        "re-quantize only a model it quantizes itself (pass the FP32 model)")
    unknown = sorted(set(recipe.exclude)
                     - {node.name for node in onnx.load(str(fp32.path)).graph.node})
    if unknown:  # quantize_static ignores a nodes_to_exclude name no node has
        raise UserError(f"{name}: no layer {', '.join(unknown)} to keep in FP32; name layers "
                        "as run.py diagnose lists them (its layers.csv)")
    layout = (fp32.meta or {}).get("layout", "NCHW")
    artifact = quantize.quantize_static_int8(fp32, calibration.arrays(layout),
                                             calibration.hash(), recipe)
    return OnnxRuntimeBackend(str(artifact.path), "int8", options.threads, artifact,
                              options.scenario != "Server")


