"""Where a transformer's time goes, in the words its user thinks in: attention, MatMul/Linear,
softmax, layernorm, the quantize/dequantize work, and the rest, from each profiled node's role.

A node's role comes from the graph the framework ran (``graph_roles``: an ONNX graph, such as
the optimized model ONNX Runtime runs), never from an exporter's names: a MatMul (or its
integer form: MatMulInteger, DynamicQuantizeMatMul, QLinearMatMul ...) both of whose operands
are activations is attention's (Q·K^T, scores·V), one with a weight operand (an initializer,
or computed from initializers only) is a projection or the feed-forward's; a decomposed layer
norm (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div and its affine Mul, Add) is told by
its shape; a Mul rescaling an integer kernel's output, or by a dynamic quantizer's scale, is
dequantization. Every other node's role is its op type's (``op_role``), and a node computing
on integers or booleans (shapes, masks) is shape arithmetic. Without a graph, a MatMul counts
as MatMul/Linear (attention not told apart), which the record says.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from quantmark.sut.profiling import LayerTime, Profile

#: role -> the row's name, in table order
ROLES = {
    "attention": "attention: Q·K^T and ·V MatMuls",
    "softmax": "softmax",
    "linear": "MatMul/Linear: projections, feed-forward",
    "layernorm": "layernorm",
    "quantize": "quantize/dequantize",
    "cast": "casts",
    "activation": "activation (GELU ...)",
    "embedding": "embedding lookup",
    "elementwise": "elementwise (residual, bias, mask, scale)",
    "layout": "reshape/transpose",
    "shape": "shape and mask arithmetic (integers, booleans)",
    "other": "other",
}
#: matrix products, and which input is the second operand (QLinear forms carry scales first)
MATMULS = {"MatMul": 1, "FusedMatMul": 1, "Gemm": 1, "FusedGemm": 1, "MatMulInteger": 1,
           "MatMulIntegerToFloat": 1, "DynamicQuantizeMatMul": 1, "QLinearMatMul": 3,
           "QGemm": 3, "MatMulNBits": 1, "MatMulBnb4": 1, "FullyConnected": 1, "Einsum": 1}
#: integer kernels whose output a Cast and a Mul turn back into floats
INTEGER_OUT = frozenset({"MatMulInteger", "ConvInteger"})
QUANTIZE_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
                          "FakeQuantize", "Convert"})
ACTIVATIONS = frozenset({"Gelu", "BiasGelu", "FastGelu", "QuickGelu", "Erf", "Relu", "Tanh",
                         "Sigmoid", "Swish", "Silu", "Mish", "Elu", "HardSigmoid"})
LAYOUT_OPS = frozenset({"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze",
                        "Identity", "Split", "Concat", "Slice", "Expand", "Tile"})
ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Where", "Neg", "Abs",
                         "Max", "Min", "Clip", "Exp", "Log", "Reciprocal", "BiasAdd",
                         "QLinearAdd", "QLinearMul"})
#: profiler precisions of nodes computing on integers or booleans (shapes, masks)
NOT_FLOAT = frozenset({"int64", "int32", "bool", "uint64", "int16"})
#: how a SUT's roles were read where its framework hands no executed graph
NO_GRAPH = "op types only (attention MatMuls counted as MatMul/Linear)"
#: outputs that carry only shapes: what follows them is no activation
SHAPE_ONLY = frozenset({"Shape", "Size"})


def op_role(op: str, precision: str = "") -> str:
    """A node's role from its op type (and the precision it computed in) alone."""
    if op in QUANTIZE_OPS or op.startswith(("Quantize", "Dequantize")):
        return "quantize"
    found = next((role for role, words in (("softmax", ("Softmax",)),
                                           ("layernorm", ("LayerNorm", "Normalize")),
                                           ("attention", ("Attention",)))
                  if any(word in op for word in words)), None)
    if found:
        return found
    if op in MATMULS:
        return "linear"
    if op == "Cast":
        return "cast"
    if op in ACTIVATIONS:
        return "activation"
    if precision in NOT_FLOAT or op in SHAPE_ONLY:
        return "shape"
    if op in LAYOUT_OPS:
        return "layout"
    if op == "Gather":
        return "embedding"
    return "elementwise" if op in ELEMENTWISE else "other"


def _activations(graph: Any) -> set[str]:
    """The tensors that depend on the graph's inputs (not only on weights), shapes aside."""
    weights = {tensor.name for tensor in graph.initializer}
    live = {value.name for value in graph.input if value.name not in weights}
    grown = True
    while grown:  # a fixpoint, in case the file's nodes are not in topological order
        grown = False
        for node in graph.node:
            if node.op_type in SHAPE_ONLY or not any(name in live for name in node.input):
                continue
            new = [name for name in node.output if name and name not in live]
            live.update(new)
            grown = grown or bool(new)
    return live


