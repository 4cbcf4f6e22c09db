"""A recovery priced in milliseconds, on plain data: candidate layers found among the profilers'
rows under each framework's names, their cost, the order by SQNR recovered per ms, and the
predicted latency of each curve point against the measured one."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from quantmark.diagnosis import judges, recovery, recovery_cost
from quantmark.diagnosis.layer_times import GraphNode
from quantmark.diagnosis.layer_times import layers as profile_layers
from quantmark.ground.errors import UserError
from quantmark.ground.metric import TOP1
from quantmark.sut.profiling import LayerTime, Profile


def _profile(sut: str, rows: list[tuple[str, str, str, float]]) -> Profile:
    """(name, op type, category, ms) rows -> a Profile."""
    return Profile(sut=sut, framework="f", batch_size=8, iterations=5,
                   layers=[LayerTime(name, op, "", "", category, ms)
                           for name, op, category, ms in rows],
                   end_to_end_ms=sum(row[3] for row in rows), method="m")


def _pair(name: str, op: str, lost: float) -> SimpleNamespace:
    return SimpleNamespace(name=name, op_type=op, lost_db=lost)


#: ONNX Runtime's names: ``_token_N`` on INT8 kernels, ``_nchwc`` output names and ``fused ``
#: prefixes on FP32's; the overhead before a node is its own
ORT_INT8 = _profile("ort-int8", [
    ("input_QuantizeLinear", "QuantizeLinear", "overhead", 0.5),
    ("node_conv2d_token_1", "QLinearConv", "compute", 2.0),
    ("node_conv2d_1_token_4", "QLinearConv", "compute", 3.0),
    ("node_max_pool2d_token_6", "NhwcMaxPool", "compute", 1.0),
    ("node_linear", "QGemm", "compute", 1.0),
    ("logits_DequantizeLinear", "DequantizeLinear", "overhead", 0.25)])
ORT_FP32 = _profile("ort-fp32", [
    ("relu_nchwc", "Conv", "compute", 2.0),
    ("relu_1_nchwc", "Conv", "compute", 6.0),
    ("max_pool2d_nchwc", "MaxPool", "compute", 1.5),
    ("fused node_linear", "FusedGemm", "compute", 0.75)])
DIGITS = [("node_conv2d", "Conv"), ("node_conv2d_1", "Conv"), ("node_max_pool2d", "MaxPool"),
          ("node_linear", "Gemm")]


def test_profiler_names_are_stripped_of_their_framework_decorations():
    assert recovery_cost.normal("node_conv2d_1_token_4") == "node_conv2d_1"
    assert recovery_cost.normal("relu_nchwc") == "relu"
    assert recovery_cost.normal("fused node_linear") == "node_linear"
    assert recovery_cost.normal("quantized::conv2d_relu#1") == "quantized::conv2d_relu"


def test_each_candidate_is_priced_from_its_own_rows_overhead_included():
    pairs = [_pair("node_conv2d_1", "Conv", 12.0), _pair("node_conv2d", "Conv", 3.0),
             _pair("node_linear", "Gemm", 1.0)]
    costs = {c.name: c for c in recovery_cost.costs(pairs, DIGITS, ORT_INT8, ORT_FP32)}
    # the stem's INT8 time carries the input's QuantizeLinear: 2.0 - (2.0 + 0.5)
    assert costs["node_conv2d"].cost_ms == pytest.approx(-0.5)
    assert costs["node_conv2d_1"].cost_ms == pytest.approx(3.0)
    assert (costs["node_conv2d_1"].int8_row, costs["node_conv2d_1"].float_row) == (
        "node_conv2d_1_token_4", "relu_1_nchwc")
    # the trailing DequantizeLinear is the last node's: 0.75 - (1.0 + 0.25)
    assert costs["node_linear"].cost_ms == pytest.approx(-0.5)
    assert all(c.matched_by == "name" for c in costs.values())
    assert costs["node_conv2d_1"].db_per_ms == pytest.approx(4.0)


def test_with_the_canonical_onnx_graph_candidates_are_its_nodes_and_pair_by_alias():
    graph = [GraphNode("node_conv2d", "Conv", ("node_conv2d", "conv2d", "relu")),
             GraphNode("node_conv2d_1", "Conv", ("node_conv2d_1", "conv2d_1", "relu_1")),
             GraphNode("node_max_pool2d", "MaxPool", ("node_max_pool2d", "max_pool2d")),
             GraphNode("node_linear", "Gemm", ("node_linear", "logits"))]
    pairs = [_pair("node_conv2d_1", "Conv", 12.0), _pair("node_conv2d", "Conv", 3.0)]
    costs = recovery_cost.costs(pairs, DIGITS, ORT_INT8, ORT_FP32, graph=graph)
    assert [(c.matched_by, c.float_row) for c in costs] == [
        ("onnx layer", "relu_1_nchwc"), ("onnx layer", "relu_nchwc")]
    assert [c.cost_ms for c in costs] == pytest.approx([3.0, -0.5])
    assert recovery_cost.named_as_graph(DIGITS, graph)
    assert not recovery_cost.named_as_graph([("0", "ConvReLU2d"), ("4", "MaxPool2d")], graph)


def test_openvino_and_torch_names_are_found_by_path_and_by_position():
    ov = [("node_conv2d/WithoutBiases", "Convolution"), ("node_linear/WithoutBiases", "MatMul")]
    found = profile_layers(_profile("ov-int8", [
        ("node_conv2d/WithoutBiases", "Convolution", "compute", 1.0),
        ("node_linear/WithoutBiases/DequantizationMultiply", "FullyConnectedQuantizedLegacy",
         "compute", 1.0)]))
    assert recovery_cost.locate(ov, found) == {0: (0, "name"), 1: (1, "name")}
    # a name that only begins like another's is not it ("node_conv2d" is not "node_conv2d_1")
    assert recovery_cost.locate([("node_conv2d", "Conv")], profile_layers(_profile("x", [
        ("node_conv2d_1_token_4", "QLinearConv", "compute", 1.0)]))) == {
        0: (0, "position")}
    torch = [("0", "ConvReLU2d"), ("4", "MaxPool2d"), ("8", "Linear")]
    found = profile_layers(_profile("torch-int8", [
        ("aten::quantize_per_tensor#0", "aten::quantize_per_tensor", "overhead", 0.1),
        ("quantized::conv2d_relu#0", "quantized::conv2d_relu", "compute", 1.0),
        ("aten::max_pool2d#0", "aten::max_pool2d", "compute", 1.0),
        ("quantized::linear#0", "quantized::linear", "compute", 1.0)]))
    assert recovery_cost.locate(torch, found) == {0: (0, "position"), 1: (1, "position"),
                                                  2: (2, "position")}


def test_a_candidate_without_a_row_or_a_profile_costs_unknown_and_says_why():
    pairs = [_pair("node_conv2d", "Conv", 3.0), _pair("ghost", "Conv", 9.0)]
    found = recovery_cost.costs(pairs, DIGITS, ORT_INT8, ORT_FP32)
    assert found[1].cost_ms is None and "no row of ort-int8's profile" in found[1].why
    assert found[1].db_per_ms is None and found[1].record()["cost_ms"] is None
    lone = _profile("ort-fp32", [("relu_nchwc", "Conv", "compute", 2.0)])
    last = recovery_cost.costs([_pair("node_linear", "Gemm", 1.0)], DIGITS, ORT_INT8, lone)[0]
    assert last.cost_ms is None and "no counterpart in ort-fp32's profile" in last.why
    # a pairing gone wrong (here: a name the profilers give a conv) prices nothing
    pool = [("node_conv2d", "MaxPool")]
    wrong = recovery_cost.costs([_pair("node_conv2d", "MaxPool", 3.0)], pool, ORT_INT8,
                                ORT_FP32)[0]
    assert wrong.cost_ms is None and "(QLinearConv, Conv) do not compute a MaxPool" in wrong.why
    assert recovery_cost.same_kind("ConvReLU2d", "quantized::conv2d_relu")
    assert recovery_cost.same_kind("MatMul", "FullyConnectedQuantizedLegacy")
    assert not recovery_cost.same_kind("ConvReLU2d", "ReLU")
    none = recovery_cost.costs(pairs, DIGITS, None, ORT_FP32, "tflite: no op profiling")
    assert [c.why for c in none] == ["tflite: no op profiling"] * 2


def _cost(name: str, lost: float, ms: float | None) -> recovery_cost.Cost:
    return recovery_cost.Cost(name, "Conv", lost, ms)


def test_ms_ordering_puts_most_sqnr_per_ms_first_free_layers_before_and_unknown_last():
    found = [_cost("a", 20.0, 10.0), _cost("b", 6.0, 1.0), _cost("c", 9.0, None),
             _cost("d", 2.0, -0.3), _cost("e", 0.0, 0.5)]
    assert [c.name for c in recovery_cost.order(found, "accuracy")] == list("abcde")
    # d is faster in float: 2 dB for free (the floor, 1 us); b 6 dB/ms; a 2 dB/ms; e 0
    assert [c.name for c in recovery_cost.order(found, "ms")] == list("dbaec")
    with pytest.raises(UserError, match="no candidate layer has a measured cost .*why"):
        recovery_cost.order([recovery_cost.Cost("x", "Conv", 1.0, None, why="why")], "ms")
    with pytest.raises(UserError, match="--recover-by fast"):
        recovery_cost.order(found, "fast")


def test_predicted_latency_adds_the_costs_to_k0_measured_and_the_error_is_in_percent():
    by_name = {c.name: c for c in (_cost("a", 20.0, 1.5), _cost("b", 6.0, -0.5),
                                   _cost("c", 9.0, None))}
    assert recovery_cost.predict(10.0, ["a", "b"], by_name) == (11.0, "")
    assert recovery_cost.predict(10.0, ["a", "c"], by_name) == (None, "cost unknown for c")
    rows = [{"k": 0, "excluded": [], "ms_per_batch": {"median": 10.0}},
            {"k": 2, "excluded": ["a", "b"], "ms_per_batch": {"median": 12.5}},
            {"k": 4, "excluded": ["a", "c"], "ms_per_batch": {"median": 13.0}},
            {"k": None, "excluded": [], "ms_per_batch": {"median": 20.0}}]
    recovery_cost.add_predictions(rows, by_name)
    assert [r["predicted_ms"] for r in rows] == [10.0, 11.0, None, None]
    assert rows[1]["prediction_error_pct"] == pytest.approx(-12.0)  # (11 - 12.5) / 12.5
    assert rows[0]["prediction_error_pct"] == 0.0
    assert rows[2]["prediction_unknown"] == "cost unknown for c"


def test_curve_rows_carry_the_measured_latency_of_a_batch_and_top1_per_ms_lost():
    def variant(label: str, k: int, rates: list[float], right: int) -> recovery.Variant:
        correct = np.zeros(10, dtype=bool)
        correct[:right] = True
        return recovery.Variant(label, k, [], None, answers=correct, rates=rates,
                                disturbed=[[] for _ in rates])

    judge = judges.TopOne(TOP1, 10, 8, lambda layout, start, stop: np.zeros(0),
                          np.zeros(10, dtype=np.int64), None)
    rows = recovery.summarize([variant("K=0", 0, [800.0, 800.0, 800.0], 5),
                               variant("K=1", 1, [400.0, 400.0, 400.0], 8)], judge, 8)
    assert rows[0]["ms_per_batch"]["median"] == pytest.approx(10.0)  # 8 samples at 800/s
    assert rows[1]["ms_per_batch"]["median"] == pytest.approx(20.0)
    assert rows[1]["ms_lost_vs_k0"] == pytest.approx(10.0)
    assert rows[1]["top1_per_ms"] == pytest.approx(3.0)  # 30 points for 10 ms
    assert rows[0]["top1_per_ms"] is None


def test_recover_by_ms_without_a_profiler_is_refused_before_the_capture(monkeypatch):
    from quantmark.diagnosis import hooks, steps

    monkeypatch.setattr(hooks, "profiler", lambda info: None)
    config = steps.DiagnoseConfig(model="m", sut="ort-int8", recover=2, recover_by="ms")
    with pytest.raises(UserError, match="--recover-by ms: .*no per-layer profiler"):
        steps.check(config, "ort-fp32", 10)
    steps.check(steps.DiagnoseConfig(model="m", sut="ort-int8", recover=2), "ort-fp32", 10)
