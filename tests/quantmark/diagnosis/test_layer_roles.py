"""A transformer's nodes by role, read from the graph (hand-built ONNX graphs, named so that no
name gives a role away): attention is the MatMul of two activations, a projection the MatMul
of a weight, a decomposed layer norm is told by its shape, dequantization by what it rescales;
and a profile's time adds up by role."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from quantmark.diagnosis import layer_roles
from quantmark.sut.profiling import LayerTime, Profile


def _weight(name: str, shape: tuple[int, ...] = (4, 4)) -> object:
    return numpy_helper.from_array(np.ones(shape, np.float32), name)


def _graph(nodes: list, weights: list) -> object:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])
    out = helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)
    return helper.make_graph(nodes, "g", [x, ids], [out], weights)


def test_attention_is_the_matmul_of_two_activations_a_projection_that_of_a_weight() -> None:
    nodes = [helper.make_node("MatMul", ["x", "w_q"], ["q"], name="n1"),
             helper.make_node("MatMul", ["x", "w_k"], ["k"], name="n2"),
             helper.make_node("Transpose", ["w_k"], ["w_t"], name="n3"),  # a weight still
             helper.make_node("MatMul", ["q", "w_t"], ["p"], name="n4"),
             helper.make_node("FusedMatMul", ["q", "k"], ["s"], name="n5", domain="com.microsoft"),
             helper.make_node("Softmax", ["s"], ["a"], name="n6"),
             helper.make_node("MatMul", ["a", "p"], ["o"], name="n7"),
             helper.make_node("QLinearMatMul", ["o", "sa", "za", "w_q8", "sw", "zw", "sy", "zy"],
                              ["y"], name="n8")]
    roles = layer_roles.graph_roles(_graph(nodes, [_weight("w_q"), _weight("w_k"),
                                                   _weight("w_q8")]))
    assert roles == {"n1": "linear", "n2": "linear", "n4": "linear", "n5": "attention",
                     "n7": "attention", "n8": "linear"}
    assert layer_roles.op_role("Softmax") == "softmax"
    assert layer_roles.op_role("Transpose", "fp32") == "layout"


def test_a_decomposed_layer_norm_is_told_by_its_shape_a_mean_pool_is_not() -> None:
    eps, two = _weight("eps", ()), _weight("two", ())
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], name="a1", axes=[-1]),
             helper.make_node("Sub", ["x", "m"], ["c"], name="a2"),
             helper.make_node("Pow", ["c", "two"], ["p"], name="a3"),
             helper.make_node("ReduceMean", ["p"], ["v"], name="a4", axes=[-1]),
             helper.make_node("Add", ["v", "eps"], ["ve"], name="a5"),
             helper.make_node("Sqrt", ["ve"], ["sd"], name="a6"),
             helper.make_node("Div", ["c", "sd"], ["n"], name="a7"),
             helper.make_node("Mul", ["n", "gamma"], ["g"], name="a8"),
             helper.make_node("Add", ["g", "beta"], ["ln"], name="a9"),
             helper.make_node("Add", ["ln", "x"], ["r"], name="a10"),  # the residual: not it
             helper.make_node("ReduceMean", ["r"], ["pooled"], name="a11", axes=[1])]
    roles = layer_roles.graph_roles(_graph(nodes, [eps, two, _weight("gamma", (4,)),
                                                   _weight("beta", (4,))]))
    assert roles == {f"a{i}": "layernorm" for i in range(1, 10)}


def test_dequantization_and_embedding_lookups_are_read_from_the_graph() -> None:
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="g1"),
             helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="d1"),
             helper.make_node("MatMulInteger", ["xq", "w8", "xz"], ["acc"], name="d2"),
             helper.make_node("Cast", ["acc"], ["accf"], name="d3", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["xs", "ws"], ["scale"], name="d4"),
             helper.make_node("Mul", ["accf", "scale"], ["y"], name="d5"),
             helper.make_node("Add", ["y", "e"], ["z"], name="d6")]
    weights = [_weight("table", (10, 4)), _weight("w8"), _weight("ws", (4,))]
    roles = layer_roles.graph_roles(_graph(nodes, weights))
    assert roles == {"g1": "embedding", "d2": "linear", "d3": "quantize", "d4": "quantize",
                     "d5": "quantize"}
    assert layer_roles.op_role("DynamicQuantizeLinear") == "quantize"
    assert layer_roles.op_role("Cast") == "cast" and layer_roles.op_role("Add") == "elementwise"
    assert layer_roles.op_role("Unsqueeze", "int64") == "shape"  # shape and mask arithmetic


def test_a_profile_adds_up_by_role_with_its_kernels() -> None:
    rows = [LayerTime("q", "MatMulIntegerToFloat", "", "int8", "compute", 2.0),
            LayerTime("s", "FusedMatMul", "", "fp32", "compute", 1.0),
            LayerTime("k", "DynamicQuantizeMatMul", "", "int8", "compute", 3.0),
            LayerTime("sm", "Softmax", "", "fp32", "compute", 0.5),
            LayerTime("dq", "DynamicQuantizeLinear", "", "fp32", "overhead", 0.25),
            LayerTime("ln", "SkipLayerNormalization", "", "fp32", "compute", 0.25)]
    profile = Profile("ort-int8dyn", "onnxruntime", 1, 5, rows, 8.0, "test")
    found = layer_roles.breakdown(profile, {"q": "linear", "s": "attention", "k": "linear"})
    assert list(found) == ["attention", "softmax", "linear", "layernorm", "quantize"]
    assert found["linear"]["ms"] == 5.0 and found["linear"]["share"] == 5.0 / 7.0
    assert found["linear"]["kernels"] == {"DynamicQuantizeMatMul int8": 1,
                                          "MatMulIntegerToFloat int8": 1}
    without = layer_roles.breakdown(profile, None)  # no graph: every MatMul a projection
    assert "attention" not in without and without["linear"]["nodes"] == 3
