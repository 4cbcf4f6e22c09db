"""torch layer profiling on the trained digits CNN: the CPU SUTs as create() builds them, run
under torch.profiler; eager SUTs give one row per leaf module, torch-int8's TorchScript one row
per top-level quantized op."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from quantmark.ground.errors import SutError, UserError  # noqa: E402
from quantmark.sut.interface import SutOptions  # noqa: E402
from quantmark.sut.profiling import CATEGORIES, Profile  # noqa: E402
from quantmark.sut.pytorch import profile as tp  # noqa: E402
from quantmark.sut.pytorch.backend import create  # noqa: E402
from tests.digits_model import DIGITS_SPEC  # noqa: E402

#: the digits CNN's leaf modules: conv, BN, ReLU x3 with pools, then pool, flatten, linear
CONVS = ("0", "4", "8")
LINEAR = "13"
SUTS = ("torch-fp32", "torch-bf16", "torch-int8", "torch-int8dyn")


def _options(weights) -> SutOptions:
    return SutOptions(model=DIGITS_SPEC.name, scenario="Offline", batch_size=8, threads=0,
                      model_path=str(weights))


@pytest.fixture(scope="module")
def built(digits_weights, digits_calibration, quantmark_cache):
    backends = {name: create(name, _options(digits_weights), DIGITS_SPEC, digits_calibration)
                for name in SUTS}
    for backend in backends.values():
        backend.load()
    yield backends
    for backend in backends.values():
        backend.close()


@pytest.fixture(scope="module")
def profiles(built, digits_data) -> dict[str, Profile]:
    x = digits_data.eval_x[:8]
    return {name: tp.profile(backend, x, iterations=5, warmup=2)
            for name, backend in built.items()}


def _rows(profile: Profile) -> dict:
    return {layer.name: layer for layer in profile.layers}


def test_every_profile_is_consistent(profiles):
    for name, profile in profiles.items():
        assert profile.sut == name and profile.framework == "torch"
        assert profile.batch_size == 8 and profile.iterations == 5
        assert profile.layers and all(layer.median_ms > 0 for layer in profile.layers)
        assert {layer.category for layer in profile.layers} <= set(CATEGORIES)
        assert profile.end_to_end_ms > 0
        assert 0 < profile.layer_sum_ms <= 3 * profile.end_to_end_ms, name
        assert profile.method == tp.PROFILER and "rows" in profile.notes


def test_eager_fp32_rows_are_the_leaf_modules(profiles):
    rows = _rows(profiles["torch-fp32"])
    modules = [name for name in rows if name.isdigit()]
    assert modules == [str(i) for i in range(14)]  # every leaf module, in execution order
    # predict's own glue (torch.from_numpy, .numpy()) around the model: not layers
    assert {rows[name].category for name in rows if not name.isdigit()} == {"other"}
    for name in CONVS:
        assert (rows[name].op_type, rows[name].category, rows[name].precision) == (
            "Conv2d", "compute", "fp32")
        assert rows[name].kernel.startswith("aten::")
    assert rows[LINEAR].op_type == "Linear" and rows[LINEAR].category == "compute"
    assert rows["1"].op_type == "BatchNorm2d" and rows["2"].op_type == "ReLU"
    assert rows["12"].op_type == "Flatten" and rows["12"].category == "other"
    assert all(layer.calls == 1 for layer in rows.values())


def test_bf16_convs_say_bf16_and_the_cast_back_is_overhead(profiles):
    rows = _rows(profiles["torch-bf16"])
    for name in (*CONVS, LINEAR):
        assert rows[name].precision == "bf16" and rows[name].category == "compute"
    # predict's .float() on the bf16 logits: a conversion the FP32 model does not have
    assert rows["aten::to#0"].category == "overhead"


def test_int8_script_rows_are_its_quantized_ops(profiles):
    profile = profiles["torch-int8"]
    convs = [layer for layer in profile.layers if layer.op_type.startswith("quantized::conv")]
    assert len(convs) == len(CONVS)
    for layer in convs:
        assert layer.precision == "int8" and layer.category == "compute"
    linear = [layer for layer in profile.layers if layer.op_type == "quantized::linear"]
    assert len(linear) == 1 and linear[0].precision == "int8"
    overhead = {layer.op_type for layer in profile.layers if layer.category == "overhead"}
    assert {"aten::quantize_per_tensor", "aten::dequantize"} <= overhead
    pools = [layer for layer in profile.layers if "quantized_max_pool2d" in layer.kernel]
    assert len(pools) == 2 and {layer.precision for layer in pools} == {"int8"}
    model = [layer for layer in profile.layers if layer.category != "other"]
    assert model[0].op_type == "aten::quantize_per_tensor"  # the input, first
    assert model[-1].op_type == "aten::dequantize"  # the logits, last
    assert "TorchScript" in profile.notes["rows"]


def test_int8dyn_quantizes_only_the_classifier(profiles):
    rows = _rows(profiles["torch-int8dyn"])
    assert rows[LINEAR].precision == "int8" and "linear_dynamic" in rows[LINEAR].kernel
    assert {rows[name].precision for name in CONVS} == {"fp32"}


def test_hooks_are_removed_and_predict_unchanged(built, profiles, digits_data):
    model = built["torch-fp32"]._run
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    x = digits_data.eval_x[:8]
    with torch.inference_mode():
        expected = model(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(built["torch-fp32"].predict(x), expected)


def test_bad_requests_are_one_line_errors(built, digits_data, digits_weights,
                                          digits_calibration):
    x = digits_data.eval_x[:2]
    with pytest.raises(UserError, match="iterations >= 1"):
        tp.profile(built["torch-fp32"], x, iterations=0, warmup=0)
    with pytest.raises(UserError, match="at least one sample"):
        tp.profile(built["torch-fp32"], x[:0], iterations=1, warmup=0)
    compiled = create("torch-compile", _options(digits_weights), DIGITS_SPEC, digits_calibration)
    with pytest.raises(UserError, match="torch.compile"):
        tp.profile(compiled, x, iterations=1, warmup=0)
    unloaded = create("torch-fp32", _options(digits_weights), DIGITS_SPEC, digits_calibration)
    with pytest.raises(SutError, match="not loaded"):
        tp.profile(unloaded, x, iterations=1, warmup=0)
