"""What does verifying the caches cost at the start of a run of the default job?

The default job is efficientnet-lite0 on the built-in dataset with the ort-fp32 and ort-int8
SUTs. Before it measures, every run now hashes: the dataset's images (for its fingerprint;
memoised by size/mtime/ctime/inode, so only the first run reads them all), the FP32 and INT8
ONNX artifacts, the preprocessed dataset cache and the calibration cache. This script builds
whatever is missing (one-off, as run.py would), then times each verification ``--repeat``
times and prints the medians, next to the raw sha256 throughput of this machine.

    python -m quantmark.bench.cache_verify [--repeat 5]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MODEL = "efficientnet-lite0"
SUTS = ("ort-fp32", "ort-int8")


def median_s(fn: Callable[[], Any], repeat: int) -> float:
    """Median wall time of ``repeat`` calls (the first one included: caches are warm anyway)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def sha256_gbps(size: int = 256 << 20) -> float:
    """Single-thread sha256 throughput over an in-memory buffer, GB/s."""
    data = os.urandom(size)
    start = time.perf_counter()
    hashlib.sha256(data).digest()
    return size / (time.perf_counter() - start) / 1e9


def prepare() -> tuple[Any, list[Any], list[Path]]:
    """Build (or find) everything the default job caches; return the dataset, the two
    artifacts and the preprocessed cache files (dataset and calibration)."""
    from quantmark.models.zoo import get_model
    from quantmark.qsl import cache, open_dataset
    from quantmark.qsl.calibration_sets import CalibrationProvider
    from quantmark.qsl.preprocess import recipe_for
    from quantmark.sut.interface import SutOptions
    from quantmark.sut.onnxruntime.backend import create

    spec = get_model(MODEL)
    dataset = open_dataset(None)
    calibration = CalibrationProvider(dataset, spec, None)
    artifacts = [create(name, SutOptions(model=MODEL, scenario="Offline"), spec,
                        calibration).artifact for name in SUTS]
    recipe = recipe_for(spec, "NCHW")
    for _ in range(2):  # the first pass may build; the second verifies both caches
        cache.VERIFIED.clear()
        cache.cached_images(dataset, recipe)
        calibration.arrays("NCHW")
    return dataset, artifacts, [Path(p) for p in cache.VERIFIED]


def fingerprint_figures(root: Path, repeat: int) -> dict[str, float]:
    """Dataset open + fingerprint with the memo (every later run) and without (the first)."""
    from quantmark.qsl import imagenet
    from quantmark.qsl.imagenet import ImageFolderDataset

    def fingerprint() -> str:
        return ImageFolderDataset(root, builtin=True).fingerprint()

    warm = median_s(fingerprint, repeat)
    read_memo, write_memo = imagenet._read_memo, imagenet._write_memo
    imagenet._read_memo, imagenet._write_memo = (lambda path: {}), (lambda *args: None)
    try:
        cold = median_s(fingerprint, repeat)
    finally:
        imagenet._read_memo, imagenet._write_memo = read_memo, write_memo
    dataset = ImageFolderDataset(root, builtin=True)
    size = sum((root / rel).stat().st_size for rel, _ in dataset.all_items)
    return {"images": len(dataset.all_items), "image_mb": size / 1e6,
            "memoised_s": warm, "all_read_s": cold}


def artifact_figures(artifact: Any, repeat: int) -> dict[str, Any]:
    from quantmark.models.artifacts import load_cached

    folder = Path(artifact.path).parent
    size = sum(f["bytes"] for f in artifact.meta["files"].values())
    seconds = median_s(lambda: load_cached(folder.parent.name, folder.name), repeat)
    return {"artifact": f"{artifact.path.name}", "mb": size / 1e6, "verify_s": seconds,
            "gbps": size / seconds / 1e9}


def cache_figures(path: Path, repeat: int) -> dict[str, Any]:
    import numpy as np

    from quantmark.qsl import cache

    shape = np.load(path, mmap_mode="r").shape
    problem = cache.verify(path, shape)
    if problem is not None:
        raise SystemExit(f"{path} {problem}")
    size = path.stat().st_size
    seconds = median_s(lambda: cache.verify(path, shape), repeat)
    return {"cache": f"{path.parent.name[:12]} {shape[0]} rows", "mb": size / 1e6,
            "verify_s": seconds, "gbps": size / seconds / 1e9}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    dataset, artifacts, caches = prepare()
    figures = {
        "cpus": os.cpu_count(), "sha256_gbps_one_thread": sha256_gbps(),
        "dataset_fingerprint": fingerprint_figures(Path(dataset.root), args.repeat),
        "artifacts": [artifact_figures(a, args.repeat) for a in artifacts],
        "preprocessed": [cache_figures(p, args.repeat) for p in caches],
    }
    fp = figures["dataset_fingerprint"]
    print(f"sha256, one thread, in memory: {figures['sha256_gbps_one_thread']:.2f} GB/s "
          f"({figures['cpus']} CPUs)")
    print(f"dataset fingerprint, {fp['images']} images ({fp['image_mb']:.0f} MB): "
          f"{fp['memoised_s'] * 1e3:.0f} ms memoised, {fp['all_read_s'] * 1e3:.0f} ms reading all")
    for row in figures["artifacts"] + figures["preprocessed"]:
        name = row.get("artifact") or row.get("cache")
        print(f"verify {name}: {row['mb']:.0f} MB in {row['verify_s'] * 1e3:.0f} ms "
              f"({row['gbps']:.2f} GB/s)")
    total = (fp["memoised_s"] + sum(r["verify_s"] for r in figures["artifacts"])
             + sum(r["verify_s"] for r in figures["preprocessed"]))
    print(f"total added to a run's start (memoised fingerprint): {total * 1e3:.0f} ms")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
