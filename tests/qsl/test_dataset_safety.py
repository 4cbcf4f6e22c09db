"""Images outside the dataset folder are refused; high bit depths are scaled, not clipped."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

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
    os.symlink(root / "val" / "ok.png", root / "val" / "alias.png")
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
