"""OpenVINO on a detector (``spec.task == "detection"``): its output, and ov-int8 with the
head's post-processing kept in float.

The output is the ONNX model's own (raw ``[N, 4+C, anchors]`` or nms ``[N, K, 6]``), chosen by
the spec's head, never "the [N, classes] output".

ov-int8: NNCF's own answer to ops that must not be quantized is ``nncf.quantize``'s
``ignored_scope``. Its names are found by structure on the very ``ov.Model`` NNCF quantizes
(``quantmark.models.detector_graph``: every op after the last prediction convolutions, the DFL
softmax and its convolution, the box decode, the Concat of boxes with scores, the Sigmoid), not
by exporter names, and recorded in the artifact's meta. Measured on the tiny fixture (64 px,
random weights, 32 random calibration images, a random batch of 2) against ONNX Runtime's FP32
run: NNCF on the whole graph put the boxes off by 0.14 px median (0.65 max); with the head
ignored, 0.0008 px median (0.006 max), scores within 1e-4; the compiled model still runs 8 of
its 9 convolutions u8 (the DFL one f32), which the load-time check proves, and
``head_evidence`` reads the head's runtime layers (f32) from the same runtime graph.
"""

from __future__ import annotations

import collections
import logging
from pathlib import Path
from typing import Any

from quantmark.ground.errors import SutError, UserError
from quantmark.models.detector_graph import (
    FLOAT_HEAD_RULE,
    GraphNode,
    check_head,
    float_head,
    require_stops,
    task_meta,
)
from quantmark.sut.openvino.runtime_graph import COMPUTE_LAYERS

log = logging.getLogger(__name__)

#: OpenVINO op types -> ``GraphNode`` kinds (anything else is "other")
COMPUTE_OPS = frozenset({"Convolution", "GroupConvolution", "ConvolutionBackpropData",
                         "GroupConvolutionBackpropData", "MatMul"})
SHAPE_OPS = frozenset({"ShapeOf"})
SOFTMAX_OPS = frozenset({"Softmax", "SoftMax"})


def _dims(shape: Any) -> list[int | None]:
    if shape.rank.is_dynamic:
        return []
    return [None if d.is_dynamic else d.get_length() for d in shape]


def detector_output(model: Any, spec: Any, where: str) -> int:
    """Index of the model's output that is ``spec``'s head; one line naming what was found
    where none is."""
    names = [output.get_any_name() if output.get_names() else f"output{i}"
             for i, output in enumerate(model.outputs)]
    found = {name: _dims(output.get_partial_shape())
             for name, output in zip(names, model.outputs, strict=True)
             if output.get_element_type().is_real()}
    return names.index(check_head(found, spec, where))


def user_detector_ir(p: Path, model: Any, spec: Any, where: str,
                      layout: str) -> Any:
    """A user's detector IR: its head output (the spec's), used in place like a classifier's."""
    import openvino as ov

    from quantmark.models.artifacts import Artifact
    from quantmark.sut.openvino.ir import ir_files_hash, is_quantized, make_batch_dynamic

    out_index = detector_output(model, spec, where)
    try:
        static_batch = make_batch_dynamic(model)
    except Exception:
        raise UserError(f"{where} has a static batch that OpenVINO cannot make dynamic; "
                        "convert it with a dynamic batch (input shape [-1,...])") from None
    identity = ir_files_hash(p)
    meta: dict[str, Any] = {
        "model": spec.name, "user_file": str(p.resolve()), "layout": layout,
        "output_index": out_index, "static_batch": static_batch,
        "num_classes": spec.num_classes, "label_offset": 0, **task_meta(spec),
        "channels": spec.channels, "input_dtype": spec.input_dtype,
        "input_hw": [spec.input_size, spec.input_width],
        "openvino": ov.__version__, "sha256": identity, "cached": False,
    }
    return Artifact(path=p, format="openvino-ir",
                    precision="int8" if is_quantized(model) else "fp32", key=identity,
                    weights=f"user IR: {p.name} sha256 {identity}", source_hash=identity,
                    times={}, meta=meta)


def ov_graph(model: Any) -> tuple[list[GraphNode], list[str]]:
    """The model as ``GraphNode`` (OpenVINO's topological order) and its output ops."""
    nodes = []
    for op in model.get_ordered_ops():
        kind = op.get_type_name()
        if kind == "Result":
            continue
        nodes.append(GraphNode(
            op.get_friendly_name(),
            "input" if kind == "Parameter" else "const" if kind == "Constant" else
            "shape" if kind in SHAPE_OPS else "compute" if kind in COMPUTE_OPS else
            "softmax" if kind in SOFTMAX_OPS else "other",
            tuple(i.get_source_output().get_node().get_friendly_name() for i in op.inputs())))
    outputs = [result.input(0).get_source_output().get_node().get_friendly_name()
               for result in model.get_results()]
    return nodes, outputs


def head_ops(model: Any, where: str) -> tuple[list[str], list[str]]:
    """Friendly names of ``model``'s head post-processing ops (NNCF's ignored scope) and of
    the prediction layers before them (quantized)."""
    nodes, outputs = ov_graph(model)
    names = [node.name for node in nodes]
    if len(set(names)) != len(names):  # NNCF matches ignored names: they must be unique
        raise UserError(f"{where}: the OpenVINO model has ops sharing a name, which NNCF's "
                        "ignored scope cannot tell apart; convert the model again with "
                        "openvino.convert_model")
    head, stops = float_head(nodes, outputs)
    require_stops(stops, where)
    log.info("%s: %d head op(s) kept in float after %d prediction layer(s)", where, len(head),
             len(stops))
    return head, stops


