"""The ONNX rewrite made before onnx2tf: max pools after a ReLU pad with 0, not -inf."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from quantmark.models.saved_model import zero_pad_maxpools_after_relu


def stem(first_op: str) -> onnx.ModelProto:
    """conv -> (Relu | Sigmoid) -> MaxPool(3, stride 2, pads 1): ResNet's stem in miniature."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.normal(size=(4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node(first_op, ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes, "stem", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 9, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 5, 5])], initializer=[weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]


def test_maxpool_after_relu_pads_with_zero_and_computes_the_same():
    model = stem("Relu")
    x = np.random.default_rng(1).normal(size=(2, 3, 9, 9)).astype(np.float32)
    before = run(model, x)
    assert zero_pad_maxpools_after_relu(model) == 1
    onnx.checker.check_model(model)
    ops = [node.op_type for node in model.graph.node]
    assert ops == ["Conv", "Relu", "Pad", "MaxPool"]
    pool = model.graph.node[-1]
    assert list(next(a.ints for a in pool.attribute if a.name == "pads")) == [0, 0, 0, 0]
    np.testing.assert_array_equal(run(model, x), before)
    assert zero_pad_maxpools_after_relu(model) == 0  # nothing left to rewrite


def test_maxpool_on_signed_input_is_left_alone():
    """Without a ReLU before it a window may hold only negatives: 0 padding would change it."""
    model = stem("Sigmoid")
    model.graph.node[1].op_type = "Neg"  # negative values reach the pool
    assert zero_pad_maxpools_after_relu(model) == 0
    assert [node.op_type for node in model.graph.node] == ["Conv", "Neg", "MaxPool"]
