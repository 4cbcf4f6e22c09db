from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from quantmark.qsl import cache
from quantmark.qsl.imagenet import ImageFolderDataset
from quantmark.qsl.preprocess import PreprocessRecipe, decode_and_crop


def test_cache_built_once_and_shared_across_normalisations(tiny_folder: Path) -> None:
    ds = ImageFolderDataset(tiny_folder)
    builds = cache.BUILDS
    arr = cache.cached_images(ds, PreprocessRecipe(), workers=2)
    assert cache.BUILDS == builds + 1
    assert isinstance(arr, np.memmap) and not arr.flags.writeable
    assert arr.shape == (12, 224, 224, 3) and arr.dtype == np.uint8
    np.testing.assert_array_equal(
        arr[5], decode_and_crop(ds.path(ds.items[5][0]), PreprocessRecipe())
    )
    path = cache.cache_path(cache.cache_key(ds, PreprocessRecipe()))
    mtime = path.stat().st_mtime_ns
    # Different mean/std/layout: same geometry, same cache, no rebuild.
    tf_style = PreprocessRecipe(mean=(127.0,) * 3, std=(128.0,) * 3, layout="NHWC")
    again = cache.cached_images(ImageFolderDataset(tiny_folder), tf_style)
    assert cache.BUILDS == builds + 1 and path.stat().st_mtime_ns == mtime
    np.testing.assert_array_equal(again, arr)
    # Different geometry: a separate cache.
    small = cache.cached_images(ds, PreprocessRecipe(resize_short=160, crop=128), workers=1)
    assert small.shape == (12, 128, 128, 3) and cache.BUILDS == builds + 2


def test_leftover_temp_is_not_a_cache(tiny_folder: Path) -> None:
    ds = ImageFolderDataset(tiny_folder)
    final = cache.cache_path(cache.cache_key(ds, PreprocessRecipe()))
    final.parent.mkdir(parents=True)
    # A builder that crashed mid-way left a half-written temp file (pid that no longer exists).
    dead_pid = 2**22 + 12345
    stale = final.with_name(f"{final.name}.{dead_pid}.tmp")
    np.lib.format.open_memmap(stale, mode="w+", dtype=np.uint8, shape=(12, 224, 224, 3))
    builds = cache.BUILDS
    arr = cache.cached_images(ds, PreprocessRecipe(), workers=1)
    assert cache.BUILDS == builds + 1  # built for real, temp not taken as the cache
    assert arr[0].any() and not stale.exists()
    assert sorted(p.name for p in final.parent.iterdir()) == ["images.npy", "meta.json"]


def test_truncated_cache_is_rebuilt(tiny_folder: Path) -> None:
    ds = ImageFolderDataset(tiny_folder)
    cache.cached_images(ds, PreprocessRecipe(), workers=1)
    final = cache.cache_path(cache.cache_key(ds, PreprocessRecipe()))
    with open(final, "r+b") as handle:
        handle.truncate(os.path.getsize(final) // 2)
    builds = cache.BUILDS
    arr = cache.cached_images(ds, PreprocessRecipe(), workers=1)
    assert cache.BUILDS == builds + 1 and arr.shape == (12, 224, 224, 3)


def test_cache_honours_quantmark_cache(tiny_folder: Path, private_cache: Path) -> None:
    ds = ImageFolderDataset(tiny_folder)
    cache.cached_images(ds, PreprocessRecipe(), workers=1)
    assert list(private_cache.rglob("images.npy"))
