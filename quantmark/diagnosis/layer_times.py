"""Why isn't INT8 faster: one SUT's per-layer times against another's, in one vocabulary.

Each framework's ``profile`` module (``quantmark.sut.profiling``) hands a ``Profile`` in its own
names. Here the rows become layers: each compute node with the overhead the framework put
beside it (reorders, quantize/dequantize, converts, layout transposes are attributed to the
compute node they precede, or the last one for trailing ones); two profiles' layers are paired
by graph position (the run of op kinds aligned as a diff aligns lines, names first where both
have them, as the accuracy diagnosis pairs layers); and the answers follow: time per layer in
each SUT and the ratio, the shares of INT8 compute, float compute and overhead, the layers where
the test is slower ranked by milliseconds lost, and whether the per-layer sum adds up to the
end-to-end time measured in the same loop.

One vocabulary: given the canonical ONNX model's nodes (``GraphNode``, the FP32 ONNX every SUT
of the run is made from), each framework's layers are first mapped onto them with the same
matching (a framework's name that starts with an ONNX node's or tensor's name, then the run of
op kinds), so ORT, OpenVINO, TFLite and torch rows of one ONNX layer pair with each other.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from quantmark.diagnosis.layer_errors import op_kind
from quantmark.ground.config import WorkloadFields
from quantmark.sut.profiling import OVERCOUNTED, UNATTRIBUTED, LayerTime, Profile

SUM_TOLERANCE = 0.10  # the per-layer sum within 10% of the end-to-end time
INT8 = ("int8", "uint8")
#: canonical-graph nodes that are never a layer a profiler times on its own
_NOT_NODES = frozenset({"Constant", "QuantizeLinear", "DequantizeLinear"})


@dataclass
class Layer:
    """A compute node of the executed model, with the overhead attributed to it."""

    name: str
    op_type: str
    kernel: str
    precision: str
    compute_ms: float
    overhead: list[LayerTime] = field(default_factory=list)
    #: the canonical ONNX node this layer computes ("" where none was found or none given)
    onnx_layer: str = ""

    @property
    def overhead_ms(self) -> float:
        return sum(row.median_ms for row in self.overhead)

    @property
    def total_ms(self) -> float:
        return self.compute_ms + self.overhead_ms


def layers(profile: Profile) -> list[Layer]:
    """The profile's compute rows in order, each carrying the overhead rows before it (trailing
    overhead goes to the last compute row); "other" rows are left out."""
    found: list[Layer] = []
    pending: list[LayerTime] = []
    for row in profile.layers:
        if row.category == "overhead":
            pending.append(row)
        elif row.category == "compute":
            found.append(Layer(row.name, row.op_type, row.kernel, row.precision,
                               row.median_ms, pending))
            pending = []
    if pending and found:
        found[-1].overhead.extend(pending)
    return found


def shares(profile: Profile) -> dict[str, float]:
    """Where the time goes: INT8 compute, float compute, overhead and other, as fractions of
    the per-layer sum; and how much of the model is INT8 (compute nodes, and their time)."""
    total = profile.layer_sum_ms or 1.0
    compute = [row for row in profile.layers if row.category == "compute"]
    int8 = [row for row in compute if row.precision in INT8]
    spent = {"int8_compute": sum(r.median_ms for r in int8),
             "float_compute": sum(r.median_ms for r in compute if r.precision not in INT8),
             "overhead": sum(r.median_ms for r in profile.layers if r.category == "overhead"),
             "other": sum(r.median_ms for r in profile.layers if r.category == "other")}
    result = {f"{key}_share": value / total for key, value in spent.items()}
    result["int8_nodes"] = len(int8) / len(compute) if compute else 0.0
    compute_ms = spent["int8_compute"] + spent["float_compute"]
    result["int8_compute_time"] = spent["int8_compute"] / compute_ms if compute_ms else 0.0
    return result


def sum_check(profile: Profile, tolerance: float = SUM_TOLERANCE) -> dict[str, object]:
    """Does the per-layer sum add up to the end-to-end time of the same loop? What is left is
    named: the framework's own work between nodes (scheduling, input and output copies)."""
    total, whole = profile.layer_sum_ms, profile.end_to_end_ms
    gap = whole - total
    ratio = total / whole if whole else 0.0
    return {"layer_sum_ms": total, "end_to_end_ms": whole, "ratio": ratio,
            "within": abs(1.0 - ratio) <= tolerance,
            "unattributed_ms": gap,
            "unattributed": (
                profile.notes.get(UNATTRIBUTED,
                                  "framework work between nodes (scheduling, input/output copies)")
                if gap >= 0 else
                profile.notes.get(OVERCOUNTED, "nodes timed in parallel overlap (threads)"))}


