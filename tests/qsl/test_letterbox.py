"""The letterbox resize rule: its geometry, the canvas it builds, and that scoring's inverse of
the geometry lands a box corner back on the original pixel."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from quantmark.qsl.preprocess import (
    LETTERBOX_PAD,
    RESIZE_RULES,
    PreprocessRecipe,
    covering_size,
    decode_and_crop,
    letterbox_geometry,
)


@pytest.mark.parametrize(
    ("image", "target", "expected"),
    [
        ((480, 640), (640, 640), (1.0, 80, 0, 480, 640)),  # landscape: bars top and bottom
        ((640, 480), (640, 640), (1.0, 0, 80, 640, 480)),  # portrait: bars left and right
        ((300, 300), (64, 64), (64 / 300, 0, 0, 64, 64)),  # square into square: no bars
        ((64, 96), (64, 96), (1.0, 0, 0, 64, 96)),  # exactly the input size
        ((100, 50), (64, 96), (0.64, 0, 32, 64, 32)),  # portrait into a wide input
        ((375, 500), (640, 640), (1.28, 80, 0, 480, 640)),  # upscaled, COCO-like
        ((64, 31), (64, 64), (1.0, 0, 16, 64, 31)),  # odd bar: the extra pixel on the right
        ((31, 64), (64, 64), (1.0, 16, 0, 31, 64)),  # ... and at the bottom
    ],
)
def test_geometry(image: tuple[int, int], target: tuple[int, int],
                  expected: tuple[float, int, int, int, int]) -> None:
    ratio, top, left, new_h, new_w = letterbox_geometry(*image, *target)
    assert ratio == pytest.approx(expected[0])
    assert (top, left, new_h, new_w) == expected[1:]
    # the brief's definition, term by term
    want = min(target[0] / image[0], target[1] / image[1])
    assert ratio == want
    assert new_w == round(image[1] * want) and new_h == round(image[0] * want)
    assert left == (target[1] - new_w) // 2 and top == (target[0] - new_h) // 2


def test_odd_padding_puts_the_extra_pixel_after_the_image() -> None:
    ratio, top, left, new_h, new_w = letterbox_geometry(10, 21, 64, 64)
    assert (new_h, new_w) == (round(10 * 64 / 21), 64)
    assert top == (64 - new_h) // 2 and 64 - new_h - top >= top


def test_extreme_strip_keeps_one_pixel() -> None:
    _, top, left, new_h, new_w = letterbox_geometry(1, 10000, 64, 64)
    assert (new_h, new_w) == (1, 64) and top == 31 and left == 0
    with pytest.raises(ValueError, match="positive"):
        letterbox_geometry(0, 10, 64, 64)


def _write(path: Path, width: int, height: int) -> np.ndarray:
    """A saturated colour image (never the pad grey) saved losslessly."""
    rng = np.random.default_rng(width * 7 + height)
    pixels = rng.integers(0, 2, (height, width, 3), dtype=np.uint8) * 200 + 20
    pixels[..., 1] = 250  # green high everywhere: no pixel of the image is 114-grey
    Image.fromarray(pixels).save(path)
    return pixels


@pytest.mark.parametrize("size", [(160, 90), (90, 160), (80, 80), (64, 48), (30, 200)])
def test_canvas_is_grey_exactly_where_the_geometry_pads(tmp_path: Path,
                                                        size: tuple[int, int]) -> None:
    width, height = size
    path = tmp_path / "img.png"
    _write(path, width, height)
    recipe = PreprocessRecipe(crop=48, crop_width=64, resize_rule="letterbox", layout="NHWC",
                              resize_short=64)
    out = decode_and_crop(path, recipe)
    assert out.shape == (48, 64, 3) and out.dtype == np.uint8
    _, top, left, new_h, new_w = letterbox_geometry(height, width, 48, 64)
    assert covering_size(width, height, recipe) == (new_w, new_h)
    image = np.zeros((48, 64), bool)
    image[top:top + new_h, left:left + new_w] = True
    grey = np.all(out == LETTERBOX_PAD, axis=-1)
    np.testing.assert_array_equal(grey, ~image)
    assert (out[image][:, 1] > 200).all()  # the image's green everywhere else
    # the image part is the plain bilinear resize of the original
    manual = Image.open(path).convert("RGB").resize((new_w, new_h), Image.Resampling.BILINEAR)
    np.testing.assert_array_equal(out[top:top + new_h, left:left + new_w], np.asarray(manual))


def test_exact_size_image_is_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "img.png"
    pixels = _write(path, 64, 48)
    recipe = PreprocessRecipe(crop=48, crop_width=64, resize_rule="letterbox", resize_short=64)
    np.testing.assert_array_equal(decode_and_crop(path, recipe), pixels)


def test_box_corner_round_trip(tmp_path: Path) -> None:
    """A marked pixel of the original lands where the geometry says, and scoring's inverse
    (x - pad_left) / ratio brings it back to the original pixel."""
    width, height, target = 200, 120, 64
    pixels = np.full((height, width, 3), 20, np.uint8)
    x0, y0, x1, y1 = 50, 30, 150, 90  # a white box
    pixels[y0:y1, x0:x1] = 255
    path = tmp_path / "box.png"
    Image.fromarray(pixels).save(path)
    recipe = PreprocessRecipe(crop=target, resize_rule="letterbox", resize_short=target)
    out = decode_and_crop(path, recipe)
    ratio, top, left, _, _ = letterbox_geometry(height, width, target, target)
    white = np.argwhere(out[..., 0] > 128)
    (in_y0, in_x0), (in_y1, in_x1) = white.min(0), white.max(0) + 1
    assert in_x0 == pytest.approx(left + x0 * ratio, abs=1)
    assert in_y0 == pytest.approx(top + y0 * ratio, abs=1)
    back = ((in_x0 - left) / ratio, (in_y0 - top) / ratio, (in_x1 - left) / ratio,
            (in_y1 - top) / ratio)
    np.testing.assert_allclose(back, (x0, y0, x1, y1), atol=1 / ratio)
    # exact, without resampling: the forward map followed by the inverse is the identity
    for x, y in ((x0, y0), (x1, y1), (0, 0), (width, height)):
        forward = (left + x * ratio, top + y * ratio)
        assert ((forward[0] - left) / ratio, (forward[1] - top) / ratio) == \
            (pytest.approx(x), pytest.approx(y))


def test_letterbox_has_its_own_cache_key() -> None:
    assert RESIZE_RULES[:2] == ("short-side", "stretch")  # the old rules keep their place
    short = PreprocessRecipe(resize_short=64, crop=64)
    box = PreprocessRecipe(resize_short=64, crop=64, resize_rule="letterbox")
    stretch = PreprocessRecipe(resize_short=64, crop=64, resize_rule="stretch")
    keys = {short.geometry_key(), box.geometry_key(), stretch.geometry_key()}
    assert len(keys) == 3
    assert box.key() != short.key()
    # resize_short means nothing to a letterbox: one cache for every value of it
    assert PreprocessRecipe(resize_short=640, crop=64, resize_rule="letterbox").geometry_key() \
        == box.geometry_key()


def test_existing_geometry_keys_are_unchanged() -> None:
    """The default recipe's key is what every ImageNet cache on disk is filed under."""
    from quantmark.ground.hashing import hash_json

    assert PreprocessRecipe().geometry_key() == hash_json(
        {"resize_short": 256, "crop": 224, "resampling": "bilinear", "version": 3})
    assert PreprocessRecipe(resize_short=8, crop=8, resize_rule="stretch").geometry_key() == \
        hash_json({"resize_short": 8, "crop": 8, "resampling": "bilinear", "version": 3,
                   "resize_rule": "stretch"})


def test_letterbox_ignores_resize_short_limits() -> None:
    """A short-side recipe needs crop <= resize_short; a letterbox has no crop to fit."""
    recipe = PreprocessRecipe(resize_short=32, crop=640, resize_rule="letterbox")
    assert recipe.input_shape() == (3, 640, 640)
    with pytest.raises(ValueError, match="resize rule"):
        PreprocessRecipe(resize_rule="pad")
