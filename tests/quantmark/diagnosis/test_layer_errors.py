"""Matching two captures' layers and the error figures, on hand-made layers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from quantmark.diagnosis import layer_errors as le
from quantmark.sut.layers import LayerOutput


def _layer(name, shape=(2, 4, 3, 3), value=None, inputs=(), op="Conv", precision="int8"):
    """A layer of ones (or ``value``) with that output shape."""
    data = np.ones(shape, np.float32) if value is None else value
    return LayerOutput(name, op, precision, data, inputs)


def test_names_pair_first_and_the_rest_by_position_and_shape():
    test = [_layer("a"), _layer("x1"), _layer("c", (2, 8)), _layer("x2", (2, 4, 3, 3))]
    ref = [_layer("a"), _layer("b"), _layer("c", (2, 8)), _layer("d", (2, 5))]
    matching = le.match(test, ref)
    pairs = {p.name: (p.reference, p.matched_by) for p in matching.pairs}
    assert pairs == {"a": ("a", "name"), "x1": ("b", "position+shape"), "c": ("c", "name")}
    # x2 comes after c: no reference layer after c has its shape, so it stays unmatched
    assert matching.unmatched_test == ["x2"]
    assert matching.unmatched_reference == ["d"]
    assert matching.by_method() == {"name": 2, "position+shape": 1}


def test_a_layer_only_one_graph_has_shifts_nothing_after_it():
    """Frameworks that name layers differently: ORT captures each residual Add, torch's
    hooks do not; the project conv and the Add have the same shape."""
    block = [("expand", (6, 4, 4)), ("depthwise", (6, 4, 4)), ("project", (2, 4, 4))]
    ref = [_layer(f"{name}{b}", (1, *shape)) for b in range(3) for name, shape in block]
    test = []
    for b in range(3):
        test += [_layer(f"n{b}{k}", (1, *shape)) for k, (_, shape) in enumerate(block)]
        if b:  # the Add has the project conv's shape: only its kind tells them apart
            test.append(_layer(f"add{b}", (1, 2, 4, 4), op="Add"))
    matching = le.match(test, ref)
    got = {p.name: p.reference for p in matching.pairs}
    assert got == {f"n{b}{k}": f"{name}{b}" for b in range(3)
                   for k, (name, _) in enumerate(block)}
    assert matching.unmatched_test == ["add1", "add2"] and not matching.unmatched_reference


def test_op_kinds_compare_across_frameworks():
    kinds = {op: le.op_kind(op) for op in ("Conv", "Conv2d+ReLU6", "CONV_2D", "ConvReLU2d",
                                           "GroupConvolution", "DEPTHWISE_CONV_2D", "Gemm",
                                           "Linear", "FULLY_CONNECTED", "MatMul", "Add", "ADD",
                                           "ReduceMean", "MEAN", "PAD")}
    assert {k for op, k in kinds.items() if "onv" in op or "CONV" in op} == {"conv"}
    assert {kinds[op] for op in ("Gemm", "Linear", "FULLY_CONNECTED", "MatMul")} == {"matmul"}
    assert kinds["Add"] == kinds["ADD"] == "add" and kinds["MEAN"] == kinds["ReduceMean"]
    assert kinds["PAD"] == "pad"


def test_a_name_out_of_order_is_not_trusted():
    test = [_layer("a"), _layer("b")]
    ref = [_layer("b"), _layer("a")]
    matching = le.match(test, ref)
    assert [(p.name, p.reference, p.matched_by) for p in matching.pairs] == [
        ("a", "a", "name")]


def test_a_branch_ordered_otherwise_pairs_by_name_where_its_producers_agree():
    """Two files of one text encoder: the quantizer put key before query, and the mask sum
    first; each projection is fed by the same named layer in both, so it pairs by name, and
    one name out of order leaves every pair after it standing."""
    ref = [_layer("ln"), _layer("query", inputs=("ln",)), _layer("key", inputs=("ln",)),
           _layer("scores", inputs=("query", "key")), _layer("mask_sum")]
    test = [_layer("mask_sum"), _layer("ln"), _layer("key", inputs=("ln",)),
            _layer("query", inputs=("ln",)), _layer("scores", inputs=("query", "key"))]
    matching = le.match(test, ref)
    assert {p.name: (p.reference, p.matched_by) for p in matching.pairs} == {
        name: (name, "name") for name in ("ln", "key", "query", "scores")}
    assert matching.unmatched_test == ["mask_sum"] == matching.unmatched_reference
    assert le.in_order([(0, 4), (1, 0), (2, 2), (3, 1), (4, 3)]) == [(1, 0), (2, 2), (4, 3)]


def test_a_name_with_another_shape_is_not_a_match():
    matching = le.match([_layer("a", (1, 3))], [_layer("a", (1, 4))])
    assert matching.pairs == [] and matching.unmatched_test == ["a"]


def test_sqnr_and_cosine_accumulate_over_chunks_as_over_the_whole():
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(8, 16)).astype(np.float32)
    test = ref + rng.normal(scale=0.1, size=ref.shape).astype(np.float32)
    matching = le.match([_layer("a", (8, 16))], [_layer("a", (8, 16))])
    for start in (0, 3, 5):
        stop = {0: 3, 3: 5, 5: 8}[start]
        le.accumulate(matching, [_layer("a", value=test[start:stop])],
                      [_layer("a", value=ref[start:stop])])
    pair = matching.pairs[0]
    want_sqnr = 10 * math.log10((ref.astype(float) ** 2).sum()
                                / ((ref.astype(float) - test) ** 2).sum())
    want_cos = float((ref * test).sum() / np.sqrt((ref ** 2).sum() * (test ** 2).sum()))
    assert pair.sqnr_db == pytest.approx(want_sqnr, abs=1e-6)
    assert pair.cosine == pytest.approx(want_cos, abs=1e-6)
    assert pair.count == 8


def test_identical_outputs_are_clean_and_a_shape_change_is_an_error():
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    matching = le.match([_layer("a", (2, 6))], [_layer("a", (2, 6))])
    le.accumulate(matching, [_layer("a", value=x)], [_layer("a", value=x)])
    assert matching.pairs[0].sqnr_db == le.CLEAN_DB and matching.pairs[0].cosine == 1.0
    with pytest.raises(ValueError, match="shape"):
        le.accumulate(matching, [_layer("a", value=x[:1])], [_layer("a", value=x)])


def _pairs(sqnrs: dict[str, float], inputs: dict[str, tuple[str, ...]]) -> list[le.Pair]:
    pairs = []
    for name, sqnr in sqnrs.items():
        pair = le.Pair(name, "Conv", "int8", name, "Conv", "fp32", "name",
                       inputs.get(name, ()), (4,))
        pair.signal, pair.noise = 1.0, 10 ** (-sqnr / 10)
        pairs.append(pair)
    le.attribute(pairs)
    return pairs


def test_a_layer_is_charged_only_for_what_it_loses_against_what_it_received():
    pairs = _pairs({"stem": 32.0, "b": 22.0, "c": 25.0, "add": 20.0, "d": 12.0},
                   {"b": ("stem",), "c": ("stem",), "add": ("b", "c"), "d": ("add",)})
    lost = {p.name: round(p.lost_db, 3) for p in pairs}
    # the stem is above the lossless line; add received b + c: signal 1 + 1, noise
    # 10^-2.2 + 10^-2.5, so 23.246 dB, and it loses 3.246 of them
    assert lost == {"stem": 0.0, "b": 8.0, "c": 5.0, "add": 3.246, "d": 8.0}
    assert [p.name for p in le.worst(pairs, 2)] == ["d", "b"]  # tie: the lower SQNR first


def test_an_unmatched_producer_is_looked_through():
    pairs = _pairs({"conv": 20.0, "next": 15.0}, {"next": ("add",)})
    le.attribute(pairs, {"conv": (), "add": ("conv", "skip"), "skip": (), "next": ("add",)})
    assert [round(p.lost_db, 6) for p in pairs] == [10.0, 5.0]  # next against conv, via add


def test_the_recovery_skips_layers_the_framework_cannot_keep_in_fp32():
    from quantmark.diagnosis.steps import excludable

    pairs = _pairs({"a": 28.0, "add#0": 18.0, "b": 12.0, "c": 11.0}, {})
    pairs[1].excludable = False  # a torch functional add
    pairs[3].precision = "fp32"  # already FP32
    assert [p.name for p in le.worst(pairs, 4)][:2] == ["add#0", "b"]
    assert excludable(pairs, 2) == ["b", "a"]


def test_without_graph_inputs_the_previous_layer_is_the_input():
    pairs = _pairs({"a": 40.0, "b": 20.0, "c": 21.0}, {})
    assert [round(p.lost_db, 6) for p in pairs] == [0.0, 10.0, 0.0]


def test_the_first_jump_is_the_first_layer_near_the_worst_loss():
    pairs = _pairs({"a": 28.0, "b": 21.5, "c": 13.5, "d": 6.5}, {})
    # a loses 2 dB (against a lossless input), b 6.5, c 8, d 7: the jump threshold is 7 (the
    # worst's 8 less 1), so b, though past 6 dB, is not it: c is the first
    assert le.first_jump(pairs).name == "c"
    quiet = _pairs({"a": 28.0, "b": 25.0}, {})
    assert le.first_jump(quiet) is None  # nothing loses 6 dB
    assert le.first_jump([]) is None


def test_a_mask_s_stand_in_values_count_in_neither_power():
    """Attention scores plus a mask of float32's minimum: the padded positions are equal in
    both models and dwarf every score; left out, the scores' own error shows."""
    scores = np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)
    mask = np.array([[0.0, 0.0, np.finfo(np.float32).min, np.finfo(np.float32).min]],
                    np.float32)
    noisy = scores + np.float32(0.1)
    masked, plain = (le.Pair(name, "Add", "fp32", name, "Add", "fp32", "name", (), (4,))
                     for name in ("masked", "plain"))
    masked.add(scores + mask, noisy + mask)
    plain.add(scores[:, :2], noisy[:, :2])
    assert masked.sqnr_db == pytest.approx(plain.sqnr_db) and masked.sqnr_db < 30


def test_into_a_product_the_inputs_relative_noises_add():
    """x * gate: a clean gate does not hide x's noise (into a sum it would, by its power)."""
    x = le.Pair("x", "MatMul", "int8", "x", "MatMul", "fp32", "name", (), (4,), signal=1.0,
                noise=1e-2)  # 20 dB
    gate = le.Pair("gate", "Add", "fp32", "gate", "Add", "fp32", "name", (), (4,),
                   signal=100.0, noise=1e-8)  # 100 dB, a hundred times x's power
    into = {op: le.Pair(op, op, "fp32", op, op, "fp32", "name", ("x", "gate"), (4,),
                        signal=100.0, noise=1.0) for op in ("Mul", "Add")}  # 20 dB out
    for op, pair in into.items():
        le.attribute([x, gate, pair])
        assert pair.lost_db == (pytest.approx(0.0, abs=1e-6) if op == "Mul" else
                                pytest.approx(30.0 - 20.0))
