"""An ONNX graph's layers as run.py diagnose compares them, on hand-made graphs."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from quantmark.models.onnx_layers import graph_layers, layer_names, with_outputs


def _graph(quantized: bool) -> onnx.ModelProto:
    """conv1 -> Clip -> [Q -> DQ] -> MaxPool -> Reshape -> conv2 (+ a skip Add)."""
    init = [numpy_helper.from_array(np.ones((2, 3, 1, 1), np.float32), "w1"),
            numpy_helper.from_array(np.ones((2, 2, 1, 1), np.float32), "w2"),
            numpy_helper.from_array(np.array(0.1, np.float32), "s"),
            numpy_helper.from_array(np.array(0, np.uint8), "z"),
            numpy_helper.from_array(np.array([1, 2, 2, 2], np.int64), "shape")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1"),
             helper.make_node("Clip", ["c1"], ["relu"], name="clip1")]
    feed = "relu"
    if quantized:
        nodes += [helper.make_node("QuantizeLinear", ["relu", "s", "z"], ["q"], name="q1"),
                  helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"], name="dq1")]
        feed = "dq"
    nodes += [helper.make_node("MaxPool", [feed], ["p"], name="pool", kernel_shape=[1, 1]),
              helper.make_node("Reshape", ["p", "shape"], ["r"], name="reshape"),
              helper.make_node("Conv", ["r", "w2"], ["c2"], name="conv2"),
              helper.make_node("Add", ["c2", "r"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 2, 2])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], init)
    return helper.make_model(graph)


def test_an_activation_is_folded_and_its_qdq_pair_is_read():
    for quantized, read in ((False, "relu"), (True, "dq")):
        layers = graph_layers(_graph(quantized))
        assert [(layer.name, layer.op_type) for layer in layers] == [
            ("conv1", "Conv"), ("pool", "MaxPool"), ("conv2", "Conv"), ("add", "Add")]
        assert layers[0].tensor == read  # after the Clip (and the Q/DQ pair): what pool sees
        assert layers[2].inputs == ("pool",)  # through the Reshape
        assert layers[3].inputs == ("conv2", "pool")
        assert "clip1" in layers[0].aliases and "relu" in layers[0].aliases


def test_added_outputs_and_names(tmp_path):
    proto = _graph(True)
    extended = with_outputs(proto, ["dq", "y"])
    assert [o.name for o in extended.graph.output] == ["y", "dq"]  # y was one already
    assert [o.name for o in proto.graph.output] == ["y"]  # the original is untouched
    path = tmp_path / "m.onnx"
    onnx.save(proto, str(path))
    assert layer_names(path) == ["conv1", "pool", "conv2", "add"]
