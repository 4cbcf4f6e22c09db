"""The engine's input size: a user's ONNX with a dynamic height or width is built for the size
the run feeds (the spec's, in the model's layout), and that size joins the engine's key. Runs
without TensorRT or a GPU."""

from __future__ import annotations

import pytest

from quantmark.ground.errors import SutError
from quantmark.sut.tensorrt.build import BatchProfile, engine_cache_key, fixed_sample_shape

KEY_ARGS = dict(onnx_key="onnx0", precision="fp32", profile=BatchProfile(1, 8, 8),
                trt_version="10.13.0.35", gpu_name="NVIDIA H100 80GB HBM3",
                compute_capability="sm_90", calibration_hash=None, route=None)


def test_static_dims_are_the_model_s_own() -> None:
    assert fixed_sample_shape((-1, 1, 48, 32), (1, 40, 24)) == (1, 48, 32)
    assert fixed_sample_shape((-1, 3, 224, 224), None) == (3, 224, 224)


def test_dynamic_dims_take_the_fed_size_in_either_layout() -> None:
    assert fixed_sample_shape((-1, 1, -1, -1), (1, 40, 24)) == (1, 40, 24)
    assert fixed_sample_shape((-1, -1, -1, 3), (48, 32, 3)) == (48, 32, 3)
    with pytest.raises(SutError, match="dynamic dims besides the batch"):
        fixed_sample_shape((-1, 3, -1, -1), None)


def test_the_fed_size_joins_the_key_only_when_given() -> None:
    base = engine_cache_key(**KEY_ARGS)
    assert engine_cache_key(**KEY_ARGS, sample_shape=None) == base
    at_40 = engine_cache_key(**KEY_ARGS, sample_shape=(1, 40, 24))
    assert at_40 != base and at_40 != engine_cache_key(**KEY_ARGS, sample_shape=(1, 48, 32))


def test_int8_calibrates_in_the_model_s_layout_and_refuses_raw_pixels() -> None:
    from dataclasses import replace

    from quantmark.ground.errors import UserError
    from quantmark.sut.tensorrt.build import int8_calibration
    from tests.sut.geometry_models import Case, RecipeCalibration

    spec = Case("gray", channels=1, height=48, width=32).spec()
    data = int8_calibration("trt-int8", spec, RecipeCalibration(spec, 4), "NHWC")
    assert data.shape == (4, 48, 32, 1) and data.dtype == "float32"
    raw = replace(spec, input_dtype="uint8", mean=(0.0,), std=(1.0,))
    with pytest.raises(UserError, match="takes uint8 pixels.*ort-int8, ov-int8 or tflite-int8"):
        int8_calibration("trt-int8", raw, RecipeCalibration(raw, 4), "NCHW")
