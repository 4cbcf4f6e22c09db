"""A native model file's input against the run's spec: the layout where it fits, one line naming
both where it does not (another size, other channels, a 5-channel input, not an image batch,
another input type)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from quantmark.ground.errors import UserError
from quantmark.models.native_input import check_dtype, input_layout
from quantmark.models.zoo import get_model

SPEC = replace(get_model("resnet50"), input_size=48, input_width=32, resize_short=48)
GRAY = replace(SPEC, channels=1, mean=(127.0,), std=(64.0,))


@pytest.mark.parametrize(("dims", "spec", "layout"), [
    ([None, 3, 48, 32], SPEC, "NCHW"), ([None, 48, 32, 3], SPEC, "NHWC"),
    ([1, 3, None, None], SPEC, "NCHW"), ([None, None, None, 3], SPEC, "NHWC"),
    ([None, 1, 48, 32], GRAY, "NCHW"), ([None, 48, 32, 1], GRAY, "NHWC"),
])
def test_the_spec_s_geometry_in_either_layout(dims, spec, layout) -> None:
    assert input_layout(dims, spec, "x.xml") == layout


@pytest.mark.parametrize(("dims", "spec", "needle"), [
    ([None, 3, 32, 48], SPEC, r"takes 3x32x48 .* feeds float32 3x48x32 .*--input-size 32x48"),
    ([None, 1, 48, 32], SPEC, r"takes 1x48x32 .* feeds float32 3x48x32 .*ONNX file"),
    ([None, 48, 32, 3], GRAY, r"takes 3x48x32 \(CxHxW, NHWC .* feeds float32 1x48x32"),
    ([None, 5, 48, 32], SPEC, r"has 5 channels; quantmark feeds images with 1 .* or 3"),
    ([None, 48, 32, 5], SPEC, r"has 5 channels"),
    ([None, 48, 32], SPEC, r"input is \[\?,48,32\]; quantmark feeds one image batch"),
    ([None, None, 48, None], SPEC, r"states no channel count"),
])
def test_anything_else_is_one_line_naming_both(dims, spec, needle) -> None:
    with pytest.raises(UserError, match=needle) as caught:
        input_layout(dims, spec, "model m: --model-path x.xml")
    assert "\n" not in str(caught.value) and "--model-path x.xml" in str(caught.value)


def test_the_input_type_must_be_the_spec_s() -> None:
    check_dtype("float32", SPEC, "x", [None, 3, 48, 32])
    check_dtype("uint8", replace(SPEC, input_dtype="uint8"), "x", [None, 3, 48, 32])
    with pytest.raises(UserError, match="takes raw uint8 pixels, but model resnet50 feeds "
                                        "float32 3x48x32"):
        check_dtype("uint8", SPEC, "x", [None, 3, 48, 32])
    with pytest.raises(UserError, match="takes normalised float32 values, but .* uint8"):
        check_dtype("float32", replace(SPEC, input_dtype="uint8"), "x", [None, 3, 48, 32])
