from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from quantmark.ground.errors import UserError
from quantmark.qsl import cache, footprint
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


def _files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_a_build_killed_outright_leaves_nothing_in_the_cache(tiny_folder: Path,
                                                             private_cache: Path) -> None:
    """Issue 43: after Ctrl-C the launcher SIGKILLs its test process, which had no chance to
    remove its temp file: a 28 GB one stayed in the cache. The rows now go to an unnamed file
    the kernel frees with the process: a build killed mid-way leaves no file behind."""
    code = textwrap.dedent(f"""
        import time
        from quantmark.qsl import cache
        from quantmark.qsl.imagenet import ImageFolderDataset
        from quantmark.qsl.preprocess import PreprocessRecipe

        real = cache.decode_and_crop

        def slow(path, recipe):
            print("decoding", flush=True)
            time.sleep(60)
            return real(path, recipe)

        cache.decode_and_crop = slow
        cache.cached_images(ImageFolderDataset({str(tiny_folder)!r}), PreprocessRecipe(),
                            workers=1)
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "decoding"  # the build has begun writing
        assert list((private_cache / "preprocessed").rglob("*")), "no build folder yet"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        child.stdout.close()
    assert _files_under(private_cache / "preprocessed") == []


def test_ctrl_c_mid_build_leaves_nothing_and_is_raised(tiny_folder: Path, private_cache: Path,
                                                      monkeypatch) -> None:
    calls = []

    def interrupted(path, recipe):
        calls.append(path)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return decode_and_crop(path, recipe)

    monkeypatch.setattr(cache, "decode_and_crop", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cache.cached_images(ImageFolderDataset(tiny_folder), PreprocessRecipe(), workers=1)
    assert _files_under(private_cache / "preprocessed") == []


def test_without_unnamed_files_the_named_temp_is_used_and_removed(tiny_folder: Path,
                                                                  monkeypatch) -> None:
    """A filesystem without O_TMPFILE (or no /proc): the rows go to images.npy.<pid>.tmp,
    renamed into place when whole, never left behind."""
    monkeypatch.delattr(os, "O_TMPFILE", raising=False)
    ds = ImageFolderDataset(tiny_folder)
    arr = cache.cached_images(ds, PreprocessRecipe(), workers=1)
    final = cache.cache_path(cache.cache_key(ds, PreprocessRecipe()))
    assert arr.shape == (12, 224, 224, 3) and arr[0].any()
    assert sorted(p.name for p in final.parent.iterdir()) == ["images.npy", "meta.json"]


def test_a_set_bigger_than_the_free_disk_is_refused_before_a_byte(tiny_folder: Path,
                                                                 private_cache: Path,
                                                                 monkeypatch) -> None:
    real = shutil.disk_usage
    monkeypatch.setattr(footprint.shutil, "disk_usage",
                        lambda path: real(path)._replace(free=1 << 30))  # 1 GiB free
    big = PreprocessRecipe(resize_short=4096, crop=4096)  # 12 x 48 MiB + the 1 GiB kept
    with pytest.raises(UserError, match=r"12 images at 4096x4096 need 0\.6 GiB of "
                                        r"preprocessed cache, more than the 0\.0 GiB free"):
        cache.cached_images(ImageFolderDataset(tiny_folder), big, workers=1)
    preprocessed = private_cache / "preprocessed"
    assert not preprocessed.exists() or _files_under(preprocessed) == []
