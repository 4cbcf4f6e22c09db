"""Per-layer times in one vocabulary: overhead attributed to its layer, two profiles paired by
graph position, every framework's rows mapped onto the canonical ONNX layers and set side by
side, the shares, the sum check, and a planted slow layer ranked first."""

from __future__ import annotations

import pytest

from quantmark.diagnosis.layer_times import (
    GraphNode,
    compare,
    layers,
    merged,
    named_node,
    shares,
    side_by_side,
    slower,
    sum_check,
    to_graph,
)
from quantmark.sut.profiling import LayerTime, Profile, median_ms


def row(name: str, op: str, ms: float, precision: str = "fp32", category: str = "compute",
        kernel: str = "k") -> LayerTime:
    return LayerTime(name, op, kernel, precision, category, ms)


def profile(rows: list[LayerTime], end_to_end: float, sut: str = "x-int8") -> Profile:
    return Profile(sut=sut, framework="x", batch_size=1, iterations=10, layers=rows,
                   end_to_end_ms=end_to_end, method="synthetic")


def fp32() -> Profile:
    return profile([row("input", "Parameter", 0.01, "", "other"),
                    row("conv1", "Conv", 1.0), row("relu1", "Relu", 0.1),
                    row("conv2", "Conv", 2.0), row("pool", "GlobalAveragePool", 0.2),
                    row("fc", "Gemm", 0.5)], 3.9, "x-fp32")


def int8(slow_conv2: float = 0.8) -> Profile:
    """Quantized convs and fc, a quantize/dequantize pair around conv2, a fused-away relu."""
    return profile([row("input", "Parameter", 0.01, "", "other"),
                    row("q0", "QuantizeLinear", 0.05, "int8", "overhead"),
                    row("conv1_q", "QLinearConv", 0.4, "int8"),
                    row("reorder", "Reorder", 0.3, "fp32", "overhead"),
                    row("conv2_q", "QLinearConv", slow_conv2, "int8"),
                    row("dq", "DequantizeLinear", 0.05, "fp32", "overhead"),
                    row("pool", "GlobalAveragePool", 0.2),
                    row("fc_q", "QGemm", 0.2, "int8")], 2.1)


def test_overhead_is_attributed_to_the_layer_it_precedes() -> None:
    found = layers(int8())
    assert [layer.name for layer in found] == ["conv1_q", "conv2_q", "pool", "fc_q"]
    assert [r.name for r in found[0].overhead] == ["q0"]
    assert [r.name for r in found[1].overhead] == ["reorder"]
    assert found[1].total_ms == pytest.approx(0.3 + 0.8)
    assert [r.name for r in found[2].overhead] == ["dq"]


def test_layers_pair_by_position_across_names_and_a_fused_layer() -> None:
    rows = compare(int8(), fp32())
    pairs = {(r.test.name if r.test else None): (r.reference.name if r.reference else None)
             for r in rows}
    assert pairs["conv1_q"] == "conv1" and pairs["conv2_q"] == "conv2"
    assert pairs["fc_q"] == "fc" and pairs["pool"] == "pool"
    assert pairs[None] == "relu1"  # the ReLU INT8 fused away is the reference's only
    matched = {r.test.name: r.matched_by for r in rows if r.test}
    assert matched["pool"] == "name" and matched["conv1_q"] == "position"


def test_a_planted_slow_layer_is_ranked_first() -> None:
    ranked = slower(compare(int8(slow_conv2=5.0), fp32()))
    assert ranked[0].test.name == "conv2_q"
    assert ranked[0].ms_lost == pytest.approx(5.0 + 0.3 - 2.0)
    assert ranked[0].ratio == pytest.approx(5.3 / 2.0)
    # nothing slower: nothing ranked
    assert slower(compare(fp32(), fp32())) == []


def test_shares_say_how_much_is_int8_and_what_the_overhead_costs() -> None:
    got = shares(int8())
    total = 0.01 + 0.05 + 0.4 + 0.3 + 0.8 + 0.05 + 0.2 + 0.2
    assert got["int8_compute_share"] == pytest.approx((0.4 + 0.8 + 0.2) / total)
    assert got["overhead_share"] == pytest.approx(0.4 / total)
    assert got["float_compute_share"] == pytest.approx(0.2 / total)
    assert got["int8_nodes"] == pytest.approx(3 / 4)
    assert sum(v for k, v in got.items() if k.endswith("_share")) == pytest.approx(1.0)


def test_the_sum_check_names_what_is_left() -> None:
    check = sum_check(int8())
    assert check["within"] and check["unattributed_ms"] == pytest.approx(2.1 - 2.01)
    far = sum_check(profile(int8().layers, 4.0))
    assert not far["within"] and "between nodes" in far["unattributed"]


def test_median_of_iteration_times() -> None:
    assert median_ms([0.003, 0.001, 0.002]) == pytest.approx(2.0)
    assert median_ms([0.001, 0.002, 0.003, 0.004]) == pytest.approx(2.5)
    assert median_ms([]) == 0.0


# ------------------------------------------------------------------ one vocabulary: ONNX layers

def graph() -> list[GraphNode]:
    """conv1 (+relu1 folded), conv2, pool, a reshape, fc: as ``graph_nodes`` lists them."""
    return [GraphNode("conv1", "Conv", ("conv1", "c1", "relu1", "r1")),
            GraphNode("conv2", "Conv", ("conv2", "c2")),
            GraphNode("pool", "GlobalAveragePool", ("pool", "p")),
            GraphNode("flat", "Reshape", ("flat", "f")),
            GraphNode("fc", "Gemm", ("fc", "logits"))]


