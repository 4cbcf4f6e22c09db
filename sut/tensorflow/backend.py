"""TensorFlow's SUT factory (``SutInfo``'s ``.backend:create``): threads set, the SavedModel
converted (or taken from the cache) and its backend built, ``saved_model_backend``'s for an
image model or a detector, ``text``'s subclass for a text encoder. The backend's names are
re-exported for callers of before the split (kept apart so that ``text`` can subclass the
backend without a cycle)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quantmark.ground.errors import SutError, UserError
from quantmark.sut.interface import SutOptions
from quantmark.sut.registry import module_sut
from quantmark.sut.tensorflow.saved_model_backend import (
    AMP_OPTIONS,
    MODEL_PATH_FORMATS,
    TensorFlowBackend,
)

__all__ = ["AMP_OPTIONS", "TensorFlowBackend", "check_model_path", "create"]


def _apply_threads(name: str, threads: int) -> None:
    """Intra-op threads can only be set before TensorFlow's runtime starts (the conversion
    starts it), so this runs first in ``create``; a started runtime with another count fails."""
    if not threads:
        return
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    except RuntimeError:
        current = tf.config.threading.get_intra_op_parallelism_threads()
        raise SutError(f"{name}: cannot use {threads} intra-op threads: TensorFlow already "
                       f"started in this process with {current or 'its default'}; run one "
                       "TensorFlow SUT per process") from None


def _gpu_memory_growth() -> None:
    """Let TensorFlow take GPU memory as it needs it, not all of it at start (which would make
    the tracker's GPU memory the whole card). Only possible before the GPU is initialised."""
    import tensorflow as tf

    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:  # already initialised in this process
            pass


def check_model_path(model_path: str | None, model: str) -> None:
    """Only what ``export_saved_model`` converts: state_dict, ONNX, SavedModel directory."""
    from quantmark.models.source import is_torch_weights

    if model_path is None or Path(model_path).is_dir() or is_torch_weights(model_path) \
            or model_path.endswith(".onnx"):
        return
    raise UserError(f"--model-path {model_path}: the TensorFlow SUTs take "
                    f"{', '.join(MODEL_PATH_FORMATS[:-1])} or {MODEL_PATH_FORMATS[-1]} "
                    f"(model {model})")


def create(name: str, options: SutOptions, spec: Any, calibration: Any) -> TensorFlowBackend:
    """Set the thread count, convert (or take from the cache) the SavedModel, build the backend.

    ``calibration`` is unused: no TensorFlow SUT quantizes.
    """
    module_sut(name, __name__)  # another module's SUT: one line naming this module's
    from quantmark.models.text_graph import is_text
    from quantmark.models.text_saved_model import refuse_dynamic_padding

    if is_text(spec):
        refuse_dynamic_padding(name, spec)
    check_model_path(options.model_path, options.model)
    _gpu_memory_growth()
    _apply_threads(name, options.threads)
    from quantmark.models.saved_model import export_saved_model

    artifact = export_saved_model(spec, options.model_path)
    if is_text(spec):  # token inputs by name, at [1, seq_len]
        from quantmark.sut.tensorflow.text import TextTensorFlowBackend

        return TextTensorFlowBackend(name, artifact, spec, options.threads)
    return TensorFlowBackend(name, artifact, spec, options.threads)
