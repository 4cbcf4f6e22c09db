"""torch layer profiling on the trained digits CNN: the CPU SUTs as create() builds them, run
under torch.profiler; eager SUTs give one row per leaf module, torch-int8's TorchScript one row
per top-level quantized op."""

from __future__ import annotations

import types

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


# --------------------------------------------------------------------------- CUDA

def _cuda_skip() -> str | None:
    from quantmark.ground.fingerprint import gpu_present
    from quantmark.sut.pytorch.cuda import cuda_blocker

    return "needs an NVIDIA GPU (none found)" if not gpu_present() else cuda_blocker()


def _event(name: str, kernels=(), children=()):
    """A profiler event as ``_on_gpu`` reads it: its kernels and the ops below it."""
    from torch.autograd.profiler_util import Kernel

    return types.SimpleNamespace(name=name, kernels=[Kernel(k, 0, us) for k, us in kernels],
                                 cpu_children=list(children))


def test_gpu_rows_take_the_longest_kernel_and_copies_are_other():
    conv = tp._Row("4", "Conv2d", "aten::cudnn_convolution", "fp16", "compute")
    below = _event("aten::cudnn_convolution", [("sm90_xmma_fprop_f16", 30.0),
                                               ("nchwToNhwcKernel", 4.0)])
    conv = tp._on_gpu(conv, _event("quantmark::module::4", children=[below]), "fp16")
    assert (conv.kernel, conv.category, conv.precision) == ("sm90_xmma_fprop_f16", "compute",
                                                            "fp16")
    copy = tp._Row("aten::to#0", "aten::to", "aten::copy_", "", "overhead")
    memcpy = _event("aten::copy_", [("Memcpy HtoD (Pageable -> Device)", 12.0)])
    copy = tp._on_gpu(copy, _event("aten::to", children=[memcpy]), "fp16")
    assert (copy.category, copy.precision) == ("other", "")  # the input's transfer, not a cast
    cast = tp._Row("aten::to#1", "aten::to", "aten::copy_", "", "overhead")
    cast = tp._on_gpu(cast, _event("aten::to", [("elementwise_kernel_half", 2.0)]), "fp16")
    assert cast.category == "overhead" and cast.kernel == "elementwise_kernel_half"
    add = tp._on_gpu(tp._Row("aten::add#0", "aten::add", "aten::add", "", "compute"),
                     _event("aten::add", [("vectorized_add", 1.0)]), "bf16")
    assert add.precision == "bf16"  # the mode's: model and input were cast once


def test_cuda_modes_without_module_boundaries_are_refused_in_one_line(digits_weights,
                                                                     digits_data):
    """Checked before anything touches the GPU, so it runs here too."""
    from quantmark.sut.pytorch.cuda import TorchCudaBackend
    from tests.digits_model import _build

    x = digits_data.eval_x[:2]
    for name, error, match in (("torch-cuda-compile", UserError, "torch.compile"),
                               ("torch-cuda-fp16", SutError, "not loaded")):
        backend = TorchCudaBackend(name, DIGITS_SPEC, None, _options(digits_weights), x,
                                   _build())
        with pytest.raises(error, match=match) as caught:
            tp.profile(backend, x, iterations=1, warmup=0)
        assert "\n" not in str(caught.value)


@pytest.mark.gpu
@pytest.mark.skipif(_cuda_skip() is not None, reason=str(_cuda_skip()))
def test_cuda_profiles_time_every_conv_on_the_gpu(digits_weights, digits_data):
    from quantmark.sut.pytorch import cuda as pytorch_cuda

    x = digits_data.eval_x[:8]
    for name, precision in (("torch-cuda-fp32", "fp32"), ("torch-cuda-fp16", "fp16"),
                            ("torch-cuda-bf16", "bf16")):
        if precision == "bf16" and not torch.cuda.is_bf16_supported():
            continue
        backend = pytorch_cuda.create(name, _options(digits_weights), DIGITS_SPEC, None)
        backend.load()
        try:
            profile = tp.profile(backend, x, iterations=5, warmup=2)
        finally:
            backend.close()
        rows = _rows(profile)
        assert profile.method == tp.CUDA_PROFILER and "cuda_device" in profile.notes
        assert {layer.category for layer in profile.layers} <= set(CATEGORIES)
        for conv in CONVS:
            assert (rows[conv].op_type, rows[conv].category, rows[conv].precision) == (
                "Conv2d", "compute", precision), name
            assert rows[conv].median_ms > 0 and not rows[conv].kernel.startswith("aten::")
        assert rows[LINEAR].median_ms > 0 and rows[LINEAR].precision == precision
        copies = [layer for layer in profile.layers if layer.kernel.startswith("Memcpy")]
        assert copies and {layer.category for layer in copies} == {"other"}
        # kernels of one stream, each launched and waited for inside the timed predict
        assert 0 < profile.layer_sum_ms <= 1.1 * profile.end_to_end_ms, name


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(_cuda_skip() is not None, reason=str(_cuda_skip()))
def test_profile_command_fp16_against_fp32_on_resnet50(tmp_path):
    from quantmark.ground.records import load_record
    from tests.conftest import run_cli

    proc = run_cli("profile", "--sut", "torch-cuda-fp16", "--against", "torch-cuda-fp32",
                   "--model", "resnet50", "--batch-size", "8", "--iterations", "20",
                   "--warmup", "5", "--output", str(tmp_path), timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = next(tmp_path.rglob("profile-torch-cuda-fp16-vs-torch-cuda-fp32/results.json"))
    record = load_record(results, kind="profile")
    assert record.unsupported == {}
    for side, precision in ((record.test, "fp16"), (record.reference, "fp32")):
        convs = [row for row in side["layers"] if row["op_type"] == "Conv2d"]
        assert len(convs) == 53 and all(row["median_ms"] > 0 for row in convs)  # resnet50
        assert {row["precision"] for row in convs} == {precision}
    assert "layers sum to" in proc.stdout
