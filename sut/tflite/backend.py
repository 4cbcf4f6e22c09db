"""TFLite's SUT factory (``SutInfo``'s ``.backend:create``): the .tflite prepared for the SUT
and its backend built, ``interpreter_backend.TFLiteBackend`` for an image model or a detector,
``text``'s subclass for a text encoder. The backend's names are re-exported for callers of
before the split (kept apart so that ``text`` can subclass the backend without a cycle)."""

from __future__ import annotations

from typing import Any

from quantmark.ground.errors import UserError
from quantmark.sut.interface import SutOptions
from quantmark.sut.tflite.convert import tflite_sut
from quantmark.sut.tflite.interpreter_backend import (
    INVOKE_MODES,
    TFLiteBackend,
    delegation,
    dequantize,
    native_stderr,
    quantize,
)
from quantmark.sut.tflite.suts import TFLITE_INVOKE_OPTION, TFLITE_QUANTIZE_OPTION

__all__ = ["TFLiteBackend", "create", "delegation", "dequantize", "native_stderr", "quantize"]


def create(name: str, options: SutOptions, spec: Any, calibration: Any) -> TFLiteBackend:
    """Prepare the .tflite (user file as is, or converted for ``name``) and build the backend.

    ``calibration`` (``arrays(layout)``, ``hash()``) is only read for tflite-int8 conversion.
    """
    from quantmark.models.text_graph import is_text
    from quantmark.sut.tflite.convert import prepare_tflite

    invoke = str(options.extra.get(TFLITE_INVOKE_OPTION, "batched"))
    if invoke not in INVOKE_MODES:
        raise UserError(f"tflite_invoke={invoke!r}: choose one of {', '.join(INVOKE_MODES)}")
    if is_text(spec):  # token inputs, a SavedModel at [1, seq_len]: its own backend
        from quantmark.sut.tflite.text import create_text

        return create_text(name, options, spec, calibration, invoke)
    artifact = prepare_tflite(name, spec, options.model_path, calibration)
    return TFLiteBackend(artifact, tflite_sut(name).precision_key, options.threads, invoke,
                         str(options.extra.get(TFLITE_QUANTIZE_OPTION, "at-load")))