def test_framework_names_map_to_the_onnx_node_they_start_with() -> None:
    index = {alias: j for j, node in enumerate(graph()) for alias in node.aliases}
    assert named_node("conv2_token_4", index) == 1  # ORT's QLinearConv of conv2
    assert named_node("r1_nchwc", index) == 0  # ORT's fused conv1+relu1, by its output
    assert named_node("fused fc", index) == 4
    assert named_node("conv2/WithoutBiases", index) == 1  # OpenVINO
    assert named_node("conv22", index) is None  # a prefix must end at a separator
    assert named_node("aten::conv2d", index) is None


def test_rows_of_every_framework_map_to_onnx_layers_by_name_then_position() -> None:
    ort = to_graph(layers(profile([row("r1_nchwc", "Conv", 1.0), row("conv2_token_4",
                                                                     "QLinearConv", 1.0),
                                   row("pool", "GlobalAveragePool", 0.1),
                                   row("fused fc", "FusedGemm", 0.2)], 3)), graph())
    assert [x.onnx_layer for x in ort] == ["conv1", "conv2", "pool", "fc"]
    # torch: no ONNX names; its ops align by kind; an unfused ReLU joins its conv's layer
    torch = to_graph(layers(profile([row("aten::conv2d", "aten::conv2d", 1.0),
                                     row("aten::relu", "aten::relu", 0.1),
                                     row("aten::conv2d#2", "aten::conv2d", 1.0),
                                     row("aten::mean", "aten::mean", 0.1),
                                     row("aten::view", "aten::view", 0.0),
                                     row("aten::addmm", "aten::addmm", 0.2)], 3)), graph())
    assert [x.onnx_layer for x in torch] == ["conv1", "conv1", "conv2", "", "flat", "fc"]
    joined = merged(torch)
    assert [x.onnx_layer for x in joined] == ["conv1", "conv2", "", "flat", "fc"]
    assert joined[0].name == "aten::conv2d+aten::relu"
    assert joined[0].compute_ms == pytest.approx(1.1)


def test_a_branch_run_out_of_the_files_order_keeps_its_onnx_name() -> None:
    """OpenVINO runs a residual's downsample conv after the main branch's first conv, where
    the ONNX file lists it before: it keeps its own node, and no other layer takes it."""
    branched = [GraphNode("conv1", "Conv", ("conv1",)), GraphNode("down", "Conv", ("down",)),
                GraphNode("conv2", "Conv", ("conv2",)), GraphNode("fc", "Gemm", ("fc",))]
    ov = to_graph(layers(profile([row("conv1/WithoutBiases", "Convolution", 1.0),
                                  row("conv2/WithoutBiases", "Convolution", 1.0),
                                  row("down/WithoutBiases", "Convolution", 0.5),
                                  row("fc", "FullyConnected", 0.2)], 3)), branched)
    assert [x.onnx_layer for x in ov] == ["conv1", "conv2", "down", "fc"]
    unnamed = to_graph(layers(profile([row("a", "Convolution", 1.0),
                                       row("conv2/WithoutBiases", "Convolution", 1.0),
                                       row("down/WithoutBiases", "Convolution", 0.5)], 3)),
                       branched)
    assert [x.onnx_layer for x in unnamed] == ["conv1", "conv2", "down"]


def test_profiles_pair_through_the_onnx_graph_and_sit_side_by_side() -> None:
    test = profile([row("conv1_token_1", "QLinearConv", 0.4, "int8"),
                    row("conv2_token_4", "QLinearConv", 3.0, "int8"),
                    row("pool", "GlobalAveragePool", 0.1),
                    row("fc_token_9", "QGemm", 0.2, "int8")], 3.8, "x-int8")
    ort = profile([row("r1_nchwc", "Conv", 1.0), row("c2_nchwc", "Conv", 2.0),
                   row("pool", "GlobalAveragePool", 0.1), row("fused fc", "FusedGemm", 0.2)],
                  3.4, "x-fp32")
    ov = profile([row("conv1/WithoutBiases", "Convolution", 0.5, "int8"),
                  row("relu1", "Relu", 0.05, "int8"),
                  row("conv2/WithoutBiases", "Convolution", 1.0, "int8"),
                  row("fc/WithoutBiases", "FullyConnected", 0.1, "int8")], 1.7, "y-int8")
    rows = compare(test, ort, graph())
    assert {r.onnx_layer: r.matched_by for r in rows} == {
        "conv1": "onnx layer", "conv2": "onnx layer", "pool": "onnx layer", "fc": "onnx layer"}
    first = slower(rows)[0]
    assert first.onnx_layer == "conv2" and first.ms_lost == pytest.approx(1.0)
    table = dict(side_by_side(test, [ort, ov], graph()))
    assert list(table) == ["conv1", "conv2", "pool", "fc"]
    conv1 = {column.label: column.layer for column in table["conv1"]}
    assert list(conv1) == ["x-int8", "x-fp32", "y-int8"]
    assert conv1["y-int8"].total_ms == pytest.approx(0.55)  # its relu joins the layer
    assert {c.label: c.layer for c in table["pool"]}["y-int8"] is None  # OV fused it away


def test_onnx_graph_nodes_of_a_real_model_fold_activations() -> None:
    import onnx

    from quantmark.diagnosis.layer_times import graph_nodes
    from tests.quantmark.diagnosis.planted_models import original_onnx

    nodes = graph_nodes(onnx.load(str(original_onnx())))
    assert [n.op_type for n in nodes] == ["Conv", "Conv", "MaxPool", "Reshape", "Gemm", "Gemm"]
    assert "node_relu" in nodes[0].aliases and "relu" in nodes[0].aliases
