"""Images outside the dataset folder are refused; high bit depths are scaled, not clipped."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import ExifTags, Image

from quantmark.ground.errors import UserError
from quantmark.qsl.cache import cached_images
from quantmark.qsl.imagenet import ImageFolderDataset
from quantmark.qsl.preprocess import PreprocessRecipe, decode_and_crop
from tests.qsl.conftest import write_image

RECIPE = PreprocessRecipe(resize_short=64, crop=48)


def _one_line(excinfo: pytest.ExceptionInfo[UserError]) -> str:
    message = str(excinfo.value)
    assert "\n" not in message and message.strip() == message
    return message


def _folder(tmp_path: Path, line: str) -> Path:
    root = tmp_path / "data"
    write_image(root / "val" / "ok.png", 40, 30, seed=1)
    (root / "val_map.txt").write_text(f"val/ok.png 1\n{line}\n")
    return root


def test_dot_dot_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    root = _folder(tmp_path, "../outside.png 3")
    write_image(tmp_path / "outside.png", 40, 30, seed=2)
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(root)
    message = _one_line(exc)
    assert "val_map.txt:2" in message and "'../outside.png'" in message
    assert "outside the dataset folder" in message


def test_dot_dot_that_stays_inside_is_accepted(tmp_path: Path) -> None:
    root = _folder(tmp_path, "val/../val/ok2.png 3")
    write_image(root / "val" / "ok2.png", 40, 30, seed=2)
    assert len(ImageFolderDataset(root)) == 2


def test_symlink_leading_out_is_refused(tmp_path: Path) -> None:
    root = _folder(tmp_path, "val/link.png 3")
    write_image(tmp_path / "elsewhere" / "secret.png", 40, 30, seed=2)
    os.symlink(tmp_path / "elsewhere" / "secret.png", root / "val" / "link.png")
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(root)
    message = _one_line(exc)
    assert "val_map.txt:2" in message and "secret.png" in message and "outside" in message


def test_symlinked_folder_leading_out_is_refused(tmp_path: Path) -> None:
    root = _folder(tmp_path, "more/img.png 3")
    write_image(tmp_path / "elsewhere" / "img.png", 40, 30, seed=2)
    os.symlink(tmp_path / "elsewhere", root / "more")
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(root)
    assert "outside the dataset folder" in _one_line(exc)


def test_symlinks_inside_and_a_symlinked_root_are_accepted(tmp_path: Path) -> None:
    root = _folder(tmp_path, "val/alias.png 3")
    write_image(root / "store" / "other.png", 40, 30, seed=2)  # listed only through the link
    os.symlink(root / "store" / "other.png", root / "val" / "alias.png")
    os.symlink(root, tmp_path / "data-link")
    ds = ImageFolderDataset(tmp_path / "data-link")
    assert len(ds) == 2 and ds.fingerprint() == ImageFolderDataset(root).fingerprint()


def _grey(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (70, 90), dtype=np.uint8)


def test_16_bit_grey_png_decodes_like_its_8_bit_equivalent(tmp_path: Path) -> None:
    grey = _grey()
    Image.fromarray(grey, "L").save(tmp_path / "g8.png")
    Image.fromarray(grey.astype(np.uint16) * 257).save(tmp_path / "g16.png")
    with Image.open(tmp_path / "g16.png") as img:
        assert img.mode.startswith("I")  # really 16-bit on disk
    got = decode_and_crop(tmp_path / "g16.png", RECIPE)
    np.testing.assert_array_equal(got, decode_and_crop(tmp_path / "g8.png", RECIPE))
    assert got.min() < 40 and got.max() > 215  # not clipped to white


def test_16_bit_rgb_png_decodes_like_its_8_bit_equivalent(tmp_path: Path) -> None:
    """Pillow reads 16-bit RGB PNGs itself; checked so a Pillow change cannot clip them."""
    import struct
    import zlib

    rgb = np.random.default_rng(1).integers(0, 256, (60, 80, 3), dtype=np.uint8)
    wide = rgb.astype(">u2") * 257
    raw = b"".join(b"\0" + row.tobytes() for row in wide)

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 80, 60, 16, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    (tmp_path / "c16.png").write_bytes(png)
    Image.fromarray(rgb).save(tmp_path / "c8.png")
    np.testing.assert_array_equal(decode_and_crop(tmp_path / "c16.png", RECIPE),
                                  decode_and_crop(tmp_path / "c8.png", RECIPE))


def test_float_pixels_are_refused_with_one_line(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(2).random((40, 50)).astype(np.float32)).save(
        buffer, format="TIFF")
    (tmp_path / "f.tif").write_bytes(buffer.getvalue())
    with pytest.raises(UserError) as exc:
        decode_and_crop(tmp_path / "f.tif", RECIPE)
    assert "mode F" in _one_line(exc) and "8- or 16-bit" in str(exc.value)
    (tmp_path / "val_map.txt").write_text("f.tif 1\n")
    with pytest.raises(UserError) as exc:  # through the cache: names the file and the line
        cached_images(ImageFolderDataset(tmp_path), RECIPE, workers=1)
    message = _one_line(exc)
    assert "f.tif" in message and "val_map.txt:1" in message and "mode F" in message


def _with_orientation(pixels: np.ndarray, path: Path, orientation: int) -> Path:
    exif = Image.Exif()
    exif[ExifTags.Base.Orientation] = orientation
    Image.fromarray(pixels).save(path, exif=exif)
    return path


@pytest.mark.parametrize("orientation, upright", [
    (3, lambda a: np.rot90(a, 2)), (6, lambda a: np.rot90(a, -1)), (8, lambda a: np.rot90(a)),
    (2, lambda a: a[:, ::-1]),
])
def test_exif_orientation_is_applied(tmp_path: Path, orientation, upright) -> None:
    """A camera held sideways: decoded as a viewer shows it, the same for every SUT."""
    pixels = np.random.default_rng(3).integers(0, 256, (60, 90, 3), dtype=np.uint8)
    tagged = _with_orientation(pixels, tmp_path / "tagged.png", orientation)
    Image.fromarray(np.ascontiguousarray(upright(pixels))).save(tmp_path / "upright.png")
    np.testing.assert_array_equal(decode_and_crop(tagged, RECIPE),
                                  decode_and_crop(tmp_path / "upright.png", RECIPE))
    (tmp_path / "val_map.txt").write_text("tagged.png 1\nupright.png 2\n")
    cached = cached_images(ImageFolderDataset(tmp_path), RECIPE, workers=1)
    np.testing.assert_array_equal(cached[0], cached[1])  # the cache holds the upright crop


def test_caches_of_crops_made_before_orientation_are_not_reused(monkeypatch) -> None:
    from quantmark.qsl import preprocess

    now = RECIPE.geometry_key()
    monkeypatch.setattr(preprocess, "GEOMETRY_VERSION", 2)  # decoded without orientation
    assert RECIPE.geometry_key() != now


def test_a_large_image_is_one_log_line_not_pillows_warning(tmp_path: Path, monkeypatch,
                                                           caplog, recwarn) -> None:
    write_image(tmp_path / "big.png", 60, 50, seed=4)  # 3000 pixels
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 2500)  # as 89 Mpixels is to 108 (crop: 2304)
    with caplog.at_level("WARNING", logger="quantmark.qsl.preprocess"):
        assert decode_and_crop(tmp_path / "big.png", RECIPE).shape == (48, 48, 3)
    assert not [w for w in recwarn if issubclass(w.category, Image.DecompressionBombWarning)]
    [record] = caplog.records
    assert "big.png" in record.getMessage() and "2500 pixels" in record.getMessage()
    assert "\n" not in record.getMessage()


def test_an_image_above_pillows_hard_limit_is_refused_in_one_line(tmp_path: Path,
                                                                  monkeypatch) -> None:
    write_image(tmp_path / "huge.png", 60, 50, seed=4)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # hard limit: twice, 2000 < 3000
    with pytest.raises(UserError) as exc:
        decode_and_crop(tmp_path / "huge.png", RECIPE)
    message = _one_line(exc)
    assert "huge.png" in message and "2000 pixels" in message and "downscale it" in message
