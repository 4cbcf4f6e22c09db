"""A planted slow layer is ranked first by the profile: an ORT INT8 model with one layer kept in
float (diagnose's own exclusion, ``Recipe(exclude=...)``) against the same model fully INT8,
on real profiles of a real model, every layer named by the canonical ONNX model."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantmark.diagnosis.layer_times import compare, slower
from quantmark.diagnosis.profile_run import ProfileConfig, canonical_graph, profile_one
from quantmark.diagnosis.steps import open_data
from quantmark.models.workload import resolve_spec
from quantmark.sut.layers import Recipe
from tests.quantmark.diagnosis.planted_models import MODEL, SLOWED, original_onnx, plant_slow_conv

pytest.importorskip("onnxruntime")


# slow: two INT8 quantizations of the model (~20 s on a busy machine); alone: it ranks layer
# times. The reference is the *original* model fully INT8, not the planted one: with the heavy
# kernel on both sides the kept conv's lead was float against INT8 of the same 25x work, which
# a CPU with slow INT8 kernels (no VNNI) makes small, and CI ranked the max-pool beside it first
@pytest.mark.slow
@pytest.mark.alone
def test_an_int8_layer_kept_in_float_is_ranked_first(tmp_path: Path) -> None:
    # the kept layer made heavy (its kernel grown with zeros: 25x the work, the same function)
    # and run in float, against the original layer in INT8: its lead outweighs every other
    # layer's on any machine, whatever INT8 costs there
    original = original_onnx()
    model = plant_slow_conv(original, tmp_path / "heavy.onnx")
    config = ProfileConfig(model=MODEL, sut="ort-int8", model_path=str(model), batch_size=64,
                           iterations=15, warmup=3)
    spec = resolve_spec(config)
    data, calibration = open_data(config, spec)
    graph, onnx_model = canonical_graph(config, spec)
    assert graph is not None and onnx_model == str(model)
    kept, why = profile_one(config, "ort-int8", spec, data, calibration, "ort-int8 kept",
                            Recipe(exclude=(SLOWED,)))
    plain = ProfileConfig(model=MODEL, sut="ort-int8", model_path=str(original), batch_size=64,
                          iterations=15, warmup=3)
    normal, _ = profile_one(plain, "ort-int8", resolve_spec(plain), data, calibration)
    assert why is None and kept.sut == "ort-int8 kept" and normal.sut == "ort-int8"
    rows = compare(kept, normal, graph)
    assert {row.onnx_layer for row in rows} >= {node.name for node in graph
                                                if node.op_type in ("Conv", "Gemm")}
    first = slower(rows)[0]
    assert first.onnx_layer == SLOWED and first.matched_by == "onnx layer"
    assert first.test.precision == "fp32" and first.reference.precision == "int8"
    assert first.test.total_ms > 0 and first.reference.total_ms > 0
