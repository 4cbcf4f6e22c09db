"""TensorRT's INT8 calibration on quantmark's shared calibration set.

``IInt8EntropyCalibrator2`` runs the FP32 network over the calibration images in fixed-size
batches and picks per-tensor scales. Its result, the calibration cache, is kept under
``cache_dir("models")/<model>/trt-calibration/`` keyed by the ONNX, the calibration set, the
TensorRT version and the calibrator settings, so a second engine of the same model (another
batch profile) reuses it without calibrating again. Batching and the cache file need no GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.hashing import atomic_write_bytes, hash_json
from quantmark.ground.paths import cache_dir
from quantmark.sut.tensorrt import cuda_runtime as cuda

CALIBRATOR = "entropy2"
CALIBRATION_BATCH = 8


def calibration_cache_path(model: str, onnx_key: str, calibration_hash: str, trt_version: str,
                           batch_size: int = CALIBRATION_BATCH) -> Path:
    """Where the entropy calibrator's cache for this (network, calibration set) lives: beside
    the model's engines, not inside one, so every engine of the model shares it."""
    key = hash_json({"what": "tensorrt-calibration-cache", "onnx": onnx_key,
                     "calibration": calibration_hash, "tensorrt": trt_version,
                     "algorithm": CALIBRATOR, "batch": batch_size})
    return cache_dir("models") / model / "trt-calibration" / f"{key}.cache"



class CalibrationBatcher:
    """Serves a float32 calibration array in batches of exactly ``batch_size`` samples.

    TensorRT's calibrator wants exactly ``get_batch_size()`` samples per batch. The last
    partial batch is **padded**, not dropped, by wrapping around to the first samples of the
    set: every calibration image is seen whatever the batch size (dropping would lose up to
    ``batch_size - 1`` images of a small shared set and make the scales depend on the batch
    size), and the padding is real images repeated, not zeros (zeros would pile up at 0 in the
    entropy calibrator's histograms). A set smaller than one batch is repeated to fill it.
    After the last batch ``next_batch`` returns None until ``reset``.
    """

    def __init__(self, data: np.ndarray, batch_size: int = CALIBRATION_BATCH) -> None:
        if batch_size < 1:
            raise ValueError(f"batch size must be >= 1, got {batch_size}")
        if data.ndim < 2 or len(data) == 0:
            raise ValueError(f"calibration data must be a non-empty batch, got {data.shape}")
        self.data = data
        self.batch_size = batch_size
        self.total_batches = -(-len(data) // batch_size)
        self.padded = self.total_batches * batch_size - len(data)
        self.served = 0

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape[1:])

    @property
    def batch_nbytes(self) -> int:
        return int(self.batch_size * np.prod(self.sample_shape)) * 4

    def next_batch(self) -> np.ndarray | None:
        """The next C-contiguous float32 batch of ``batch_size`` samples, or None at the end."""
        if self.served >= self.total_batches:
            return None
        start = self.served * self.batch_size
        self.served += 1
        end = start + self.batch_size
        if end <= len(self.data):
            chunk = self.data[start:end]
        else:
            chunk = self.data[np.arange(start, end) % len(self.data)]
        return np.ascontiguousarray(chunk, dtype=np.float32)

    def reset(self) -> None:
        self.served = 0


class CalibrationCache:
    """The calibration cache file: read back when present (TensorRT then skips calibration),
    written atomically when TensorRT hands over a fresh one."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.hit = False  # a cache was read and handed to TensorRT
        self.written = False

    def read(self) -> bytes | None:
        try:
            data = self.path.read_bytes()
        except OSError:
            return None
        if not data:
            return None
        self.hit = True
        return data

    def write(self, data: bytes) -> None:
        atomic_write_bytes(self.path, bytes(data))
        self.written = True


def make_entropy_calibrator(batcher: CalibrationBatcher, cache: CalibrationCache) -> Any:
    """An ``IInt8EntropyCalibrator2`` over ``batcher`` (defined here: TensorRT is imported
    only when a calibrator is needed). It owns one device buffer of a batch; ``free`` it."""
    import tensorrt as trt

    runtime = cuda.cuda_runtime()

    class EntropyCalibrator(trt.IInt8EntropyCalibrator2):
        def __init__(self) -> None:
            trt.IInt8EntropyCalibrator2.__init__(self)
            self.device = cuda.cuda_call(runtime.cudaMalloc(batcher.batch_nbytes))

        def get_batch_size(self) -> int:
            return batcher.batch_size

        def get_batch(self, names: list[str]) -> list[int] | None:
            batch = batcher.next_batch()
            if batch is None:
                return None
            cuda.cuda_call(runtime.cudaMemcpy(self.device, batch.ctypes.data, batch.nbytes,
                                         runtime.cudaMemcpyKind.cudaMemcpyHostToDevice))
            return [int(self.device)] * len(names)

        def read_calibration_cache(self) -> bytes | None:
            return cache.read()

        def write_calibration_cache(self, data: Any) -> None:
            cache.write(bytes(data))

        def free(self) -> None:
            if self.device:
                cuda.cuda_call(runtime.cudaFree(self.device))
                self.device = 0

    return EntropyCalibrator()
