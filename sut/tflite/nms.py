"""LiteRT's NMS for a detector's postprocessing: TF's ``NonMaxSuppressionV4`` (the op under
``tf.image.non_max_suppression``, in its padded form that also answers how many it kept) in a
TF function, converted by TensorFlow's TFLite converter to a LiteRT model of that one builtin
op (NON_MAX_SUPPRESSION_V4) and run in ai-edge-litert's Interpreter. (The plain
``tf.image.non_max_suppression`` converts to the same op but pads its answer with zeros and
drops the count; ``non_max_suppression_padded`` does not convert to builtins at all.)

The converted model is cached as an artifact (hash-verified on every load, as every other
model), so TensorFlow is needed only the first time. Where the op differs from quantmark's
numpy ``nms``, the inputs are adapted (checked in tests/sut/tflite):

- LiteRT drops a box whose IoU with a kept box is at or above the threshold, numpy only above
  it: the op gets the next float32 above the threshold (at least float32's smallest normal).
- Its queue orders by score alone, so tied scores come out in heap order, not lower index
  first: the op gets each box's rank in numpy's order (score descending, ties by index) as its
  score, which orders the same and ties nowhere (the scores are not otherwise used).
- A box it keeps goes back into its queue and is dropped on the next pass by its IoU of 1
  with itself; a box without an area (IoU 0) or a threshold above 1 would be kept again and
  again. The task's ``NativeSuppressor`` never passes it a box without an area, and at a
  threshold of 1 or more (IoU never exceeds 1, so nothing is suppressed) the answer is the
  ranking itself, without the op.
- Its score threshold is -inf, so no box is dropped for its score.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.errors import SutError
from quantmark.ground.hashing import hash_json
from quantmark.models.artifacts import Artifact, cached_build, progress

NAME = "LiteRT NON_MAX_SUPPRESSION_V4"
OP = "NON_MAX_SUPPRESSION_V4"
#: what determines the converted file: bump ``version`` when the TF function changes
RECIPE = {"op": OP, "function": "tf.raw_ops.NonMaxSuppressionV4", "version": 1}
CACHE_MODEL = "litert-nms"  # its folder in the model cache


def op_threshold(iou_threshold: float) -> np.float32:
    """The threshold that makes LiteRT's ``IoU >= t`` drop exactly what ``IoU >
    iou_threshold`` drops in float32."""
    above = np.nextafter(np.float32(iou_threshold), np.float32(np.inf))
    return np.float32(max(above, np.finfo(np.float32).tiny))


def _convert(folder: Path) -> Artifact:
    """The LiteRT model of the op, written into ``folder`` (TensorFlow imported only here)."""
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise SutError("LiteRT's NMS model is converted once by TensorFlow's TFLite converter "
                       "and TensorFlow is not installed: pip install tensorflow, once") from exc

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="boxes"),
                                  tf.TensorSpec([None], tf.float32, name="scores"),
                                  tf.TensorSpec([], tf.int32, name="max_keep"),
                                  tf.TensorSpec([], tf.float32, name="iou_threshold")])
    def suppress(boxes: Any, scores: Any, max_keep: Any, iou_threshold: Any) -> Any:
        return tf.raw_ops.NonMaxSuppressionV4(
            boxes=boxes, scores=scores, max_output_size=max_keep, iou_threshold=iou_threshold,
            score_threshold=tf.constant(float("-inf")), pad_to_max_output_size=True)

    progress("converting LiteRT's NMS op (once)")
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [suppress.get_concrete_function()], suppress)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    path = folder / "nms.tflite"
    path.write_bytes(converter.convert())
    return Artifact(path=path, format="tflite", precision="fp32", key="", weights="none (NMS)",
                    source_hash=hash_json(RECIPE), meta={"tensorflow": tf.__version__})


class LiteRtNms:
    """The converted op; an Interpreter is not to be shared between threads, so each SUT
    worker thread gets its own, made on its first call from the same model bytes."""

    name = NAME

    def __init__(self) -> None:
        artifact = cached_build(CACHE_MODEL, hash_json(RECIPE), _convert)
        self._model = Path(artifact.path).read_bytes()
        self._local = threading.local()
        ops = {op["op_name"] for op in self._interpreter()._get_ops_details()}
        if ops != {OP}:
            raise SutError(f"LiteRT's NMS model {artifact.path} runs {sorted(ops)}, not {OP}; "
                           "delete that folder to convert it again")

    def _interpreter(self) -> Any:
        interpreter = getattr(self._local, "interpreter", None)
        if interpreter is None:
            from ai_edge_litert.interpreter import Interpreter

            interpreter = self._local.interpreter = Interpreter(model_content=self._model,
                                                                num_threads=1)
            self._local.inputs = {d["name"]: d["index"]
                                  for d in interpreter.get_input_details()}
            outputs = interpreter.get_output_details()
            self._local.selected = next(d["index"] for d in outputs
                                        if len(d["shape_signature"]) == 1)
            self._local.valid = next(d["index"] for d in outputs
                                     if len(d["shape_signature"]) == 0)  # how many it kept
        return interpreter

    def __call__(self, boxes: np.ndarray, scores: np.ndarray, iou_threshold: float,
                 max_keep: int) -> np.ndarray:
        order = np.argsort(-scores, kind="stable")  # numpy's order: ties by lower index
        if iou_threshold >= 1.0:
            return order[:max_keep].astype(np.intp)
        ranks = np.empty(len(order), np.float32)
        ranks[order] = np.arange(len(order), 0, -1)  # exact in float32 up to 2**24 boxes
        interpreter = self._interpreter()
        inputs = self._local.inputs
        interpreter.resize_tensor_input(inputs["boxes"], boxes.shape)
        interpreter.resize_tensor_input(inputs["scores"], ranks.shape)
        interpreter.allocate_tensors()
        interpreter.set_tensor(inputs["boxes"], boxes)
        interpreter.set_tensor(inputs["scores"], ranks)
        interpreter.set_tensor(inputs["max_keep"], np.array(max_keep, np.int32))
        interpreter.set_tensor(inputs["iou_threshold"], np.array(op_threshold(iou_threshold)))
        interpreter.invoke()
        valid = int(interpreter.get_tensor(self._local.valid))
        return interpreter.get_tensor(self._local.selected)[:valid].astype(np.intp)


def create() -> LiteRtNms:
    """The op, converted or taken from the cache (the task builds one per process)."""
    return LiteRtNms()