def float_head_meta(head: list[str], stops: list[str]) -> dict[str, Any]:
    """What ov-int8's artifact records about a detector's float head."""
    return {"detector_float_head": {"rule": FLOAT_HEAD_RULE, "nodes": head, "after": stops,
                                    "mechanism": "nncf.quantize ignored_scope (names)"}}


def head_evidence(runtime_model: Any, meta: dict[str, Any], name: str) -> dict[str, Any]:
    """What the compiled runtime graph shows of the detector's head: layer type and runtime
    precision of each runtime node made from head ops (``originalLayersNames``; a node fused
    with a prediction layer is that layer's). A head compute layer running int8 would put
    the decode back on an int8 grid: refused."""
    recorded = meta.get("detector_float_head") or {}
    head, stops = set(recorded.get("nodes", [])), set(recorded.get("after", []))
    found: dict[str, Any] = {"task": meta.get("task"), "head": meta.get("head"),
                             "output_index": int(meta.get("output_index", 0))}
    if not head:
        return found
    ran: collections.Counter[str] = collections.Counter()
    for op in runtime_model.get_ordered_ops():
        info = {key: str(value.astype(str)) for key, value in op.get_rt_info().items()
                if key in ("layerType", "runtimePrecision", "originalLayersNames")}
        layers = set(filter(None, info.get("originalLayersNames", "").split(",")))
        if info.get("layerType") == "Const" or not layers & head or layers & stops:
            continue
        ran[f"{info.get('layerType', '?')}:{info.get('runtimePrecision', '?')}"] += 1
    integer = sorted(k for k in ran if k.split(":")[0] in COMPUTE_LAYERS
                     and k.split(":")[1] in ("i8", "u8"))
    if integer:
        raise SutError(f"{name}: the detector's float head runs int8 compute layers {integer}; "
                       "refusing to measure a head decoded on an int8 grid")
    found.update(float_head_nodes=len(head), float_head_layers=dict(sorted(ran.items())))
    return found


def read_detector(path: str | Path, where: str) -> tuple[Any, dict[str, Any]]:
    """The detector ``openvino.convert_model`` could not convert, read by OpenVINO's ONNX
    frontend with the one known cause fixed, and what the artifact records of it.

    OpenVINO's ``NopSliceBeforeGatherElements`` pass drops a Slice feeding GatherElements when
    the indices are smaller than the data (ONNX allows that) and GatherElements' own shape
    check then refuses the graph: an nms head's "take the box rows, gather the top-K" hits it.
    Each such Slice becomes the equivalent constant-index Gather, which the pass leaves alone
    (the output is the ONNX model's to 1.5e-5 on the tiny fixture). Any other failure, or a
    model without that pattern, is refused in one line by ``conversion_error``."""
    import openvino as ov

    model = ov.Core().read_model(str(path))
    count = _slices_to_gathers(model)
    if not count:
        raise ValueError("no Slice feeds a GatherElements")
    model.validate_nodes_and_infer_types()
    log.warning("%s: openvino.convert_model failed on this detector; read by OpenVINO's ONNX "
                "frontend with %d Slice(s) before GatherElements rewritten as Gather "
                "(recorded in the artifact)", where, count)
    return model, {"converter_workaround": {
        "converter": "openvino.Core.read_model (convert_model failed)",
        "rewrite": "Slice feeding GatherElements -> constant-index Gather",
        "why": "NopSliceBeforeGatherElements breaks GatherElements' shape check",
        "count": count}}


def _slices_to_gathers(model: Any) -> int:
    """Replace each constant Slice feeding a GatherElements by Gathers of the same rows."""
    import numpy as np
    import openvino.opset13 as ops

    count = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Slice" or not any(
                t.get_node().get_type_name() == "GatherElements"
                for t in op.output(0).get_target_inputs()):
            continue
        bounds = [op.input(i).get_source_output().get_node() for i in range(1, op.get_input_size())]
        data = op.input(0).get_source_output()
        if len(bounds) != 4 or any(b.get_type_name() != "Constant" for b in bounds):
            continue
        out = data
        for start, stop, step, axis in zip(*(b.get_data() for b in bounds), strict=True):
            size = data.get_partial_shape()[int(axis)]
            if size.is_dynamic:
                break
            rows = np.arange(size.get_length(), dtype=np.int64)[int(start):int(stop):int(step)]
            out = ops.gather(out, ops.constant(rows), ops.constant(np.int64(axis))).output(0)
        else:
            for target in op.output(0).get_target_inputs():
                target.replace_source_output(out)
            count += 1
    return count


def conversion_error(exc: Exception, path: str | Path, where: str) -> UserError:
    """One line for a detector OpenVINO cannot convert or compile (its own check failing), and
    what to run instead."""
    import openvino as ov

    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    cause = next((line for line in lines if line.startswith("Check ")), lines[0] if lines
                 else type(exc).__name__)
    node = next((line for line in lines if "friendly_name" in line), "")
    at = node.split("friendly_name", 1)[1].split("'")[1] if node.count("'") >= 2 else ""
    return UserError(f"{where}: OpenVINO {ov.__version__.split('-')[0]} cannot convert "
                     f"{Path(path).name} ({cause[:160]}{f' at op {at}' if at else ''}); export "
                     "the raw head [N, 4+classes, anchors] (NMS outside the model) for the "
                     "OpenVINO SUTs, or run the onnxruntime SUTs on this file")
