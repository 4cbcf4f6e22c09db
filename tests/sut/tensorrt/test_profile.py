"""TensorRT layer profiling (``sut.tensorrt.profile``): the inspector's JSON read per engine layer,
the categories and the per-inference reports folded into rows run here from hand-written JSON
and reports; the IProfiler run itself needs TensorRT and an NVIDIA GPU and says why it skips."""

from __future__ import annotations

import types

import numpy as np
import pytest

from quantmark.ground.errors import SutError, UserError
from quantmark.sut.interface import SutOptions
from quantmark.sut.profiling import CATEGORIES
from quantmark.sut.tensorrt import profile as trt_profile
from quantmark.sut.tensorrt.backend import TensorRTBackend
from tests.sut.tensorrt import gpu_skip_reason

FP32 = "Row major linear FP32 format"
HALF = "Channel major FP16 format where channel % 8 == 0"
INT8 = "Thirty-two wide channel vectorized row major Int8 format"
REFORMAT = "Reformatting CopyNode for Input Tensor 0 to /conv1/Conv + /relu/Relu"
CONV = "/conv1/Conv + /relu/Relu"


def _layer(name: str, layer_type: str, consumed: str, **extra) -> dict:
    io = [{"Name": "t", "Location": "Device", "Dimensions": [8, 16, 28, 28],
           "Format/Datatype": consumed}]
    return {"Name": name, "LayerType": layer_type, "Inputs": io, "Outputs": io, **extra}


INSPECTOR = {"Layers": [
    _layer(REFORMAT, "Reformat", FP32, Origin="REFORMAT", TacticValue="0x0000000000000000"),
    _layer(CONV, "CaskConvolution", INT8, TacticName="sm90_xmma_fprop_implicit_gemm_int8"),
    _layer("/pool/MaxPool", "CaskPooling", HALF, TacticName="sm50_xmma_pooling_fp16"),
    _layer("/Flatten", "Shuffle", HALF),
    _layer("/Transpose", "Shuffle", HALF),
    _layer("/fc/Gemm", "CaskGemmConvolution", HALF, TacticName="sm80_xmma_gemm_f16"),
    _layer("/fc/Gemm_output_dequantize", "Scale", INT8, Origin="QDQ"),
    "not a layer",
]}


def test_inspector_json_gives_each_engine_layer_its_kernel_precision_and_category():
    layers = trt_profile.engine_layers(INSPECTOR)
    assert list(layers) == [REFORMAT, CONV, "/pool/MaxPool", "/Flatten", "/Transpose",
                            "/fc/Gemm", "/fc/Gemm_output_dequantize"]
    conv = layers[CONV]
    assert (conv.layer_type, conv.kernel, conv.precision, conv.category) == (
        "CaskConvolution", "sm90_xmma_fprop_implicit_gemm_int8", "int8", "compute")
    assert (layers[REFORMAT].category, layers[REFORMAT].kernel) == ("overhead",
                                                                    "0x0000000000000000")
    assert layers["/pool/MaxPool"].precision == "fp16"
    assert layers["/Flatten"].category == "other"
    assert layers["/Transpose"].category == "overhead"  # a layout transpose
    assert layers["/fc/Gemm_output_dequantize"].category == "overhead"
    assert trt_profile.engine_layers('{"Layers": []}') == {}
    assert trt_profile.engine_layers("{}") == {}


def test_categories_from_names_alone():
    """A layer the inspector does not list (a Myelin sub-kernel) is categorised by its name."""
    assert trt_profile.category(REFORMAT) == "overhead"
    assert trt_profile.category("/x/QuantizeLinear") == "overhead"
    assert trt_profile.category("{ForeignNode[/a/Conv.../b/Add]}") == "compute"
    assert trt_profile.category("/x", "NoOp") == "other"
    # an INT8 convolution that fused the next layer's Quantize is still the convolution
    fused = "/c/Conv + /r/Relu + /q/QuantizeLinear"
    assert trt_profile.category(fused, "CaskConvolution", "QDQ") == "compute"
    assert trt_profile.category(fused) == "compute"
    assert trt_profile.category("/q/QuantizeLinear + /dq/DequantizeLinear") == "overhead"
    assert {trt_profile.category(n) for n in ("/a", "/b/Conv")} <= set(CATEGORIES)


