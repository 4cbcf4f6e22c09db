"""ONNX Runtime's NMS for a detector's postprocessing: the ``NonMaxSuppression`` op, alone in a
tiny graph run by its own CPU InferenceSession (built once per process, whatever provider the
SUT's model runs on).

The op keeps what quantmark's numpy ``nms`` keeps (checked in tests/sut/onnxruntime): a box
goes when its IoU with a kept box is above the threshold (strictly, as numpy's), candidates are
taken best score first with ties by lower index, and without a ``score_threshold`` input no box
is dropped for its score. One class: the boxes arrive class-offset, so one pass is class-aware.
A detector's whole batch is one call (``suppress_padded``, the task padding its samples to one
length): the op suppresses and caps each batch entry on its own (the ONNX spec, which the task's
padding proof rests on: tasks/detection/suppression.py). ONNX Runtime's per-call overhead is
small: the batched call measured no faster than 8 (bench/nms_ops.py), and no slower.
"""

from __future__ import annotations

import numpy as np

NAME = "onnxruntime NonMaxSuppression op"
OPSET = 11  # NonMaxSuppression's current version


def _graph() -> bytes:
    """The op's graph: boxes [B, M, 4] (corners), scores [B, 1, M], the cap and the IoU
    threshold as inputs, so one session serves every call."""
    from onnx import TensorProto, helper

    node = helper.make_node("NonMaxSuppression",
                            ["boxes", "scores", "max_keep", "iou_threshold"], ["selected"],
                            center_point_box=0)
    inputs = [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["batch", "boxes", 4]),
              helper.make_tensor_value_info("scores", TensorProto.FLOAT,
                                            ["batch", 1, "boxes"]),
              helper.make_tensor_value_info("max_keep", TensorProto.INT64, [1]),
              helper.make_tensor_value_info("iou_threshold", TensorProto.FLOAT, [1])]
    output = helper.make_tensor_value_info("selected", TensorProto.INT64, ["kept", 3])
    graph = helper.make_graph([node], "quantmark_nms", inputs, [output])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             producer_name="quantmark").SerializeToString()


class OnnxRuntimeNms:
    """The op in its session (``InferenceSession.run`` is thread-safe: the SUT's workers share
    it)."""

    name = NAME

    def __init__(self) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # one small op per call, on the worker's thread
        options.log_severity_level = 3
        self._session = ort.InferenceSession(_graph(), options,
                                             providers=["CPUExecutionProvider"])

    def _selected(self, boxes: np.ndarray, scores: np.ndarray, iou_threshold: float,
                  max_keep: int) -> np.ndarray:
        return self._session.run(None, {
            "boxes": boxes, "scores": scores,
            "max_keep": np.array([max_keep], np.int64),
            "iou_threshold": np.array([iou_threshold], np.float32)})[0]

    def suppress_padded(self, boxes: np.ndarray, scores: np.ndarray, iou_threshold: float,
                        max_keep: int) -> np.ndarray:
        """The kept (sample, class, box) triples of one run on the batch (float32 boxes
        [B, W, 4], scores [B, W]), each sample's best first; the task drops the padding."""
        return self._selected(boxes, scores[:, None], iou_threshold, max_keep)

    def __call__(self, boxes: np.ndarray, scores: np.ndarray, iou_threshold: float,
                 max_keep: int) -> np.ndarray:
        return self._selected(boxes[None], scores[None, None], iou_threshold, max_keep)[:, 2]


def create() -> OnnxRuntimeNms:
    """The op, ready to run (the task builds one per process)."""
    return OnnxRuntimeNms()
