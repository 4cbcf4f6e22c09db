"""An ONNX graph's layers, as ``run.py diagnose`` compares them (shared by ONNX Runtime and
TensorRT, which both run the canonical ONNX: each framework folder reads it from here).

A layer is a compute node together with an activation that is its only consumer (the export's
``Conv -> Clip`` is one layer: ``quant_pre_process`` fuses the pair and the INT8 model keeps the
conv's node name). Its value is what the next layer sees: in a QDQ model the output of the
DequantizeLinear after the layer's QuantizeLinear.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import onnx

__all__ = ["ACTIVATIONS", "PASS_THROUGH", "GraphLayer", "graph_layers", "layer_names",
           "with_outputs"]

#: nodes that move or relabel values: never a layer, traced through to find a producer
PASS_THROUGH = frozenset({"QuantizeLinear", "DequantizeLinear", "Reshape", "Flatten", "Squeeze",
                          "Unsqueeze", "Transpose", "Identity", "Cast", "Shape", "Gather",
                          "Constant", "ConstantOfShape", "Slice"})
#: elementwise activations folded into the layer they follow
ACTIVATIONS = frozenset({"Clip", "Relu", "Sigmoid", "HardSigmoid", "HardSwish", "LeakyRelu",
                         "Tanh", "Elu", "Selu", "Gelu", "Softplus", "PRelu"})


@dataclass
class GraphLayer:
    name: str
    op_type: str
    tensor: str  # the tensor read: what the next layer sees
    inputs: tuple[str, ...]
    #: what ONNX Runtime may call the node it runs: its name, or after fusing (Conv + Relu ->
    #: FusedConv, NCHWc layouts) its output tensor's name
    aliases: list[str]


def _consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    found: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            found.setdefault(name, []).append(node)
    return found


def _seen_downstream(tensor: str, consumers: dict[str, list[onnx.NodeProto]]) -> str:
    """``tensor``, or the DequantizeLinear output its QuantizeLinear -> DequantizeLinear pair
    hands on (the value the next layer computes with)."""
    users = consumers.get(tensor, [])
    if len(users) == 1 and users[0].op_type == "QuantizeLinear":
        after = consumers.get(users[0].output[0], [])
        if len(after) == 1 and after[0].op_type == "DequantizeLinear":
            return after[0].output[0]
    return tensor


def graph_layers(proto: onnx.ModelProto) -> list[GraphLayer]:
    """The model's layers in graph (topological) order, each with its producing layers."""
    graph = proto.graph
    consumers = _consumers(graph)
    initializers = {tensor.name for tensor in graph.initializer}
    producer: dict[str, str] = {}  # tensor -> the layer behind it (through pass-throughs)
    output_of: dict[str, GraphLayer] = {}  # a layer's own output tensor -> the layer
    layers: list[GraphLayer] = []
    for node in graph.node:
        sources = tuple(dict.fromkeys(producer[name] for name in node.input
                                      if name in producer and name not in initializers))
        if node.op_type in PASS_THROUGH:
            for out in node.output:
                if sources:
                    producer[out] = sources[0]
            continue
        owner = output_of.get(node.input[0]) if node.input else None
        if (node.op_type in ACTIVATIONS and owner is not None
                and len(consumers.get(node.input[0], [])) == 1):
            owner.tensor = _seen_downstream(node.output[0], consumers)
            owner.aliases += [node.name, node.output[0]]
            output_of[node.output[0]] = owner
            producer[node.output[0]] = owner.name
            continue
        name = node.name or node.output[0]
        layer = GraphLayer(name, node.op_type, _seen_downstream(node.output[0], consumers), sources,
                       [name, node.output[0]])
        layers.append(layer)
        output_of[node.output[0]] = layer
        for out in node.output:
            producer[out] = name
    return layers


def with_outputs(proto: onnx.ModelProto, tensors: Iterable[str]) -> onnx.ModelProto:
    """A copy of ``proto`` whose graph also outputs ``tensors`` (intermediate values)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    existing = {output.name for output in copy.graph.output}
    for tensor in tensors:
        if tensor not in existing:
            copy.graph.output.append(onnx.helper.make_tensor_value_info(
                tensor, onnx.TensorProto.FLOAT, None))
    return copy


def layer_names(path: str | Path) -> list[str]:
    """The layer names of an ONNX model, as ``graph_layers`` names them."""
    return [layer.name for layer in graph_layers(onnx.load(str(path), load_external_data=False))]
