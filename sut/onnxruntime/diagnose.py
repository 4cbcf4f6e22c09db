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
from quantmark.sut.interface import Backend, SutOptions
from quantmark.sut.layers import LayerCapture, LayerOutput, Recipe

EXCLUSION = "onnxruntime.quantization.quantize_static(nodes_to_exclude=...)"
DAMAGE = "the node's INT8 weights re-quantized with a scale `factor` times too large"


def providers(backend: Backend) -> list[Any]:
    """The execution providers the SUT's session runs on (the GPU SUTs' CUDA or TensorRT)."""
    chosen = getattr(backend, "_providers", None)
    return chosen() if callable(chosen) else ["CPUExecutionProvider"]


def executed_precisions(model_path: str, sample: np.ndarray, extras: dict[str, Any],
                        where: list[Any]) -> dict[str, str]:
    """{node name: precision its kernel ran in} from one profiled run of the unmodified model.
    Kernel events are named after the node (``node_Conv_881_token_1_kernel_time`` ...)."""
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
        session.run(None, {session.get_inputs()[0].name: sample})
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
    shapes in integers (an int64 Add), which are no precision's to lose and which a float graph
    output cannot carry. A tensor shape inference cannot type is kept."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto).graph
    except Exception:  # noqa: BLE001 - inference is a filter only: keep every layer
        return layers
    types = {value.name: value.type.tensor_type.elem_type
             for value in (*inferred.value_info, *inferred.output, *inferred.input)}
    return [layer for layer in layers if types.get(layer.tensor) in (None, 0, *FLOAT_TYPES)]


def capture(backend: Backend, samples: np.ndarray) -> LayerCapture:
    """Every layer's output for ``samples`` (float32 NCHW batch) in the model ``backend`` runs."""
    import onnxruntime as ort

    from quantmark.sut.onnxruntime.backend import session_extras

    path = str(backend.artifact.path)
    extras = session_extras(backend.artifact)  # the SUT's own session keywords
    proto = onnx.load(path)
    layers = float_layers(proto, graph_layers(proto))
    if not layers:
        raise UserError(f"{path} has no compute node to diagnose")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(
        with_outputs(proto, [layer.tensor for layer in layers]).SerializeToString(), options,
        providers=providers(backend), **extras)
    feed = {session.get_inputs()[0].name: np.ascontiguousarray(samples, dtype=np.float32)}
    values = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed),
                      strict=True))
    precisions = executed_precisions(path, feed[session.get_inputs()[0].name][:1], extras,
                                     providers(backend))
    outputs = [LayerOutput(layer.name, layer.op_type,
                           next((precisions[a] for a in layer.aliases if a in precisions),
                                "not run"),
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
    fp32 = fp32_onnx(spec, options.model_path)
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


