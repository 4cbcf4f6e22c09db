"""The run's model spec: a built-in model at another size or class count, a user's ONNX file
read for its own geometry, and every model file quantmark cannot feed refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from onnx import TensorProto, helper, save

from quantmark.ground.config import RunConfig
from quantmark.ground.errors import UserError
from quantmark.models.workload import (
    file_model_name,
    inspect_onnx,
    parse_input_size,
    resized_weights_note,
    resolve_spec,
)
from quantmark.models.zoo import get_model
from quantmark.qsl.preprocess import recipe_for


def onnx_file(path: Path, inputs: list[tuple[str, list, int]], outputs: list[tuple[str, list]]
              ) -> Path:
    """A model with the given signature (one Identity per output: only the signature is read)."""
    nodes = [helper.make_node("Identity", [inputs[0][0]], [name]) for name, _ in outputs]
    graph = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info(n, t, s) for n, s, t in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def config(**kwargs) -> RunConfig:
    return RunConfig(scenario="Offline", sut="ort-fp32", **{"model": "resnet50", **kwargs})


def test_input_size_parses_square_and_height_by_width() -> None:
    assert parse_input_size("384") == (384, 384)
    assert parse_input_size("224x320") == (224, 320)
    assert parse_input_size("") is None
    for bad in ("0", "abc", "12x", "x12", "-3"):
        with pytest.raises(UserError, match="--input-size"):
            parse_input_size(bad)


def test_a_built_in_model_at_another_size_and_class_count() -> None:
    spec = resolve_spec(config(input_size="128x96", num_classes=37))
    assert (spec.input_size, spec.input_width, spec.num_classes) == (128, 96, 37)
    # the short side keeps resnet50's 256/224 crop ratio (and covers the wider side)
    assert spec.resize_short == 128 and spec.resize_rule == "short-side"
    assert recipe_for(spec, "NCHW").input_shape(2) == (2, 3, 128, 96)
    lite = resolve_spec(config(model="efficientnet-lite0", input_size="320"))
    assert lite.pretrained_source and lite.resize_short == round(320 * 256 / 224)
    assert "transfer" in resized_weights_note(lite)
    other = resolve_spec(config(model="efficientnet-lite0", num_classes=10))
    assert other.pretrained_source is None  # the shipped 1000-class head does not fit
    assert "random" in resized_weights_note(other)
    assert resized_weights_note(resolve_spec(config())) is None


def test_an_onnx_file_brings_its_own_shape_and_a_stated_recipe(tmp_path: Path) -> None:
    cifar = onnx_file(tmp_path / "cifar.onnx", [("x", ["N", 3, 32, 32], TensorProto.FLOAT)],
                      [("y", ["N", 10])])
    spec = resolve_spec(config(model="cifar", model_path=str(cifar)))
    assert (spec.channels, spec.input_size, spec.input_width, spec.num_classes) == (3, 32, 32, 10)
    assert spec.resize_rule == "stretch" and spec.mean[0] == pytest.approx(125.307)  # cifar10
    gray = onnx_file(tmp_path / "gray.onnx", [("x", ["N", 28, 20, 1], TensorProto.FLOAT)],
                     [("y", ["N", 5])])
    spec = resolve_spec(config(model="gray", model_path=str(gray),
                               preprocess={"preset": "unit"}))
    assert (spec.channels, spec.input_size, spec.input_width) == (1, 28, 20)
    assert recipe_for(spec, "NHWC").input_shape(1) == (1, 28, 20, 1)
    big = onnx_file(tmp_path / "big.onnx", [("x", ["N", 3, "h", "w"], TensorProto.FLOAT)],
                    [("y", ["N", 38])])
    spec = resolve_spec(config(model="big", model_path=str(big), input_size="384",
                               num_classes=37, preprocess={"preset": "inception"}))
    assert (spec.input_size, spec.num_classes, spec.mean) == (384, 37, (127.5,) * 3)
    raw = onnx_file(tmp_path / "raw.onnx", [("x", ["N", 64, 64, 3], TensorProto.UINT8)],
                    [("y", ["N", 4])])
    assert resolve_spec(config(model="raw", model_path=str(raw))).input_dtype == "uint8"


def test_the_file_name_names_a_model_that_is_not_the_default(tmp_path: Path) -> None:
    cifar = onnx_file(tmp_path / "my cifar.onnx", [("x", ["N", 3, 32, 32], TensorProto.FLOAT)],
                      [("y", ["N", 10])])
    assert file_model_name(str(cifar)) == "my-cifar"
    imagenet = onnx_file(tmp_path / "resnet50.onnx",
                         [("x", ["N", 3, 224, 224], TensorProto.FLOAT)], [("y", ["N", 1000])])
    assert file_model_name(str(imagenet)) is None  # the default model's shape: as before
    assert file_model_name(str(tmp_path / "absent.onnx")) is None


@pytest.mark.parametrize(("inputs", "outputs", "flags", "words"), [
    ([("a", ["N", 3, 32, 32], 1), ("b", ["N", 3, 32, 32], 1)], [("y", ["N", 10])], {},
     "has 2 inputs (a, b)"),
    ([("x", ["N", 5, 32, 32], 1)], [("y", ["N", 10])], {}, "has 5 channels"),
    ([("x", ["N", 3, 32, 32], 1)], [("y", ["N", 10, 4])], {}, "no float [N, classes] output"),
    ([("x", ["N", 3, 32, 32], 11)], [("y", ["N", 10])], {}, "DOUBLE"),
    ([("x", ["N", 3, "h", "w"], 1)], [("y", ["N", 10])], {}, "dynamic input size"),
    ([("x", ["N", 3, 32, 32], 1)], [("y", ["N", 10])], {"input_size": "64"},
     "takes 32x32 images, not --input-size 64x64"),
    ([("x", ["N", 3, 32, 32], 1)], [("y", ["N", 10])], {"num_classes": 37},
     "outputs 10 classes, not --num-classes 37"),
    ([("x", ["N", 1, 32, 32], 1)], [("y", ["N", 10])], {"preprocess": {"preset": "imagenet"}},
     "1-channel (grayscale) images, but the recipe has 3 means"),
])
def test_model_files_quantmark_cannot_feed_are_one_line(tmp_path, inputs, outputs, flags,
                                                        words) -> None:
    path = onnx_file(tmp_path / "m.onnx", inputs, outputs)
    with pytest.raises(UserError) as err:
        resolve_spec(config(model="m", model_path=str(path), **flags))
    message = str(err.value)
    assert words in message and "\n" not in message and str(path) in message, message


def test_inspect_reports_layout_and_names(tmp_path: Path) -> None:
    path = onnx_file(tmp_path / "m.onnx", [("pixels", ["N", 48, 32, 3], TensorProto.FLOAT)],
                     [("probs", ["N", 7])])
    stated = inspect_onnx(path, "m")
    assert (stated.layout, stated.height, stated.width, stated.channels) == ("NHWC", 48, 32, 3)
    assert (stated.input_name, stated.output_name, stated.classes) == ("pixels", "probs", 7)


def test_built_in_specs_are_unchanged_without_flags() -> None:
    for name in ("resnet50", "efficientnet-lite1", "mobilenetv2"):
        assert resolve_spec(config(model=name)) == get_model(name)


def test_two_class_outputs_are_refused_naming_both_and_the_fix(tmp_path: Path) -> None:
    """Issue 43: of two [N, 10] outputs the first was scored without a word; which one is the
    classifier's is the user's to say: one line naming both and how to keep one."""
    path = onnx_file(tmp_path / "two.onnx", [("x", ["N", 3, 32, 32], TensorProto.FLOAT)],
                     [("logits", ["N", 10]), ("aux", ["N", 10])])
    with pytest.raises(UserError) as err:
        resolve_spec(config(model="two", model_path=str(path)))
    message = str(err.value)
    assert "\n" not in message and "has 2 float [N, classes] outputs ('logits' and 'aux')" \
        in message
    assert (f"onnx.utils.extract_model('{path}', 'one.onnx', ['x'], ['logits'])" in message)
    one = onnx_file(tmp_path / "one.onnx", [("x", ["N", 3, 32, 32], TensorProto.FLOAT)],
                    [("logits", ["N", 10]), ("boxes", ["N", 10, 4])])
    assert inspect_onnx(one, "one").output_name == "logits"  # one [N, classes] output: it


def test_an_empty_onnx_file_is_not_a_model(tmp_path: Path) -> None:
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(UserError, match="is not a valid ONNX model .*holds no graph"):
        resolve_spec(config(model="empty", model_path=str(empty)))


@pytest.mark.parametrize("fields", [{"seq_len": 64}, {"padding": "dynamic"},
                                    {"tokenizer": "tokenizer.json"}])
def test_a_text_setting_on_an_image_model_is_refused(fields) -> None:
    """--seq-len, --padding and --tokenizer on an image model were ignored without a word."""
    flag = "--" + next(iter(fields)).replace("_", "-")
    with pytest.raises(UserError, match=f"{flag} .* is a text model's setting, and model "
                                        "resnet50 takes images"):
        resolve_spec(config(**fields))
