"""The preprocessed-image cache: decode/resize/crop once per (dataset, geometry), mmap afterwards.

Layout: ``cache_dir("preprocessed")/<key>/images.npy`` holding uint8 ``(N, crop, crop, 3)`` in
the order of the dataset's ``all_items``, plus ``meta.json``. Only geometry is cached; mean/std
and layout are applied at load time, so models that differ only in normalisation share a cache.

Crash safety: workers write into an unnamed file of the cache's folder (Linux ``O_TMPFILE``, a
memmap, so the parent never holds the whole set in RAM: ImageNet val is 7.5 GB), which is
fsynced, given a name and renamed to ``images.npy`` only when every row is written: a build
killed outright (the launcher's SIGKILL after Ctrl-C, the OOM killer) leaves nothing, as the
kernel frees an unnamed file with its last descriptor. Where the filesystem has no unnamed
files, the rows go to ``images.npy.<pid>.tmp``, removed on any exception (KeyboardInterrupt
included); one a killed builder left is never read, and every build removes those of dead
builders in every key's folder. A set that cannot fit on the disk is refused before any byte
is written (``qsl.footprint``).

Verified, not trusted: ``meta.json`` records the sha256 of every ``CHUNK_BYTES`` slice of
``images.npy`` (hashed from disk once the build is complete), and every open hashes the file
again before it is mapped; a mismatch (zeroed bytes, a truncated file, a missing or older
meta.json) is logged on one line and rebuilt. Why the whole file on every open: sha256 runs at
~2 GB/s per core with SHA extensions (2.1 GB/s measured on this project's 2-vCPU VM; 0.3-0.5 GB/s
without them) and the slices are hashed by a thread per core (hashlib releases the GIL), so the
built-in set (1536 crops, 231 MB) costs 0.1-0.3 s (bench/cache_verify.py) and ImageNet val
(7.5 GB) a few seconds on a multi-core machine, about what reading it from disk costs anyway:
an accuracy run reads every row. Verifying only the rows LoadGen loads would need the QSL to
ask per row; the per-slice hashes keep that possible, and say where a corruption is.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import atomic_write_json, hash_json
from quantmark.ground.paths import cache_dir, pid_alive

from . import footprint
from .builtin import forget, generated_root
from .footprint import check_disk
from .imagenet import ImageFolderDataset
from .preprocess import PreprocessRecipe, decode_and_crop

log = logging.getLogger(__name__)

CACHE_FILE = "images.npy"
META_FILE = "meta.json"
_CHUNK = 16
CHUNK_BYTES = 16 << 20  # hashed slice of images.npy: ~15 for the built-in set, ~450 for ImageNet
_READ_BYTES = 4 << 20

# Incremented on every real build (not on a cache hit); tests use it to prove "built once".
BUILDS = 0
LAST_BUILD_SECONDS: float | None = None
# What the last verification of each cache file found: {path: digest of its slice hashes}.
VERIFIED: dict[str, str] = {}


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
    expected = (len(paths), recipe.height, recipe.width, 3)
    if final.exists():
        problem = verify(final, expected)
        if problem is None:
            return np.load(final, mmap_mode="r")
        log.warning("preprocessed cache %s %s; rebuilding it", final, problem)
    _build(paths, sources, recipe, final, workers)
    problem = verify(final, expected)  # what was just written is checked like any other use
    if problem is not None:
        raise OSError(f"preprocessed cache {final} {problem} right after it was built")
    return np.load(final, mmap_mode="r")


def verify(final: Path, expected: tuple[int, ...]) -> str | None:
    """None if ``final`` has the expected shape and matches the slice hashes in meta.json,
    else what is wrong (one phrase). Records the verified digest in ``VERIFIED``."""
    try:
        content = json.loads(final.with_name(META_FILE).read_text())["content"]
        want, chunk_bytes, size = content["chunks"], int(content["chunk_bytes"]), content["size"]
    except (OSError, ValueError, KeyError, TypeError):
        return "has no readable content hashes in meta.json (built by an older quantmark?)"
    try:
        actual = final.stat().st_size
        if actual != size:
            return f"has {actual} bytes, {size} when built (truncated?)"
        arr = np.load(final, mmap_mode="r")
        shape, dtype = arr.shape, arr.dtype
        del arr
        if shape != expected or dtype != np.uint8:
            return f"has shape {shape} {dtype}, expected {expected} uint8"
        got = hash_chunks(final, chunk_bytes)
    except (OSError, ValueError) as exc:
        return f"is unreadable ({' '.join(str(exc).split())})"
    bad = [i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b]
    if bad or len(got) != len(want):
        first = bad[0] if bad else min(len(got), len(want))
        return (f"does not match its hashes ({len(bad) or 1} of {len(want)} slices differ, "
                f"first at byte {first * chunk_bytes})")
    VERIFIED[str(final)] = hash_json(got, 64)
    return None


def hash_chunks(path: Path, chunk_bytes: int = CHUNK_BYTES) -> list[str]:
    """sha256 of each ``chunk_bytes`` slice of ``path``, one thread per core."""
    size = path.stat().st_size
    starts = range(0, size, chunk_bytes)
    fd = os.open(path, os.O_RDONLY)
    try:
        def one(start: int) -> str:
            digest = hashlib.sha256()
            end = min(start + chunk_bytes, size)
            for offset in range(start, end, _READ_BYTES):
                data = os.pread(fd, min(_READ_BYTES, end - offset), offset)
                if not data:
                    raise OSError(f"{path} ended early at byte {offset}")
                digest.update(data)
            return digest.hexdigest()

        threads = max(1, min(len(starts), os.cpu_count() or 1, 16))
        with ThreadPoolExecutor(threads) as pool:
            return list(pool.map(one, starts))
    finally:
        os.close(fd)


def _build(
    paths: Sequence[Path],
    sources: Sequence[str],
    recipe: PreprocessRecipe,
    final: Path,
    workers: int | None,
) -> None:
    """Decode every image into a temp memmap with a worker pool, then rename it into place."""
    global BUILDS, LAST_BUILD_SECONDS
    n = len(paths)
    check_disk(n, recipe.height, recipe.width, final.parent)
    created = not final.parent.exists()
    final.parent.mkdir(parents=True, exist_ok=True)
    for folder in final.parent.parent.iterdir():
        _remove_stale_temps(folder)
    start = time.perf_counter()
    log.info("preprocessing %d images into %s", n, final.parent)
    scratch = Scratch(final)
    try:
        out = np.lib.format.open_memmap(
            scratch.path, mode="w+", dtype=np.uint8, shape=(n, recipe.height, recipe.width, 3)
        )
        del out  # workers open it themselves; the parent only tracks progress
        _fill(paths, sources, recipe, scratch.path, workers)
        _fsync(scratch.path)
        atomic_write_json(final.with_name(META_FILE), _meta(scratch.path, n, recipe, paths,
                                                             start))
        scratch.publish(final)
    except BaseException:
        scratch.discard()
        if not final.exists():  # a meta.json of rows never published describes nothing
            final.with_name(META_FILE).unlink(missing_ok=True)
        if created:
            _remove_if_empty(final.parent)
        raise
    BUILDS += 1
    LAST_BUILD_SECONDS = time.perf_counter() - start
    log.info("preprocessed %d images in %.1f s", n, LAST_BUILD_SECONDS)


def _fill(paths: Sequence[Path], sources: Sequence[str], recipe: PreprocessRecipe,
          target: Path, workers: int | None) -> None:
    """Decode every image into the rows of ``target`` with a worker pool."""
    n = len(paths)
    tasks = [
        (str(target), i, [str(p) for p in paths[i : i + _CHUNK]], recipe)
        for i in range(0, n, _CHUNK)
    ]
    workers = max(1, min(workers or os.cpu_count() or 1, len(tasks)))
    log.info("preprocessing %d images (resize, crop) with %d processes into the cache, "
             "once ...", n, workers)
    with tqdm(total=n, desc="preprocessing", unit="img", disable=None) as bar:
        if workers == 1:
            _consume(map(_fill_rows, tasks), bar, paths, sources)
        else:
            with Pool(workers) as pool:
                _consume(pool.imap_unordered(_fill_rows, tasks), bar, paths, sources)


def _fsync(path: Path) -> None:
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())


def _meta(path: Path, n: int, recipe: PreprocessRecipe, paths: Sequence[Path],
          start: float) -> dict[str, Any]:
    """meta.json of a finished build: its content hashes (read back from disk) and geometry."""
    return {
        "content": _content_record(path),
        "count": n,
        "shape": [n, recipe.height, recipe.width, 3],
        "dtype": "uint8",
        "resize_short": recipe.resize_short,
        "crop": recipe.crop,
        "geometry_key": recipe.geometry_key(),
        "first": str(paths[0]) if n else None,
        "seconds": round(time.perf_counter() - start, 3),
    }


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:  # not empty (another builder's, a meta.json), or gone
        pass


class Scratch:
    """The file a build writes its rows into: unnamed (``O_TMPFILE``: a killed build leaves
    nothing) where the filesystem allows, else ``images.npy.<pid>.tmp``. ``path`` is what
    the parent and the workers open; ``publish`` names it ``final``; ``discard`` drops it."""

    def __init__(self, final: Path) -> None:
        self.named = final.with_name(f"{final.name}.{os.getpid()}.tmp")
        self.fd: int | None = None
        try:
            self.fd = os.open(final.parent, os.O_TMPFILE | os.O_RDWR, 0o644)
        except (AttributeError, OSError):  # not Linux, or a filesystem without them
            self.path = self.named
            return
        self.path = Path(f"/proc/{os.getpid()}/fd/{self.fd}")
        if not self.path.exists():  # no /proc to reopen it by: the named file
            os.close(self.fd)
            self.fd, self.path = None, self.named

    def publish(self, final: Path) -> None:
        if self.fd is not None:  # a name for the finished file, then the final one
            proc = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.link(str(self.fd), self.named, src_dir_fd=proc, follow_symlinks=True)
            finally:
                os.close(proc)
        os.replace(self.named, final)
        self.discard()

    def discard(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        self.named.unlink(missing_ok=True)


def _content_record(path: Path) -> dict[str, Any]:
    """The slice hashes of the finished file, read back from disk as ``verify`` will."""
    return {"algorithm": "sha256", "chunk_bytes": CHUNK_BYTES, "size": path.stat().st_size,
            "chunks": hash_chunks(path, CHUNK_BYTES)}


def _consume(results, bar: tqdm, paths: Sequence[Path], sources: Sequence[str]) -> None:
    """Advance the bar; turn the first worker decode failure into a one-line UserError."""
    for count, failure in results:
        if failure is not None:
            index, reason = failure
            raise _undecodable(paths[index], sources[index], reason)
        bar.update(count)


def _undecodable(path: Path, source: str, reason: str) -> UserError:
    """The error for an image that will not decode. The user fixes their own dataset; the
    built-in one is generated data, so it is marked for regeneration instead."""
    root = generated_root(path)
    if root is None:
        if source == str(path):  # a class folder's image: no list names it
            return UserError(f"image {path} cannot be decoded ({reason}); replace or remove "
                             "the file")
        return UserError(f"image {path} ({source}) cannot be decoded ({reason}); "
                         "replace the file or remove that line")
    forget(root)
    return UserError(f"image {path} of the generated built-in dataset cannot be decoded "
                     f"({reason}); the dataset is regenerated on the next run: run again")


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


def check_set_fits(spec: Any, dataset: Any, available: int | None) -> None:
    """The run's images fit: in memory once loaded and, unless its cache is built already,
    on the cache's disk. ``dataset``: the opened image dataset (its fingerprint keys the
    cache)."""
    from quantmark.qsl.preprocess import recipe_for

    count = len(dataset.all_items)
    footprint.check_memory(spec, count, available)
    final = cache_path(cache_key(dataset, recipe_for(spec, "NCHW")))
    if not final.exists():
        footprint.check_disk(count, spec.input_size, spec.input_width, final.parent)