@dataclass
class Row:
    """One layer in both SUTs (either side None where only one has it)."""

    test: Layer | None
    reference: Layer | None
    matched_by: str

    @property
    def onnx_layer(self) -> str:
        """The canonical ONNX node of the pair ("" where neither side was mapped)."""
        return (self.test and self.test.onnx_layer) or (
            self.reference and self.reference.onnx_layer) or ""

    @property
    def ms_lost(self) -> float:
        """Milliseconds the test spends on this layer beyond the reference."""
        return (self.test.total_ms if self.test else 0.0) - (
            self.reference.total_ms if self.reference else 0.0)

    @property
    def ratio(self) -> float | None:
        if not self.test or not self.reference or not self.reference.total_ms:
            return None
        return self.test.total_ms / self.reference.total_ms


def _align(named: list[tuple[int, int]], mine: Sequence[str], theirs: Sequence[str],
           how: str) -> dict[int, tuple[int, str]]:
    """``named`` pairs (in order of both), then, between them, the op-kind runs ``mine`` and
    ``theirs`` aligned as a diff aligns lines (``difflib``): index in mine -> (index, how)."""
    paired = {i: (j, how) for i, j in named}
    bounds = [(-1, -1), *named, (len(mine), len(theirs))]
    for (i0, j0), (i1, j1) in zip(bounds, bounds[1:], strict=False):
        aligner = difflib.SequenceMatcher(None, mine[i0 + 1:i1], theirs[j0 + 1:j1],
                                          autojunk=False)
        for block in aligner.get_matching_blocks():
            for k in range(block.size):
                paired[i0 + 1 + block.a + k] = (j0 + 1 + block.b + k, "position")
    return paired


def _in_order(found: Sequence[Layer], lookup: Callable[[Layer], int | None],
              repeat: bool = False) -> list[tuple[int, int]]:
    """(i, j) for each layer ``lookup`` finds at j, kept where j runs forward (graph order
    agrees; ``repeat``: several layers may find the same j)."""
    named: list[tuple[int, int]] = []
    for i, layer in enumerate(found):
        j = lookup(layer)
        if j is not None and (not named or j > named[-1][1] or (repeat and j == named[-1][1])):
            named.append((i, j))
    return named


def compare(test: Profile, reference: Profile,
            graph: Sequence[GraphNode] | None = None) -> list[Row]:
    """Pair the two profiles' layers: by name where both have it (in order), then, between
    named pairs, by position in the run of op kinds (``difflib``), so a layer one model has and
    the other lacks (fused away, added) shifts nothing after it. With the canonical ONNX
    ``graph``, each side is first mapped onto it (``to_graph``) and the ONNX node is the name."""
    mine, theirs = layers(test), layers(reference)
    how = "name"
    if graph is not None:
        mine, theirs = merged(to_graph(mine, graph)), merged(to_graph(theirs, graph))
        how = "onnx layer"
    key = (lambda layer: layer.onnx_layer) if graph is not None else (lambda layer: layer.name)
    index: dict[str, int] = {}
    for j, layer in enumerate(theirs):
        if key(layer):
            index.setdefault(key(layer), j)

    def lookup(layer: Layer) -> int | None:
        j = index.get(key(layer)) if key(layer) else None
        if j is None or (graph is None and kind(theirs[j].op_type) != kind(layer.op_type)):
            return None
        return j

    paired = _align(_in_order(mine, lookup), [kind(x.op_type) for x in mine],
                    [kind(x.op_type) for x in theirs], how)
    taken = {j for j, _ in paired.values()}
    rows = [Row(layer, theirs[paired[i][0]] if i in paired else None,
                paired[i][1] if i in paired else "test only") for i, layer in enumerate(mine)]
    rows += [Row(None, layer, "reference only") for j, layer in enumerate(theirs)
             if j not in taken]
    return rows


