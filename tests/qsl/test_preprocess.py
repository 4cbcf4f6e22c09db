from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from quantmark.qsl.preprocess import (
    PreprocessRecipe,
    crop_box,
    decode_and_crop,
    normalise,
    resized_size,
)


def test_resize_keeps_aspect_short_side_256() -> None:
    assert resized_size(400, 300, 256) == (341, 256)
    assert resized_size(300, 600, 256) == (256, 512)
    assert resized_size(500, 500, 256) == (256, 256)
    assert crop_box(341, 256, 224) == (58, 16, 282, 240)


@pytest.mark.parametrize("size", [(640, 360), (300, 900), (100, 80)])
def test_non_square_image_gives_centre_crop(tmp_path: Path, size: tuple[int, int]) -> None:
    w, h = size
    # Left half red, right half blue, a green square in the middle: the crop must be centred.
    pixels = np.zeros((h, w, 3), np.uint8)
    pixels[:, : w // 2, 0] = 255
    pixels[:, w // 2 :, 2] = 255
    pixels[h // 2 - h // 10 : h // 2 + h // 10, w // 2 - w // 10 : w // 2 + w // 10] = (0, 255, 0)
    path = tmp_path / "img.png"
    Image.fromarray(pixels).save(path)
    out = decode_and_crop(path, PreprocessRecipe())
    assert out.shape == (224, 224, 3) and out.dtype == np.uint8
    assert tuple(out[112, 112]) == (0, 255, 0)
    assert out[112, 2, 0] > 200 and out[112, 221, 2] > 200  # symmetric about the centre
    # Same as doing it by hand: resize short side to 256 (bilinear), then centre crop.
    img = Image.open(path).convert("RGB")
    rw, rh = resized_size(w, h, 256)
    assert min(rw, rh) == 256
    manual = img.resize((rw, rh), Image.Resampling.BILINEAR).crop(crop_box(rw, rh, 224))
    np.testing.assert_array_equal(out, np.asarray(manual))


@pytest.mark.parametrize("mode", ["L", "RGBA", "P", "CMYK"])
def test_any_mode_becomes_rgb(tmp_path: Path, mode: str) -> None:
    path = tmp_path / ("img.jpg" if mode == "CMYK" else "img.png")
    Image.new("RGB", (300, 260), (10, 200, 30)).convert(mode).save(path)
    assert decode_and_crop(path, PreprocessRecipe()).shape == (224, 224, 3)


def test_normalise_values_and_layouts() -> None:
    recipe = PreprocessRecipe(mean=(100.0, 50.0, 0.0), std=(2.0, 4.0, 255.0), layout="NHWC")
    img = np.zeros((4, 5, 3), np.uint8)
    img[..., 0], img[..., 1], img[..., 2] = 0, 58, 255
    out = normalise(img, recipe)
    assert out.dtype == np.float32 and out.shape == (4, 5, 3)
    np.testing.assert_allclose(out[0, 0], [-50.0, 2.0, 1.0], rtol=1e-6)

    batch = np.random.default_rng(0).integers(0, 256, (3, 6, 7, 3), dtype=np.uint8)
    nhwc = normalise(batch, PreprocessRecipe(layout="NHWC"))
    nchw = normalise(batch, PreprocessRecipe(layout="NCHW"))
    assert nhwc.shape == (3, 6, 7, 3) and nchw.shape == (3, 3, 6, 7)
    assert nchw.flags.c_contiguous and nchw.dtype == np.float32
    np.testing.assert_allclose(nchw, nhwc.transpose(0, 3, 1, 2), rtol=1e-6)
    ref = (batch.astype(np.float64) - np.array(PreprocessRecipe().mean)) / np.array(
        PreprocessRecipe().std
    )
    np.testing.assert_allclose(nhwc, ref, rtol=1e-5, atol=1e-5)
    # One image and a batch of one agree.
    np.testing.assert_array_equal(normalise(batch[0], PreprocessRecipe()), nchw[0])


def test_geometry_key_ignores_normalisation() -> None:
    a = PreprocessRecipe()
    b = PreprocessRecipe(mean=(127, 127, 127), std=(128, 128, 128), layout="NHWC")
    assert a.geometry_key() == b.geometry_key()
    assert a.key() != b.key()
    assert PreprocessRecipe(crop=192).geometry_key() != a.geometry_key()
    assert (
        PreprocessRecipe(mean=[127, 127, 127]).key()
        == PreprocessRecipe(mean=(127.0, 127.0, 127.0)).key()
    )
    with pytest.raises(ValueError):
        PreprocessRecipe(layout="CHW")  # type: ignore[arg-type]


def _photo(tmp_path: Path, w: int, h: int) -> Path:
    """A gradient photo: red grows left to right, green top to bottom, blue constant."""
    pixels = np.zeros((h, w, 3), np.uint8)
    pixels[..., 0] = np.linspace(0, 255, w, dtype=np.uint8)[None, :]
    pixels[..., 1] = np.linspace(0, 255, h, dtype=np.uint8)[:, None]
    pixels[..., 2] = 40
    path = tmp_path / f"p{w}x{h}.png"
    Image.fromarray(pixels).save(path)
    return path


def test_a_non_square_crop_and_the_stretch_rule(tmp_path: Path) -> None:
    wide = _photo(tmp_path, 400, 100)
    recipe = PreprocessRecipe(resize_short=64, crop=48, crop_width=96)
    assert decode_and_crop(wide, recipe).shape == (48, 96, 3)
    # a portrait photo is grown until the wide crop fits inside it
    tall = _photo(tmp_path, 100, 400)
    assert decode_and_crop(tall, recipe).shape == (48, 96, 3)
    stretch = PreprocessRecipe(crop=8, crop_width=12, resize_rule="stretch", resize_short=8)
    out = decode_and_crop(wide, stretch)
    assert out.shape == (8, 12, 3)
    assert out[0, 0, 0] < 40 and out[0, -1, 0] > 215  # the whole width kept, not cropped


def test_grayscale_bgr_and_uint8_inputs() -> None:
    rgb = np.zeros((2, 4, 5, 3), np.uint8)
    rgb[..., 0], rgb[..., 1], rgb[..., 2] = 200, 100, 10
    gray = PreprocessRecipe(crop=4, crop_width=5, resize_short=4, channels=1, mean=(0.0,),
                            std=(1.0,))
    out = normalise(rgb, gray)
    assert out.shape == (2, 1, 4, 5)
    assert out[0, 0, 0, 0] == pytest.approx(0.299 * 200 + 0.587 * 100 + 0.114 * 10, rel=1e-5)
    bgr = PreprocessRecipe(crop=4, crop_width=5, resize_short=4, channel_order="BGR",
                           mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), layout="NHWC")
    assert normalise(rgb, bgr)[0, 0, 0].tolist() == [10.0, 100.0, 200.0]
    raw = PreprocessRecipe(crop=4, crop_width=5, resize_short=4, dtype="uint8",
                           mean=(0.0,), std=(1.0,))
    pixels = normalise(rgb, raw)
    assert pixels.dtype == np.uint8 and pixels.shape == (2, 3, 4, 5)
    assert pixels[0, :, 0, 0].tolist() == [200, 100, 10]
    assert gray.input_shape(3) == (3, 1, 4, 5)


def test_default_recipes_keep_their_cache_keys() -> None:
    """A recipe that changes none of the new fields hashes as before (its caches stay)."""
    recipe = PreprocessRecipe()
    assert recipe.geometry_key() == PreprocessRecipe(crop_width=0).geometry_key()
    assert recipe.key() != PreprocessRecipe(channel_order="BGR").key()
    assert recipe.geometry_key() != PreprocessRecipe(crop_width=200).geometry_key()
    assert recipe.geometry_key() == PreprocessRecipe(channel_order="BGR").geometry_key()
