"""Per-layer times in one vocabulary: overhead attributed to its layer, two profiles paired by
graph position, the shares, the sum check, and a planted slow layer ranked first."""

from __future__ import annotations

import pytest

from quantmark.diagnosis.layer_times import compare, layers, shares, slower, sum_check
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
