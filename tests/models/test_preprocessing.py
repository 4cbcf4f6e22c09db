"""Preprocessing named, not implied: presets, recipe files and flags, each value checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quantmark.ground.errors import UserError
from quantmark.models.preprocessing import apply, describe, preset, preset_names, recipe_data
from quantmark.models.zoo import MODELS, get_model


def test_every_built_in_model_is_a_preset_of_its_own_recipe() -> None:
    for name, spec in MODELS.items():
        assert name in preset_names()
        assert apply(spec, {"preset": name}) == spec, name


def test_a_preset_at_another_size_keeps_its_crop_ratio() -> None:
    spec = apply(get_model("resnet50"), {"preset": "inception"})
    assert spec.mean == (127.5,) * 3 and spec.resize_short == round(224 / 0.875)
    assert apply(spec, {"resize": "stretch"}).resize_rule == "stretch"


def test_flags_win_over_the_file_and_the_file_over_its_preset(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"preset": "imagenet", "mean": [0.5, 0.5, 0.5],
                                  "std": [0.25, 0.25, 0.25], "scale": 255}))
    data = recipe_data(str(recipe), {"channel_order": "bgr", "std": None})
    spec = apply(get_model("resnet50"), data)
    assert spec.mean == (127.5,) * 3 and spec.std == (63.75,) * 3
    assert spec.channel_order == "BGR"
    assert "mean 127.5, 127.5, 127.5" in describe(spec) and "BGR" in describe(spec)
    toml = tmp_path / "recipe.toml"
    toml.write_text('preset = "cifar10"\nresize_short = 40\n')
    assert apply(get_model("resnet50"), recipe_data(str(toml), {})).resize_short == 40


def test_a_letterbox_recipe_resolves(tmp_path: Path) -> None:
    """resize = letterbox, from a recipe file or the --resize flag, reaches the model spec and
    the QSL's recipe: the whole image fitted inside the input, grey bars around it."""
    from quantmark.qsl.preprocess import recipe_for

    recipe = tmp_path / "yolo.json"
    recipe.write_text(json.dumps({"preset": "unit", "resize": "letterbox"}))
    spec = apply(get_model("resnet50"), recipe_data(str(recipe), {}))
    assert spec.resize_rule == "letterbox" and spec.std == (255.0,)
    assert "letterbox to 224x224" in describe(spec)
    assert recipe_for(spec, "NCHW").resize_rule == "letterbox"
    flagged = apply(get_model("resnet50"), recipe_data(None, {"resize": "letterbox"}))
    assert flagged.resize_rule == "letterbox"


@pytest.mark.parametrize(("value", "flags", "words"), [
    ("nope", {}, "neither a preset nor a recipe file"),
    (None, {"mean": "1,2"}, "give 1 or 3 numbers"),
    (None, {"std": "0"}, "divides by zero"),
    (None, {"channel_order": "RGBA"}, "choose RGB or BGR"),
    (None, {"resize": "crop"}, "choose short-side or stretch or letterbox"),
    (None, {"resize_short": -5}, "positive number"),
])
def test_bad_recipe_values_are_one_line(value, flags, words) -> None:
    with pytest.raises(UserError, match=words) as err:
        recipe_data(value, flags)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("flags", "words"), [
    ({"std": "-1,1,1"}, r"std '-1,1,1': a negative std flips the channel's sign"),
    ({"std": "-58.4"}, "a negative std"),
    ({"std": "nan,1,1"}, "give 1 or 3 numbers"),
    ({"std": "1,inf,1"}, "give 1 or 3 numbers"),
    ({"mean": "-5,0,0"}, r"within the pixels' range \(0-255 pixel units\)"),
    ({"mean": "300"}, r"within the pixels' range \(0-255 pixel units\)"),
    ({"mean": "0.5,120,0.5", "scale": 255}, r"\(0-1 units with scale 255\)"),
    ({"mean": "nan"}, "give 1 or 3 numbers"),
    ({"scale": -255}, "positive number"),
    ({"scale": float("inf")}, "positive number"),
    ({"resize_short": 2.5}, "a whole one"),
])
def test_a_meaningless_normalisation_is_refused_as_a_zero_std_is(flags, words) -> None:
    """Issue 43: a negative --std was accepted where 0 was refused (so were a negative or
    out-of-range mean); each is one line now, from the flags or a recipe file alike."""
    with pytest.raises(UserError, match=words) as err:
        recipe_data(None, flags)
    assert "\n" not in str(err.value)
    assert recipe_data(None, {"mean": "0.485,0.456,0.406", "std": "0.229,0.224,0.225",
                              "scale": 255})  # the usual 0-1 units hold


def test_a_short_side_below_the_input_size_names_both() -> None:
    """Issue 43: --resize-short 200 on a 224 input ended in the child's traceback (exit 3);
    it is one line naming both numbers, found where the spec is resolved (the parent)."""
    resnet = get_model("resnet50")
    with pytest.raises(UserError, match=r"--resize-short 200 is below the input size "
                                        r"224x224: .* at least 224; pass --resize-short 224 "
                                        "or more, or --resize stretch"):
        apply(resnet, recipe_data(None, {"resize_short": 200}))
    wide = apply(resnet, recipe_data(None, {"preset": "cifar10", "resize_short": 200}))
    assert wide.resize_rule == "stretch"  # another rule never crops: the short side is moot
    assert apply(resnet, recipe_data(None, {"resize_short": 224})).resize_short == 224


def test_bad_recipe_files_are_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "r.json"
    broken.write_text("{not json")
    unknown = tmp_path / "u.json"
    unknown.write_text(json.dumps({"mean": [1, 2, 3], "crop_pct": 0.9}))
    for path, words in ((broken, "is not valid json"), (unknown, "unknown key 'crop_pct'"),
                        (tmp_path / "missing.json", "cannot read it")):
        with pytest.raises(UserError, match=words):
            recipe_data(str(path), {})


def test_presets_name_their_conventions() -> None:
    assert preset("caffe")["channel_order"] == "BGR"
    assert preset("unit")["std"] == (255.0,)
