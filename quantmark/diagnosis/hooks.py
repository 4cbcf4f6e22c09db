"""The parts of a framework folder that ``run.py diagnose`` and ``run.py profile`` use beyond
the SUT itself: its ``diagnose`` module (layer capture, exclusion, faults) and its ``profile``
module (per-layer times).

Both jobs, and the recovery curve's pricing, ask here, below all of them, so none imports
another job's module to find a framework's.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from quantmark.ground.errors import UserError


def diagnoser(info: Any) -> ModuleType:
    """The ``diagnose`` module of the SUT's framework folder, or a one-line error."""
    try:
        return importlib.import_module(f"{info.package}.diagnose")
    except ModuleNotFoundError as exc:
        if exc.name != f"{info.package}.diagnose":
            raise
        raise UserError(f"diagnose: {info.framework} ({info.name}) has no layer capture yet; "
                        "diagnose an ONNX Runtime, OpenVINO, TFLite, PyTorch or TensorRT "
                        "SUT") from None


def profiler(info: Any) -> ModuleType | None:
    """The ``profile`` module of the SUT's framework folder, or None where it has none."""
    try:
        return importlib.import_module(f"{info.package}.profile")
    except ModuleNotFoundError as exc:
        if exc.name != f"{info.package}.profile":
            raise
        return None


def text_refusal(info: Any, module: ModuleType | None, job: str) -> str | None:
    """Why ``job`` (profile, diagnose) cannot run a text model on the SUT ``info`` yet (None:
    it can): its framework's module opts in with ``TEXT_MODELS = True`` once it feeds token
    samples and reads a transformer's layers."""
    if module is not None and getattr(module, "TEXT_MODELS", False):
        return None
    return (f"{job}: not yet for text models on {info.framework} ({info.name}); use an "
            "ort-* SUT")
