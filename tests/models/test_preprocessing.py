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