def slower(rows: Sequence[Row], k: int = 10) -> list[Row]:
    """The layers where the test is slower than the reference, most milliseconds lost first."""
    return sorted((row for row in rows if row.ms_lost > 0), key=lambda r: -r.ms_lost)[:k]


# --------------------------------------------------------------------------- one vocabulary

#: op kinds beyond ``op_kind``'s, so framework names of one computation compare equal
#: (OpenVINO's FullyConnected, torch's addmm and aten ops, LiteRT's upper-case builtins)
#: in order: a fused kernel (torch's conv2d_relu, linear_relu) is its conv or matmul, not its
#: activation
_MORE_KINDS = (("conv", ("conv",)),
               ("matmul", ("fullyconnected", "addmm", "aten::mm", "dense", "linear", "matmul",
                           "gemm")),
               ("reshape", ("reshape", "flatten", "view", "squeeze")),
               ("act", ("relu", "clip", "sigmoid", "swish", "tanh", "gelu", "hardtanh")))
#: what a profiler puts before a node's own name (ORT's fused nodes: "fused Conv_3")
_PREFIXES = ("fused ",)


def kind(op_type: str) -> str:
    """The kind of computation ``op_type`` names, comparable across frameworks (``op_kind``
    of the accuracy diagnosis, with a few more spellings)."""
    lower = op_type.lower().replace("_", "")
    found = next((k for k, words in _MORE_KINDS if any(w in lower for w in words)), None)
    return found or op_kind(op_type)


@dataclass
class GraphNode:
    """A compute node of the canonical ONNX model (an activation that is its only consumer
    folded in, as the accuracy diagnosis folds it) and the names a framework may call it by:
    its node and output names and the folded activation's."""

    name: str
    op_type: str
    aliases: tuple[str, ...]


def graph_nodes(proto: Any) -> list[GraphNode]:
    """The compute nodes of an ONNX model in graph (topological) order, each activation that
    is its producer's only consumer folded into it, as the accuracy diagnosis folds it
    (``models.onnx_layers.graph_layers``)."""
    from quantmark.models.onnx_layers import graph_layers

    owner = {alias: layer.name for layer in graph_layers(proto) for alias in layer.aliases}
    nodes: dict[str, GraphNode] = {}
    for node in proto.graph.node:
        if node.op_type in _NOT_NODES:
            continue
        name = node.name or node.output[0]
        into = nodes.get(owner.get(name, name))
        if into is not None and into.name != name:
            into.aliases += (name, *node.output)
            continue
        nodes[name] = GraphNode(name, node.op_type, (name, *node.output))
    return list(nodes.values())


def canonical_graph(config: WorkloadFields, spec: Any) -> tuple[list[GraphNode] | None, str]:
    """The canonical FP32 ONNX model's nodes and its path (of the model a profile or a
    diagnosis runs); None and why where the model is not one (an OpenVINO, LiteRT or SavedModel
    ``--model-path``): rows keep their names."""
    import onnx

    from quantmark.models.source import fp32_onnx, is_torch_weights
    from quantmark.models.text_graph import is_text, text_artifact

    path = config.model_path
    if path and not (str(path).endswith(".onnx") or is_torch_weights(path)):
        return None, f"--model-path {path} is not ONNX: layers keep their frameworks' names"
    artifact = (text_artifact(path, spec, f"model {spec.name}: --model-path {path}")
                if is_text(spec) else fp32_onnx(spec, path))
    return graph_nodes(onnx.load(str(artifact.path), load_external_data=False)), \
        str(artifact.path)


