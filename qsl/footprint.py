"""What a run's images will take before anything is built: the preprocessed cache on disk
(uint8 ``N x H x W x 3``, ``qsl.cache``) and the samples LoadGen holds in memory (the
performance set, float32 unless the model takes raw uint8 pixels).

``--input-size 10000x10000`` on a dynamic-size model once began a ~30 GB cache file and
would have asked for over 100 GB of memory: a size (or a set) that cannot fit is refused in
one line here, by the parent, before a framework loads or a file is created; the cache's
builder asks again just before it writes (``qsl.cache``), for every path that reaches it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError

#: room kept free on the cache's disk beyond the file itself (logs, results, the artifacts)
DISK_HEADROOM = 1 << 30
GIB = 1 << 30
NPY_HEADER = 128  # numpy's .npy header for a 4-D array
MEMINFO = Path("/proc/meminfo")


def cache_bytes(count: int, height: int, width: int, channels: int = 3) -> int:
    """The preprocessed cache's size: ``count`` uint8 crops (the cache keeps 3 channels)."""
    return count * height * width * max(channels, 3) + NPY_HEADER


def loaded_bytes(loaded: int, channels: int, height: int, width: int,
                 raw_pixels: bool = False) -> int:
    """What ``loaded`` samples take once LoadGen has loaded them: float32 inputs (1 byte a
    value for a model that takes raw uint8 pixels)."""
    return loaded * channels * height * width * (1 if raw_pixels else 4)


def available_memory(meminfo: Path = MEMINFO) -> int | None:
    """MemAvailable in bytes (Linux); None where the kernel does not say (the parent's
    checks, ``quantmark.run.checks``, read it here too)."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _existing(folder: Path) -> Path:
    """``folder`` or its nearest existing parent: where the disk's free space is asked."""
    folder = Path(folder)
    while not folder.exists() and folder.parent != folder:
        folder = folder.parent
    return folder


def free_bytes(folder: Path) -> int:
    return shutil.disk_usage(_existing(folder)).free


def _size(height: int, width: int) -> str:
    return f"{height}x{width}"


def check_disk(count: int, height: int, width: int, folder: Path,
               free: int | None = None) -> None:
    """The cache of ``count`` images at ``height x width`` fits on ``folder``'s disk with
    ``DISK_HEADROOM`` to spare; else one line with both sizes and the fixes."""
    needed = cache_bytes(count, height, width)
    free = free_bytes(folder) if free is None else free
    if needed + DISK_HEADROOM > free:
        raise UserError(f"{count} images at {_size(height, width)} need "
                        f"{needed / GIB:.1f} GiB of preprocessed cache, more than the "
                        f"{max(free - DISK_HEADROOM, 0) / GIB:.1f} GiB free (1 GiB kept) in "
                        f"{_existing(folder)}; pass a smaller input size (--input-size, "
                        "--image-sizes in a sweep), a smaller dataset, or point "
                        "QUANTMARK_CACHE at a larger disk")


def check_loaded(loaded: int, channels: int, height: int, width: int, raw_pixels: bool,
                 available: int | None) -> None:
    """``loaded`` samples fit in ``available`` bytes (None: not known, not judged); else one
    line with both sizes and the fix."""
    needed = loaded_bytes(loaded, channels, height, width, raw_pixels)
    if available is None or needed <= available:
        return
    raise UserError(f"{loaded} loaded samples at {_size(height, width)} need "
                    f"{needed / GIB:.1f} GiB of memory, more than the {available / GIB:.1f} "
                    "GiB available; pass a smaller input size (--input-size, --image-sizes in a "
                    "sweep: the size the model was trained at) or a smaller dataset")


def check_memory(spec: Any, count: int, available: int | None) -> None:
    """The model's performance set (of a dataset of ``count`` images) fits in memory."""
    check_loaded(min(int(spec.performance_sample_count), count), spec.channels,
                 spec.input_size, spec.input_width,
                 getattr(spec, "input_dtype", "float32") == "uint8", available)


def check_recipe_fits(recipe: Any, count: int, performance_count: int) -> None:
    """The QSL's check, before its cache is built: the loaded set of ``recipe``'s inputs
    (every path into a test process: a sweep cell, a fleet node) fits in memory here."""
    check_loaded(min(performance_count, count), recipe.channels, recipe.height, recipe.width,
                 recipe.dtype == "uint8", available_memory())
