"""The preprocessed cache is verified on use; the dataset fingerprint follows image content."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import pytest

from quantmark.qsl import cache, imagenet
from quantmark.qsl.imagenet import ImageFolderDataset
from quantmark.qsl.preprocess import PreprocessRecipe, decode_and_crop
from tests.qsl.conftest import write_image


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "quantmark.qsl.cache" and r.levelno == logging.WARNING]


def _cache_file(ds: ImageFolderDataset) -> Path:
    return cache.cache_path(cache.cache_key(ds, PreprocessRecipe()))


def test_zeroed_block_of_the_same_size_is_rebuilt(tiny_folder: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    ds = ImageFolderDataset(tiny_folder)
    cache.cached_images(ds, PreprocessRecipe(), workers=1)
    final = _cache_file(ds)
    size = final.stat().st_size
    with open(final, "r+b") as handle:  # 100 KB of zeros in the middle, size unchanged
        handle.seek(size // 2)
        handle.write(bytes(100_000))
    assert final.stat().st_size == size
    builds = cache.BUILDS
    with caplog.at_level(logging.WARNING):
        arr = cache.cached_images(ImageFolderDataset(tiny_folder), PreprocessRecipe(), workers=1)
    assert cache.BUILDS == builds + 1
    (message,) = _warnings(caplog)
    assert "\n" not in message and "does not match" in message and "rebuilding" in message
    row = size // 2 // (224 * 224 * 3)
    np.testing.assert_array_equal(
        arr[row], decode_and_crop(ds.path(ds.all_items[row][0]), PreprocessRecipe()))
    # the rebuilt cache verifies: used as is next time
    cache.cached_images(ImageFolderDataset(tiny_folder), PreprocessRecipe(), workers=1)
    assert cache.BUILDS == builds + 1 and str(final) in cache.VERIFIED


def test_cache_without_content_hashes_is_rebuilt(tiny_folder: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """A cache an older quantmark built has nothing to verify against."""
    ds = ImageFolderDataset(tiny_folder)
    cache.cached_images(ds, PreprocessRecipe(), workers=1)
    meta = _cache_file(ds).with_name("meta.json")
    data = json.loads(meta.read_text())
    assert len(data["content"]["chunks"]) == 1 and data["content"]["algorithm"] == "sha256"
    del data["content"]
    meta.write_text(json.dumps(data))
    builds = cache.BUILDS
    with caplog.at_level(logging.WARNING):
        cache.cached_images(ds, PreprocessRecipe(), workers=1)
    assert cache.BUILDS == builds + 1 and "content hashes" in _warnings(caplog)[0]


def test_slice_hashes_name_the_corrupted_slice(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(256)) * 40)  # 10240 bytes: 3 slices of 4096
    before = cache.hash_chunks(path, 4096)
    with open(path, "r+b") as handle:
        handle.seek(5000)
        handle.write(b"\0\0")
    after = cache.hash_chunks(path, 4096)
    assert len(before) == 3 and ([a != b for a, b in zip(before, after, strict=True)]
                                == [False, True, False])


def test_same_size_content_change_changes_fingerprint_and_key(tiny_folder: Path) -> None:
    before = ImageFolderDataset(tiny_folder)
    key = cache.cache_key(before, PreprocessRecipe())
    image = tiny_folder / "val" / "img_03.jpg"
    data = bytearray(image.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte flipped: same size
    image.write_bytes(bytes(data))
    after = ImageFolderDataset(tiny_folder)
    assert image.stat().st_size == len(data)
    assert after.fingerprint() != before.fingerprint()
    assert cache.cache_key(after, PreprocessRecipe()) != key


def test_memoised_hashes_still_see_edits_that_keep_size_and_mtime(
        tiny_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unchanged files are not read again; an edit that restores size and mtime changes ctime."""
    monkeypatch.setattr(imagenet, "RACY_NS", 0)  # memoise even files written just now
    image = tiny_folder / "val" / "img_04.png"
    first = ImageFolderDataset(tiny_folder).fingerprint()
    reads: list[Path] = []
    real_hash = imagenet.hash_file
    monkeypatch.setattr(imagenet, "hash_file", lambda p, n: reads.append(p) or real_hash(p, n))
    assert ImageFolderDataset(tiny_folder).fingerprint() == first and reads == []
    stat = image.stat()
    time.sleep(0.05)  # past the file system's timestamp tick
    data = bytearray(image.read_bytes())
    data[-20] ^= 0x01
    image.write_bytes(bytes(data))
    os.utime(image, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # as a tool keeping mtime would
    assert image.stat().st_size == stat.st_size and image.stat().st_mtime_ns == stat.st_mtime_ns
    assert ImageFolderDataset(tiny_folder).fingerprint() != first
    assert reads == [image]


def test_fingerprint_is_the_same_for_a_copy(tiny_folder: Path, tmp_path: Path) -> None:
    """Content, not inodes: an exported copy of a dataset keeps its fingerprint."""
    copy = tmp_path / "copy"
    for rel, _ in ImageFolderDataset(tiny_folder).all_items:
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        (copy / rel).write_bytes((tiny_folder / rel).read_bytes())
    (copy / "val_map.txt").write_bytes((tiny_folder / "val_map.txt").read_bytes())
    assert ImageFolderDataset(copy).fingerprint() == ImageFolderDataset(tiny_folder).fingerprint()
    write_image(copy / "val" / "img_00.png", 50, 50, seed=99)
    assert ImageFolderDataset(copy).fingerprint() != ImageFolderDataset(tiny_folder).fingerprint()