def _graph_index(graph: Sequence[GraphNode]) -> dict[str, int]:
    index: dict[str, int] = {}
    for j, node in enumerate(graph):
        for alias in (node.name, *node.aliases):
            index.setdefault(alias, j)
    return index


def named_node(name: str, index: dict[str, int]) -> int | None:
    """The ONNX node a framework's ``name`` names: the longest alias that ``name`` is or
    starts with, up to a non-alphanumeric character (ORT's ``node_conv2d_token_1``,
    ``relu_nchwc``; OpenVINO's ``node_conv2d/WithoutBiases``), or None."""
    for prefix in _PREFIXES:
        name = name.removeprefix(prefix)
    for end in range(len(name), 0, -1):
        if (end == len(name) or not name[end].isalnum()) and name[:end] in index:
            return index[name[:end]]
    return None


def to_graph(found: list[Layer], graph: Sequence[GraphNode]) -> list[Layer]:
    """Set each layer's ``onnx_layer``: by name where the framework kept the ONNX names (those
    in graph order anchor the rest; a branch the framework runs in another order than the file,
    such as a residual's downsample, still keeps its own name), then, between named layers, by
    the run of op kinds (``difflib``), never onto a node another layer names; an activation
    left over belongs to the layer before it (ONNX folds it there). Returns ``found``."""
    index = _graph_index(graph)
    direct = [named_node(layer.name, index) for layer in found]
    claimed = {j for j in direct if j is not None}
    named = _in_order(found, lambda layer: named_node(layer.name, index), repeat=True)
    paired = _align(named, [kind(x.op_type) for x in found], [kind(n.op_type) for n in graph],
                    "name")
    for i, layer in enumerate(found):
        j = direct[i]
        if j is None and i in paired and paired[i][0] not in claimed:
            j = paired[i][0]
        layer.onnx_layer = graph[j].name if j is not None else ""
        if not layer.onnx_layer and i and kind(layer.op_type) == "act":
            layer.onnx_layer = found[i - 1].onnx_layer
    return found


def merged(found: list[Layer]) -> list[Layer]:
    """One layer per ONNX node (several a framework runs for one node, e.g. a conv and its
    unfused ReLU, summed where the first of them is); unmapped layers stay as they are."""
    out: list[Layer] = []
    first: dict[str, Layer] = {}
    for layer in found:
        into = first.get(layer.onnx_layer) if layer.onnx_layer else None
        if into is None:
            copy = Layer(layer.name, layer.op_type, layer.kernel, layer.precision,
                         layer.compute_ms, list(layer.overhead), layer.onnx_layer)
            out.append(copy)
            if layer.onnx_layer:
                first[layer.onnx_layer] = copy
            continue
        into.name += f"+{layer.name}"
        into.compute_ms += layer.compute_ms
        into.overhead.extend(layer.overhead)
        if layer.precision and layer.precision not in into.precision.split("/"):
            into.precision = "/".join(filter(None, (into.precision, layer.precision)))
    return out


@dataclass
class Column:
    """One SUT's layer in the side-by-side table (None where it has none there)."""

    label: str
    layer: Layer | None


def side_by_side(test: Profile, references: Sequence[Profile],
                 graph: Sequence[GraphNode] | None = None) -> list[tuple[str, list[Column]]]:
    """Every SUT's time of each layer in one row: (ONNX node, or the test's own name where
    none, and one column per SUT, the test first), in the test's order; a layer only some
    references have follows, under their name for it."""
    keyed: dict[str, dict[str, Layer]] = {}
    for reference in references:
        for row in compare(test, reference, graph):
            layer = row.test or row.reference
            key = row.onnx_layer or (f"{layer.name} ({reference.sut} only)"
                                     if row.test is None else layer.name)
            found = keyed.setdefault(key, {})
            if row.test is not None:
                found[test.sut] = row.test
            if row.reference is not None:
                found[reference.sut] = row.reference
    labels = [test.sut, *(reference.sut for reference in references)]
    return [(key, [Column(label, found.get(label)) for label in labels])
            for key, found in keyed.items()]
