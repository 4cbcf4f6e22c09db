"""ONNX Runtime on a detector (``spec.task == "detection"``): its output, and the INT8 models
with the head's post-processing kept in float.

The output is the ONNX model's own: raw ``[N, 4+C, anchors]`` or nms ``[N, K, 6]``, picked by
name (``output_name``, checked against the spec's head by ``models.detector_graph``) rather
than "the first output".

INT8: ``onnxruntime.quantization``'s own answer to a layer that must not be quantized is
``nodes_to_exclude``. The excluded nodes are found by structure on the pre-processed model the
quantizer actually reads (``quantmark.models.detector_graph``: every node after the last
prediction convolutions, the DFL softmax and its convolution included). Measured on the tiny
fixture (64 px, random weights, 32 random calibration images, a random batch of 2) against the
FP32 file: with every node quantized the final Concat puts the 0..1 scores on the boxes' pixel
scale (scores off by up to 0.47, boxes 0.45 px median, 1.8 px max); with the head excluded,
scores within 3e-4 and boxes 0.004 px median (0.03 max); ort-int8dyn (ConvInteger, head
excluded the same way) 0.001 px median. ``head_evidence`` reads from the load-time profile that
the head's nodes ran float kernels and refuses an integer one.
"""

from __future__ import annotations

import collections
import logging
from pathlib import Path
from typing import Any

import onnx

from quantmark.models.detector_graph import (
    FLOAT_HEAD_RULE,
    GraphNode,
    float_head,
    require_stops,
)

log = logging.getLogger(__name__)

#: ONNX op types -> ``GraphNode`` kinds (anything else is "other")
COMPUTE_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
SHAPE_OPS = frozenset({"Shape", "Size"})
#: the quantized graph's boundary ops: no arithmetic of the head's own
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})


def onnx_graph(proto: onnx.ModelProto) -> tuple[list[GraphNode], list[str]]:
    """The graph as ``GraphNode`` (topological, as ONNX stores it) and its output nodes."""
    producer = {i.name: i.name for i in proto.graph.input}
    consts = {t.name for t in proto.graph.initializer}
    nodes = [GraphNode(i.name, "input") for i in proto.graph.input if i.name not in consts]
    for index, node in enumerate(proto.graph.node):
        name = node.name or f"{node.op_type}_{index}"
        kind = ("const" if node.op_type == "Constant" else
                "compute" if node.op_type in COMPUTE_OPS else
                "shape" if node.op_type in SHAPE_OPS else
                "softmax" if node.op_type == "Softmax" else "other")
        nodes.append(GraphNode(name, kind, tuple(producer[i] for i in node.input
                                                 if i in producer and i not in consts)))
        producer.update({out: name for out in node.output})
    outputs = [producer[o.name] for o in proto.graph.output if o.name in producer]
    return nodes, outputs


def head_nodes(path: str | Path, where: str) -> tuple[list[str], list[str]]:
    """Names of the nodes of the ONNX file at ``path`` that stay float in its INT8 model, and
    of the prediction layers before them (quantized)."""
    proto = onnx.load(str(path), load_external_data=False)
    unnamed = [n for n in proto.graph.node if not n.name]
    if unnamed:  # nodes_to_exclude matches by name: every node needs one
        raise ValueError(f"{path}: {len(unnamed)} unnamed node(s); run quant_pre_process first")
    head, stops = float_head(*onnx_graph(proto))
    require_stops(stops, where)
    log.info("%s: %d head node(s) kept in float after %d prediction layer(s)", where, len(head),
             len(stops))
    return head, stops


def float_head_meta(head: list[str], stops: list[str]) -> dict[str, Any]:
    """What an INT8 detector's artifact records about its float head."""
    return {"detector_float_head": {"rule": FLOAT_HEAD_RULE, "nodes": head, "after": stops,
                                    "mechanism": "onnxruntime.quantization nodes_to_exclude"}}


def head_evidence(events: list[dict[str, Any]], meta: dict[str, Any], name: str) -> dict[str, Any]:
    """What the load-time profile shows of a detector's head: which kernels its float nodes
    ran. A head node run by an integer kernel (an optimizer folding it back into the
    quantized graph) would silently collapse the scores: refused."""
    from quantmark.ground.errors import SutError
    from quantmark.sut.onnxruntime.kernels import INTEGER_KERNELS

    head = (meta.get("detector_float_head") or {}).get("nodes", [])
    ran: collections.Counter[str] = collections.Counter()
    integer = []
    for event in events:
        base = event.get("name", "").removesuffix("_kernel_time")
        op = event.get("args", {}).get("op_name", "?")
        if op in QDQ_OPS or not any(_runs(base, node) for node in head):
            continue
        ran[op] += 1
        if op in INTEGER_KERNELS or op.startswith("QLinear"):
            integer.append(f"{base} ({op})")
    if integer:
        raise SutError(f"{name}: the detector's float head ran integer kernels {integer}; "
                       "refusing to measure a head whose scores share the boxes' int8 scale")
    found = {"task": meta.get("task"), "head": meta.get("head"), "output": meta.get("output_name")}
    if head:
        found.update(float_head_nodes=len(head), float_head_kernels=dict(sorted(ran.items())))
    return found


def _runs(event: str, node: str) -> bool:
    """The profiler's kernel ``event`` (its name less "_kernel_time") ran ``node``: the node
    itself, its layout-transformed copy (``<node>_token_<n>``) or its NCHWc form (named after
    its output: ``<node's output>_nchwc``)."""
    return (event == node or event.startswith(f"{node}_token_")
            or (event.startswith(f"{node}_output") and event.endswith("_nchwc")))
