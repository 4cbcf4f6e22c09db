"""The preprocessed-image cache: decode/resize/crop once per (dataset, geometry), mmap afterwards.

Layout: ``cache_dir("preprocessed")/<key>/images.npy`` holding uint8 ``(N, crop, crop, 3)`` in
the order of the dataset's ``all_items``, plus ``meta.json``. Only geometry is cached; mean/std
and layout are applied at load time, so models that differ only in normalisation share a cache.

Crash safety: workers write into ``images.npy.<pid>.tmp`` (a memmap, so the parent never holds
the whole set in RAM: ImageNet val is 7.5 GB), which is fsynced and renamed to ``images.npy``
only when every row is written. A leftover temp file is never read; stale ones are removed.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Sequence
from multiprocessing import Pool
from pathlib import Path

import numpy as np
from tqdm import tqdm

from quantmark.errors import UserError
from quantmark.hashing import atomic_write_json, hash_json
from quantmark.paths import cache_dir, pid_alive

from .imagenet import ImageFolderDataset
from .preprocess import PreprocessRecipe, decode_and_crop

log = logging.getLogger(__name__)

CACHE_FILE = "images.npy"
_CHUNK = 16

# Incremented on every real build (not on a cache hit); tests use it to prove "built once".
BUILDS = 0
LAST_BUILD_SECONDS: float | None = None


def cache_key(dataset: ImageFolderDataset, recipe: PreprocessRecipe) -> str:
    """Key of a dataset's cache: its fingerprint and the recipe's geometry, nothing else."""
    return hash_json({"dataset": dataset.fingerprint(), "geometry": recipe.geometry_key()})


def cached_images(
    dataset: ImageFolderDataset, recipe: PreprocessRecipe, workers: int | None = None
) -> np.ndarray:
    """uint8 ``(len(all_items), crop, crop, 3)`` memmap of the dataset, building it if absent.

    Index it with ``dataset.cache_rows`` to get the evaluation items only.
    """
    paths = [dataset.path(rel) for rel, _ in dataset.all_items]
    sources = [dataset.describe(i) for i in range(len(paths))]
    return load_or_build(paths, sources, recipe, cache_key(dataset, recipe), workers)


def cache_path(key: str) -> Path:
    return cache_dir("preprocessed") / key / CACHE_FILE


def load_or_build(
    paths: Sequence[Path],
    sources: Sequence[str],
    recipe: PreprocessRecipe,
    key: str,
    workers: int | None = None,
) -> np.ndarray:
    """Open the cache for ``key`` read-only (mmap); build it first if it is missing or invalid."""
    final = cache_path(key)
    expected = (len(paths), recipe.crop, recipe.crop, 3)
    if final.exists():
        try:
            arr = np.load(final, mmap_mode="r")
            if arr.shape == expected and arr.dtype == np.uint8:
                return arr
            log.warning(
                "cache %s has shape %s, expected %s; rebuilding", final, arr.shape, expected
            )
        except (OSError, ValueError) as exc:
            log.warning("cache %s unreadable (%s); rebuilding", final, exc)
    _build(paths, sources, recipe, final, workers)
    return np.load(final, mmap_mode="r")


def _build(
    paths: Sequence[Path],
    sources: Sequence[str],
    recipe: PreprocessRecipe,
    final: Path,
    workers: int | None,
) -> None:
    """Decode every image into a temp memmap with a worker pool, then rename it into place."""
    global BUILDS, LAST_BUILD_SECONDS
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(final.parent)
    tmp = final.with_name(f"{final.name}.{os.getpid()}.tmp")
    n = len(paths)
    start = time.perf_counter()
    log.info("preprocessing %d images into %s", n, final.parent)
    out = np.lib.format.open_memmap(
        tmp, mode="w+", dtype=np.uint8, shape=(n, recipe.crop, recipe.crop, 3)
    )
    del out  # workers open it themselves; the parent only tracks progress
    tasks = [
        (str(tmp), i, [str(p) for p in paths[i : i + _CHUNK]], recipe) for i in range(0, n, _CHUNK)
    ]
    workers = max(1, min(workers or os.cpu_count() or 1, len(tasks)))
    try:
        print(f"[quantmark.qsl] preprocessing {n} images (resize, crop) with {workers} "
              f"processes into the cache, once ...", file=sys.stderr, flush=True)
        with tqdm(total=n, desc="preprocessing", unit="img", disable=None) as bar:
            if workers == 1:
                results = map(_fill_rows, tasks)
                _consume(results, bar, paths, sources)
            else:
                with Pool(workers) as pool:
                    _consume(pool.imap_unordered(_fill_rows, tasks), bar, paths, sources)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        atomic_write_json(
            final.with_name("meta.json"),
            {
                "count": n,
                "shape": [n, recipe.crop, recipe.crop, 3],
                "dtype": "uint8",
                "resize_short": recipe.resize_short,
                "crop": recipe.crop,
                "geometry_key": recipe.geometry_key(),
                "first": str(paths[0]) if n else None,
                "seconds": round(time.perf_counter() - start, 3),
            },
        )
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    BUILDS += 1
    LAST_BUILD_SECONDS = time.perf_counter() - start
    log.info("preprocessed %d images in %.1f s", n, LAST_BUILD_SECONDS)


def _consume(results, bar: tqdm, paths: Sequence[Path], sources: Sequence[str]) -> None:
    """Advance the bar; turn the first worker decode failure into a one-line UserError."""
    for count, failure in results:
        if failure is not None:
            index, reason = failure
            raise UserError(
                f"image {paths[index]} ({sources[index]}) cannot be decoded ({reason}); "
                "replace the file or remove that line"
            )
        bar.update(count)


def _fill_rows(task: tuple[str, int, list[str], PreprocessRecipe]):
    """Worker: decode one chunk straight into the shared temp memmap (no pickled pixels)."""
    tmp, first, chunk, recipe = task
    out = np.load(tmp, mmap_mode="r+")
    try:
        for offset, path in enumerate(chunk):
            try:
                out[first + offset] = decode_and_crop(path, recipe)
            except Exception as exc:  # report, don't crash the pool with an unpicklable error
                reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
                return offset, (first + offset, reason)
        out.flush()
    finally:
        del out
    return len(chunk), None


def _remove_stale_temps(folder: Path) -> None:
    """Delete temp files left by builders that died (their pid no longer exists)."""
    for tmp in folder.glob(f"{CACHE_FILE}.*.tmp"):
        try:
            pid = int(tmp.name.split(".")[-2])
        except ValueError:
            continue
        if pid != os.getpid() and pid_alive(pid):
            continue
        tmp.unlink(missing_ok=True)