def test_reports_fold_into_median_rows_in_execution_order():
    inspected = trt_profile.engine_layers(INSPECTOR)
    runs = [  # three inferences' (layer, ms) reports; the pool runs twice per inference
        [(REFORMAT, 0.01), (CONV, 0.30), ("/pool/MaxPool", 0.02), ("/pool/MaxPool", 0.03),
         ("__myl_unlisted", 0.05), ("/Flatten", 0.0)],
        [(REFORMAT, 0.02), (CONV, 0.10), ("/pool/MaxPool", 0.02), ("/pool/MaxPool", 0.02),
         ("__myl_unlisted", 0.05), ("/Flatten", 0.0)],
        [(REFORMAT, 0.03), (CONV, 0.20), ("/pool/MaxPool", 0.01), ("/pool/MaxPool", 0.01),
         ("__myl_unlisted", 0.05), ("/Flatten", 0.0)],
    ]
    rows = trt_profile.to_layers(runs, inspected)
    assert [row.name for row in rows] == [REFORMAT, CONV, "/pool/MaxPool", "__myl_unlisted"]
    by_name = {row.name: row for row in rows}
    assert by_name[CONV].median_ms == pytest.approx(0.20)
    assert by_name[REFORMAT].median_ms == pytest.approx(0.02)
    assert by_name["/pool/MaxPool"].median_ms == pytest.approx(0.04)  # 0.05, 0.04, 0.02
    assert by_name["/pool/MaxPool"].calls == 2
    unlisted = by_name["__myl_unlisted"]
    assert (unlisted.op_type, unlisted.kernel, unlisted.category) == ("", "", "compute")
    assert by_name[CONV].precision == "int8" and by_name[REFORMAT].category == "overhead"


def _unloaded(batch: int = 8) -> TensorRTBackend:
    artifact = types.SimpleNamespace(meta={"profile": {"min": 1, "opt": batch, "max": batch}},
                                     path="engine.plan")
    return TensorRTBackend(artifact, "int8", "calibrator", 1)


def test_requests_that_cannot_run_are_one_line():
    x = np.zeros((4, 1, 28, 28), np.float32)
    with pytest.raises(UserError, match="TensorRT SUT"):
        trt_profile.profile(object(), x, iterations=1, warmup=0)
    with pytest.raises(UserError, match="iterations >= 1"):
        trt_profile.profile(_unloaded(), x, iterations=0, warmup=0)
    with pytest.raises(UserError, match="batch of 1 to 2 samples"):
        trt_profile.profile(_unloaded(batch=2), x, iterations=1, warmup=0)
    with pytest.raises(SutError, match="not loaded") as caught:
        trt_profile.profile(_unloaded(), x, iterations=1, warmup=0)
    assert "\n" not in str(caught.value)


@pytest.mark.gpu
@pytest.mark.skipif(gpu_skip_reason() is not None, reason=str(gpu_skip_reason()))
def test_every_conv_of_the_engine_is_timed_on_the_gpu(digits_weights, digits_calibration,
                                                      digits_data):
    from quantmark.sut.tensorrt import backend as trt_sut
    from tests.digits_model import DIGITS_SPEC

    x = digits_data.eval_x[:8]
    for name, precision in (("trt-fp16", "fp16"), ("trt-int8", "int8")):
        options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline", batch_size=8,
                             model_path=str(digits_weights))
        backend = trt_sut.create(name, options, DIGITS_SPEC, digits_calibration)
        backend.load()
        try:
            profile = trt_profile.profile(backend, x, iterations=5, warmup=2)
            assert backend.predict(x).shape == (8, 10)  # the SUT's contexts untouched
        finally:
            backend.close()
        assert profile.framework == "tensorrt" and profile.method == trt_profile.PROFILER
        assert profile.layers and all(layer.median_ms > 0 for layer in profile.layers)
        convs = [layer for layer in profile.layers if "Conv" in layer.name
                 and layer.category == "compute"]
        assert convs and any(layer.precision == precision for layer in convs), name
        assert all(layer.kernel for layer in convs)  # the inspector names their tactic
        # layers run one after another on one stream inside the timed inference
        assert 0 < profile.layer_sum_ms <= 1.1 * profile.end_to_end_ms, name
