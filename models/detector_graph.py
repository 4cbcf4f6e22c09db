"""A detector's graph as every framework's INT8 path needs it: does its output fit the spec's
head, and which nodes form the head's post-processing that must stay float.

Framework-neutral: ONNX Runtime (on the ONNX graph) and OpenVINO (on its ``ov.Model``) map their
own nodes to ``GraphNode`` and get back node names for their own exclusion mechanism
(``nodes_to_exclude``, NNCF's ``ignored_scope``).

Why a float head: a YOLO head concatenates boxes in input pixels (0..640) with sigmoid scores
(0..1) into one tensor; quantized per tensor at the boxes' scale every score collapses, and the
DFL softmax / box decode lose pixels. The head is found by structure, not by exporter names:
walking back from the output, every data node is head post-processing until a compute layer
(Conv, MatMul, Gemm) is met: those are the last prediction layers and stay quantized. One
exception: a compute layer fed by a Softmax (the DFL expectation, a fixed 1x1 convolution over
the bin probabilities) is part of the decode and stays float with it. Shape arithmetic
(Shape -> Gather -> Concat into a Reshape) and constants are not data and are left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError

#: the output each head form has (the spec's ``head``)
HEADS = {"raw": "[N, 4+classes, anchors]", "nms": "[N, K, 6] (x1, y1, x2, y2, score, class)"}
#: the node kinds a framework maps its ops to
KINDS = ("input", "const", "shape", "compute", "softmax", "other")
#: how the float head is chosen, for artifact keys and metadata
FLOAT_HEAD_RULE = ("walk back from the output; every data node until the last compute layers "
                   "(Conv/MatMul/Gemm, which stay INT8) stays float, a compute layer fed by a "
                   "Softmax (DFL) included; shape arithmetic and constants excluded")
FLOAT_HEAD_VERSION = 1


@dataclass(frozen=True)
class GraphNode:
    """One node: its name (what the framework's exclusion takes), its kind (``KINDS``) and the
    names of the nodes producing its inputs, in input order."""

    name: str
    kind: str
    inputs: tuple[str, ...] = ()


def is_detector(spec: Any) -> bool:
    """The spec (or an artifact's meta) runs a detector: its output is the head, not scores."""
    task = spec.get("task") if isinstance(spec, dict) else getattr(spec, "task", None)
    return task == "detection"


def task_meta(spec: Any) -> dict[str, Any]:
    """A detector's task and head, for an artifact's meta (and from there its cache key);
    nothing for a classifier, whose metas and keys stay as they were."""
    return {"task": spec.task, "head": spec.head} if is_detector(spec) else {}


def task_key(meta: dict[str, Any]) -> dict[str, Any]:
    """What a detector adds to the cache key of an artifact made from one with ``meta``
    (nothing for a classifier, so its keys stay as they were)."""
    if not is_detector(meta):
        return {}
    return {"task": meta["task"], "head": meta.get("head", ""),
            "float_head": FLOAT_HEAD_VERSION}


def head_of(dims: Sequence[int | str | None]) -> tuple[str, int] | None:
    """("raw", classes), ("nms", 0) or None for an output's dims (None/str: dynamic)."""
    from quantmark.models.workload import detector_head

    return detector_head([d if isinstance(d, int) else "?" for d in dims])


def check_head(found: dict[str, Sequence[int | str | None]], spec: Any, where: str) -> str:
    """The name of the output (of ``found``: name -> dims) that is the spec's head; one line
    naming the shapes found and the one expected where none is."""
    want = spec.head or ""
    if want and want not in HEADS:
        raise UserError(f"model {spec.name}: head {want!r} is not a detector head; use one of "
                        f"{', '.join(HEADS)}")
    for name, dims in found.items():
        head = head_of(dims)
        if head and (not want or head[0] == want) and (
                head[0] == "nms" or head[1] == spec.num_classes):
            return name
    shapes = ", ".join(f"{name}{_shape(dims)}" for name, dims in found.items()) or "none"
    expected = (f"{want} head {HEADS[want]}" if want else " or ".join(HEADS.values()))
    raise UserError(f"{where}: no output fits a detector of {spec.num_classes} classes (found "
                    f"{shapes}; expected the {expected.replace('classes', str(spec.num_classes))}"
                    "); pass the detector's own file or fix --head / --num-classes")


def _shape(dims: Sequence[int | str | None]) -> str:
    return "[" + ", ".join("N" if i == 0 else str(d) if isinstance(d, int) else "?"
                           for i, d in enumerate(dims)) + "]"


def data_nodes(nodes: Sequence[GraphNode]) -> set[str]:
    """Nodes whose values depend on the image through data edges (not through a shape op);
    ``nodes`` in topological order."""
    data = {node.name for node in nodes if node.kind == "input"}
    for node in nodes:
        if node.kind not in ("input", "const", "shape") and any(i in data for i in node.inputs):
            data.add(node.name)
    return data


def float_head(nodes: Sequence[GraphNode], outputs: Iterable[str]) -> tuple[list[str], list[str]]:
    """(head post-processing node names, the prediction layers where the walk stopped), both
    in graph order; ``outputs`` are the nodes producing the model's outputs."""
    by_name = {node.name: node for node in nodes}
    data = data_nodes(nodes)
    head: set[str] = set()
    stops: set[str] = set()
    stack = [name for name in outputs if name in data]
    while stack:
        name = stack.pop()
        node = by_name.get(name)
        if node is None or name in head or name in stops or node.kind == "input":
            continue
        if node.kind == "compute" and not _fed_by_softmax(node, by_name):
            stops.add(name)
            continue
        head.add(name)
        stack.extend(i for i in node.inputs if i in data)
    order = [node.name for node in nodes]
    return [n for n in order if n in head], [n for n in order if n in stops]


def _fed_by_softmax(node: GraphNode, by_name: dict[str, GraphNode]) -> bool:
    source = by_name.get(node.inputs[0]) if node.inputs else None
    return source is not None and source.kind == "softmax"


def require_stops(stops: list[str], where: str) -> None:
    """One line where the walk met no prediction layer: the whole model would stay float."""
    if not stops:
        raise UserError(f"{where}: no convolution or matmul feeds the detector's output, so "
                        "nothing before its head can be quantized; pass a CNN detector (e.g. "
                        "an Ultralytics YOLO export)")


def _onnx_dims(value_info: Any) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
            for d in value_info.type.tensor_type.shape.dim]


def check_detector_file(path: str | Path, spec: Any, where: str) -> str:
    """The name of the ONNX file's output that is ``spec``'s head (its float outputs
    first); one line naming what was found where none is."""
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    floats = {o.name: _onnx_dims(o) for o in proto.graph.output
              if o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    found = {**floats, **{o.name: _onnx_dims(o) for o in proto.graph.output}}
    return check_head(found, spec, where)


def detector_artifact(fp32: Any, spec: Any) -> Any:
    """The canonical ONNX artifact ``fp32`` checked to end in ``spec``'s head, its meta naming
    the head's output and the task (which every artifact made from it keys on, so a
    detector's never collide with a classifier's). A copy: a cached artifact is not touched."""
    where = f"model {spec.name}: --model-path {fp32.meta.get('user_file', fp32.path)}"
    output = check_detector_file(fp32.path, spec, where)
    return replace(fp32, meta={**fp32.meta, **task_meta(spec), "output_name": output,
                               "label_offset": 0})


def sample_shape(spec: Any, layout: str) -> tuple[int, int, int]:
    """One sample as the detector takes it, from the spec's geometry (its letterbox
    preprocessing is the task's, not the classifier recipe's)."""
    if layout == "NCHW":
        return spec.channels, spec.input_size, spec.input_width
    return spec.input_size, spec.input_width, spec.channels
