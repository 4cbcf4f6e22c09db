"""TensorRT's tests; their GPU part skips with the reason where TensorRT or a GPU is missing."""

from __future__ import annotations

import importlib.util

from quantmark.ground.fingerprint import gpu_present


def gpu_skip_reason() -> str | None:
    """Why the TensorRT tests that need a GPU cannot run here (None: they can)."""
    if importlib.util.find_spec("tensorrt") is None:
        return "tensorrt is not installed (pip install 'quantmark[trt]')"
    if not gpu_present():
        return "no NVIDIA GPU (no /dev/nvidiactl or /dev/nvidia0)"
    return None
