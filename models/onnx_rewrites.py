"""ONNX rewrites made to a detector before onnx2tf converts it (``models.saved_model``).

onnx2tf guesses layouts from static shapes. With a dynamic batch, the YOLO fixture's run-time
shape arithmetic made it concatenate anchors on the wrong axis and slice the DFL output empty,
and a [2, A] anchor constant meeting [N, 2, A] stopped it. ``fold_shape_arithmetic`` turns the
shape arithmetic into constants (evaluated with onnxruntime at two batch sizes) and
``align_constant_ranks`` gives broadcast constants their operand's rank: both keep the function
the graph computes, so ``saved_model.check_detector`` can hold the SavedModel to onnxruntime.
"""

from __future__ import annotations

from typing import Any

#: elementwise ops with ONNX's numpy-style broadcasting (right-aligned: leading 1s change nothing)
BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "PRelu",
                          "Where", "Equal", "Less", "Greater", "And", "Or"})


def _shape_derived(graph: Any) -> set[str]:
    """Tensors computed from shapes and constants only (not from the image's values)."""
    static = {t.name for t in graph.initializer}
    derived: set[str] = set()
    for node in graph.node:  # ONNX keeps nodes in topological order
        if node.op_type == "Constant":
            static.update(node.output)
        elif node.op_type in ("Shape", "Size"):
            derived.update(node.output)
        elif not node.op_type.startswith("Random") and all(
                not i or i in static or i in derived for i in node.input):
            derived.update(node.output)
    return derived


def _probe(model: Any, wanted: list[str], spec: Any) -> dict[int, dict[str, Any]]:
    """``wanted`` tensors' values at batch 1 and 2 (only the file's batch if it is static)."""
    import numpy as np
    import onnxruntime as ort
    from onnx import helper

    probe = type(model)()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend(helper.make_empty_tensor_value_info(name) for name in wanted)
    weights = {t.name for t in model.graph.initializer}
    image = next(i for i in model.graph.input if i.name not in weights)
    batch = image.type.tensor_type.shape.dim[0]
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    shape = (spec.channels, spec.input_size, spec.input_width)
    return {n: dict(zip(wanted, session.run(wanted, {image.name: np.zeros(
        (n, *shape), spec.input_dtype)}), strict=True))
        for n in ((batch.dim_value,) if batch.dim_value > 0 else (1, 2))}


def fold_shape_arithmetic(model: Any, spec: Any) -> int:
    """Replace run-time shape arithmetic (reshape targets, slice bounds, expand shapes) by
    constants, evaluated with onnxruntime at two batch sizes: a value equal at both is a
    constant; a Reshape target that starts with the batch (its input's and output's first dim)
    becomes ``[0, rest]`` (0 copies the input's batch). Returns how many tensors were folded."""
    import numpy as np
    from onnx import helper, numpy_helper

    graph = model.graph
    derived = _shape_derived(graph)
    frontier = list(dict.fromkeys(i for node in graph.node if node.output[0] not in derived
                                  for i in node.input if i in derived))
    reshapes = {n.input[1]: n for n in graph.node if n.op_type == "Reshape" and len(n.input) > 1
                and n.input[1] in frontier and not any(a.name == "allowzero" and a.i
                                                       for a in n.attribute)}
    ends = [t for n in reshapes.values() for t in (n.input[0], n.output[0])]
    probe = type(model)()
    probe.CopyFrom(model)
    probe.graph.node.extend(helper.make_node("Shape", [t], [f"{t}:shape"]) for t in ends)
    values = _probe(probe, frontier + [f"{t}:shape" for t in ends], spec)
    folded = {}
    for name in frontier:
        seen = [v[name] for v in values.values()]
        node = reshapes.get(name)
        sizes = [(b, v[f"{node.input[0]}:shape"][0], v[f"{node.output[0]}:shape"])
                 for b, v in values.items()] if node is not None else []
        if sizes and len(sizes) > 1 and all(b == first == out[0] for b, first, out in sizes) \
                and all(np.array_equal(out[1:], sizes[0][2][1:]) for _, _, out in sizes):
            folded[name] = np.concatenate([[0], sizes[0][2][1:]]).astype(seen[0].dtype)
        elif all(v.shape == seen[0].shape and np.array_equal(v, seen[0]) for v in seen):
            folded[name] = seen[0]
    for name, value in folded.items():
        graph.initializer.append(numpy_helper.from_array(np.asarray(value), f"{name}:folded"))
        for node in graph.node:
            node.input[:] = [f"{name}:folded" if i == name else i for i in node.input]
    _prune(graph)
    return len(folded)


def _prune(graph: Any) -> None:
    """Drop the nodes and initializers no graph output needs any more."""
    needed = {o.name for o in graph.output}
    kept = []
    for node in reversed(graph.node):
        if any(o in needed for o in node.output):
            kept.append(node)
            needed.update(i for i in node.input if i)
    del graph.node[:]
    graph.node.extend(reversed(kept))
    needed.update(i.name for i in graph.input)  # old files list their weights as inputs too
    initializers = [t for t in graph.initializer if t.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(initializers)


def align_constant_ranks(model: Any) -> int:
    """Give a broadcast constant (an initializer of lower rank than the tensor it meets in an
    elementwise op) leading 1s up to that rank: the same values under ONNX's right-aligned
    broadcasting, and the form onnx2tf converts. Returns how many inputs were changed."""
    import onnx
    from onnx import numpy_helper

    inferred = onnx.shape_inference.infer_shapes(model).graph
    ranks = {v.name: len(v.type.tensor_type.shape.dim)
             for v in (*inferred.value_info, *inferred.input, *inferred.output)
             if v.type.tensor_type.HasField("shape")}
    weights = {t.name: t for t in model.graph.initializer}
    changed = 0
    for node in model.graph.node:
        if node.op_type not in BROADCASTING:
            continue
        rank = max((ranks.get(i, 0) for i in node.input if i not in weights), default=0)
        for position, name in enumerate(node.input):
            value = numpy_helper.to_array(weights[name]) if name in weights else None
            if value is None or not 0 < value.ndim < rank:
                continue
            aligned = f"{name}:rank{rank}"
            if aligned not in weights:
                weights[aligned] = numpy_helper.from_array(
                    value.reshape((1,) * (rank - value.ndim) + value.shape), aligned)
                model.graph.initializer.append(weights[aligned])
            node.input[position] = aligned
            changed += 1
    return changed
