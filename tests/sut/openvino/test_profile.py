"""OpenVINO layer profiling on the digits CNN: ov-fp32 and ov-int8 as create() builds them,
recompiled with the CPU plugin's performance counters; every executed node is a row."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
pytest.importorskip("nncf")

from quantmark.ground.errors import UserError  # noqa: E402
from quantmark.sut.interface import SutOptions  # noqa: E402
from quantmark.sut.openvino import profile as op  # noqa: E402
from quantmark.sut.profiling import CATEGORIES, Profile  # noqa: E402
from tests.digits_model import DIGITS_SPEC  # noqa: E402

CONVS = ("node_Conv_54/WithoutBiases", "node_Conv_56/WithoutBiases",
         "node_Conv_58/WithoutBiases")


def _options(weights: Path, scenario: str = "Offline") -> SutOptions:
    return SutOptions(model=DIGITS_SPEC.name, scenario=scenario, threads=0,
                      model_path=str(weights))


@pytest.fixture(scope="module")
def suts(digits_weights: Path, digits_calibration: Any) -> Iterator[dict[str, Any]]:
    from quantmark.sut.openvino.backend import create

    built = {name: create(name, _options(digits_weights), DIGITS_SPEC, digits_calibration)
             for name in ("ov-fp32", "ov-int8")}
    for backend in built.values():
        backend.load()
    yield built
    for backend in built.values():
        backend.close()


@pytest.fixture(scope="module")
def profiles(suts: dict[str, Any], digits_data: Any) -> dict[str, Profile]:
    x = digits_data.eval_x[:8]
    return {name: op.profile(backend, x, iterations=5, warmup=2)
            for name, backend in suts.items()}


def _rows(profile: Profile) -> dict[str, Any]:
    return {layer.name: layer for layer in profile.layers}


def test_every_profile_is_consistent(profiles: dict[str, Profile]) -> None:
    for name, profile in profiles.items():
        assert profile.sut == name and profile.framework == "openvino"
        assert profile.batch_size == 8 and profile.iterations == 5
        # the counters resolve 1 us: a node of this tiny model (a reshape, a reorder) can
        # read 0 on a fast machine; a convolution cannot
        assert all(layer.median_ms >= 0 for layer in profile.layers)
        assert all(layer.median_ms > 0 for layer in profile.layers
                   if layer.op_type == "Convolution")
        assert {layer.category for layer in profile.layers} <= set(CATEGORIES)
        assert profile.end_to_end_ms > 0
        assert 0 < profile.layer_sum_ms <= 3 * profile.end_to_end_ms, name
        assert "mean over the profiled iterations" in profile.notes["layer_time"]


def test_convs_and_the_classifier_are_compute_rows(profiles: dict[str, Profile]) -> None:
    for name, precision in (("ov-fp32", "fp32"), ("ov-int8", "int8")):
        rows = _rows(profiles[name])
        for conv in CONVS:
            assert rows[conv].op_type == "Convolution", (name, conv)
            assert rows[conv].category == "compute" and rows[conv].precision == precision
            assert op.precision_of(rows[conv].kernel) == precision
        linear = [layer for layer in profiles[name].layers
                  if layer.op_type.startswith("FullyConnected")]  # the fused MatMul + bias
        assert len(linear) == 1 and linear[0].category == "compute"
        assert linear[0].precision == precision


def test_int8_adds_quantization_overhead(profiles: dict[str, Profile]) -> None:
    overhead = [layer for layer in profiles["ov-int8"].layers if layer.category == "overhead"]
    assert overhead  # the input's FakeQuantize / reorders into the int8 layout
    assert all(layer.op_type in op.OVERHEAD_TYPES or layer.op_type == "Subgraph"
               for layer in overhead)


def test_precision_and_category_rules() -> None:
    assert op.precision_of("jit_avx512_I8") == "int8"
    assert op.precision_of("brgconv_avx512_amx_U8") == "int8"
    assert op.precision_of("brgemm_avx512_amx_bf16") == "bf16"
    assert op.precision_of("jit_avx512_FP16") == "fp16"
    assert op.precision_of("ref_any_FP32") == "fp32"
    assert op.precision_of("undef") == ""
    assert op.category_of("Reorder", []) == "overhead"
    assert op.category_of("Parameter", []) == "other"
    assert op.category_of("Subgraph", ["Convert", "Convert"]) == "overhead"
    assert op.category_of("Subgraph", ["Convert", "Multiply"]) == "compute"
    assert op.category_of("Convolution", ["Convolution", "Add", "Relu"]) == "compute"


def test_single_stream_profiles_the_static_batch(digits_weights: Path, digits_calibration: Any,
                                                 digits_data: Any) -> None:
    from quantmark.sut.openvino.backend import create

    backend = create("ov-int8", _options(digits_weights, "SingleStream"), DIGITS_SPEC,
                     digits_calibration)
    profile = op.profile(backend, digits_data.eval_x[:1], iterations=3, warmup=1)
    assert profile.batch_size == 1 and profile.notes["batch"] == "static"
    assert _rows(profile)[CONVS[0]].precision == "int8"


def test_bad_requests_are_one_line_errors(suts: dict[str, Any], digits_data: Any) -> None:
    x = digits_data.eval_x[:2]
    with pytest.raises(UserError, match="iterations >= 1"):
        op.profile(suts["ov-fp32"], x, iterations=0, warmup=0)
    with pytest.raises(UserError, match="at least one sample"):
        op.profile(suts["ov-fp32"], np.zeros((0, 3, 32, 32), np.float32), 1, 0)
    with pytest.raises(UserError, match="not an OpenVINO"):
        op.profile(object(), x, iterations=1, warmup=0)
