"""TensorFlow's NMS for a detector's postprocessing: ``tf.image.non_max_suppression``, called
eagerly (TensorFlow places it as it places the SUT's ops).

It keeps what quantmark's numpy ``nms`` keeps (checked in tests/sut/tensorflow): a box goes
when its IoU with a kept box is above the threshold (strictly, as numpy's), candidates are
taken best score first with ties by lower index, and its default score threshold (-inf) drops
no box for its score. TF's boxes are (y1, x1, y2, x2); IoU is the same with both axes swapped,
so the xyxy boxes go in as they are.
"""

from __future__ import annotations

import numpy as np

NAME = "tf.image.non_max_suppression"


class TensorFlowNms:
    """The op (an eager call is thread-safe: the SUT's workers share it)."""

    name = NAME

    def __init__(self) -> None:
        import tensorflow as tf

        self._tf = tf

    def __call__(self, boxes: np.ndarray, scores: np.ndarray, iou_threshold: float,
                 max_keep: int) -> np.ndarray:
        kept = self._tf.image.non_max_suppression(boxes, scores, max_keep,
                                                  iou_threshold=iou_threshold,
                                                  score_threshold=float("-inf"))
        return kept.numpy().astype(np.intp)


def create() -> TensorFlowNms:
    """The op, ready to run (the task builds one per process)."""
    return TensorFlowNms()