def _matmul_role(node: Any, live: set[str]) -> str:
    """attention where both operands are activations, else a projection's."""
    second = MATMULS[node.op_type]
    operands = [node.input[0], node.input[second] if len(node.input) > second else ""]
    return "attention" if all(name in live for name in operands) else "linear"


def _wiring(graph: Any) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    producer = {name: node for node in graph.node for name in node.output}
    consumers: dict[str, list[Any]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)
    return producer, consumers


def _downstream(start: Any, consumers: dict[str, list[Any]], depth: int) -> list[Any]:
    """The nodes within ``depth`` steps after ``start``, nearest first."""
    found, frontier = [], [start]
    for _ in range(depth):
        frontier = [user for node in frontier for name in node.output
                    for user in consumers.get(name, []) if user not in found]
        found += frontier
    return found


def _layernorm(mean: Any, producer: dict[str, Any], consumers: dict[str, list[Any]],
               live: set[str]) -> list[Any]:
    """The nodes of a decomposed layer norm that starts at the ReduceMean ``mean`` (x - mean,
    its variance, the division by its root, the affine Mul and Add), or none."""
    centred = next((node for node in consumers.get(mean.output[0], [])
                    if node.op_type == "Sub" and mean.input[0] in node.input), None)
    if centred is None:
        return []
    after = _downstream(centred, consumers, 6)
    norm = next((node for node in after if node.op_type in ("Div", "Mul")
                 and centred.output[0] in node.input
                 and any(name in producer and producer[name] in after
                         for name in node.input if name != centred.output[0])), None)
    if norm is None:
        return []
    chain, stack = [mean, centred, norm], [n for n in node_inputs(norm, producer) if n in after]
    while stack:  # the variance branch: what lies between the centring and the norm
        node = stack.pop()
        if node not in chain:
            chain.append(node)
            stack += [n for n in node_inputs(node, producer) if n in after]
    tail = norm
    for op in ("Mul", "Add"):  # the affine scale and shift, by weights
        users = consumers.get(tail.output[0], [])
        if len(users) == 1 and users[0].op_type == op and any(
                name not in live for name in users[0].input):
            tail = users[0]
            chain.append(tail)
    return chain


def node_inputs(node: Any, producer: dict[str, Any]) -> list[Any]:
    """The nodes producing ``node``'s inputs."""
    return [producer[name] for name in node.input if name in producer]


def _dequantizes(node: Any, producer: dict[str, Any]) -> bool:
    """A Cast of an integer kernel's output, or a Mul by a dynamic quantizer's scale or of
    such a Cast: the float value put back together from an integer product."""
    sources = node_inputs(node, producer)
    if node.op_type == "Cast":
        return any(source.op_type in INTEGER_OUT for source in sources)
    return node.op_type == "Mul" and any(
        source.op_type == "DynamicQuantizeLinear" or (
            source.op_type in ("Cast", "Mul") and _dequantizes(source, producer))
        for source in sources)


def graph_roles(graph: Any) -> dict[str, str]:
    """{node name: role} where the graph (an ONNX ``GraphProto``) tells more than the op type:
    each MatMul's (attention or projection), a decomposed layer norm's, dequantization's."""
    live = _activations(graph)
    weights = {tensor.name for tensor in graph.initializer}
    producer, consumers = _wiring(graph)
    roles: dict[str, str] = {}
    for node in graph.node:
        if node.op_type in MATMULS:
            roles[node.name] = _matmul_role(node, live)
        elif node.op_type == "ReduceMean":
            roles.update({part.name: "layernorm" for part in _layernorm(
                node, producer, consumers, live)})
        elif _dequantizes(node, producer):
            roles[node.name] = "quantize"
        elif node.op_type == "Gather" and node.input[0] in weights and node.input[1] in live:
            roles[node.name] = "embedding"  # rows of a weight table, picked by the tokens
    return roles


def row_role(row: LayerTime, roles: dict[str, str] | None) -> str:
    """The role of one profiled node: the graph's where it names the node, else its op's."""
    found = (roles or {}).get(row.name)
    return found or op_role(row.op_type, row.precision)


def breakdown(profile: Profile, roles: dict[str, str] | None) -> dict[str, Any]:
    """Per role, in ``ROLES`` order: its ms per inference, its share of the layer sum, its
    nodes and the kernels that ran it (op type and precision, with counts)."""
    spent: dict[str, dict[str, Any]] = {}
    for row in profile.layers:
        role = row_role(row, roles)
        entry = spent.setdefault(role, {"ms": 0.0, "nodes": 0, "kernels": defaultdict(int)})
        entry["ms"] += row.median_ms
        entry["nodes"] += 1
        entry["kernels"][f"{row.op_type} {row.precision}".strip()] += 1
    total = profile.layer_sum_ms or 1.0
    return {role: {"label": ROLES[role], "ms": spent[role]["ms"],
                   "share": spent[role]["ms"] / total, "nodes": spent[role]["nodes"],
                   "kernels": dict(sorted(spent[role]["kernels"].items(),
                                          key=lambda item: -item[1]))}
            for role in ROLES if role in spent}
