"""OpenVINO's NMS for a detector's postprocessing: an ``ov.Model`` of the opset's
``NonMaxSuppression`` (NMS-9), compiled once per process on the CPU with a dynamic batch and
number of boxes, whatever device the SUT's model runs on. A detector's whole batch is one infer
request (``suppress_padded``, the task padding its samples to one length): a request has a
fixed cost whatever its size (~0.3 ms through ``infer(inputs)``), so one a sample was most of
the postprocessing's time (bench/nms_ops.py times both).

Where it differs from quantmark's numpy ``nms``, the inputs are adapted (checked in
tests/sut/openvino): OpenVINO drops a box whose IoU with a kept box is at or above the
threshold, numpy only above it, so the op gets the next float32 above the threshold (at least
float32's smallest normal, so a threshold of 0 stays above an IoU of 0 on a CPU that flushes
denormals); its score threshold is -inf, so no box is dropped for its score. Candidates are
taken best score first with ties by lower index, as numpy's. NMS-9 suppresses and caps each
batch entry on its own, which the task's padding proof rests on
(tasks/detection/suppression.py).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

NAME = "OpenVINO NMS-9 op"


def op_threshold(iou_threshold: float) -> np.float32:
    """The threshold that makes OpenVINO's ``IoU >= t`` drop exactly what ``IoU > iou_threshold``
    drops in float32."""
    above = np.nextafter(np.float32(iou_threshold), np.float32(np.inf))
    return np.float32(max(above, np.finfo(np.float32).tiny))


class OpenVinoNms:
    """The compiled op, one per (threshold, cap) a run asks for (a run asks for one): both
    are constants of the model, as a dynamic cap or threshold costs every call ~0.3 ms more
    (measured: 0.44 against 0.13 ms a call for 20-220 boxes). A compiled model's infer
    requests are not to be shared between threads, so each SUT worker thread gets its own,
    made on its first call."""

    name = NAME

    def __init__(self) -> None:
        import openvino as ov

        self._core = ov.Core()
        self._compiled: dict[tuple[float, int], Any] = {}
        self._lock = threading.Lock()
        self._local = threading.local()
        self._model(0.7, 300)  # built at run start: a failure is the run's, not a query's

    def _model(self, iou_threshold: float, max_keep: int) -> Any:
        """The op compiled for this threshold and cap (built once)."""
        key = (float(iou_threshold), int(max_keep))
        with self._lock:
            if key not in self._compiled:
                import openvino as ov
                import openvino.opset13 as ops

                boxes = ops.parameter([-1, -1, 4], np.float32, name="boxes")
                scores = ops.parameter([-1, 1, -1], np.float32, name="scores")
                selected = ops.non_max_suppression(
                    boxes, scores, ops.constant(np.int64(key[1])),
                    ops.constant(op_threshold(key[0])), ops.constant(np.float32(-np.inf)),
                    box_encoding="corner", sort_result_descending=False, output_type="i64")
                model = ov.Model([selected.output(0), selected.output(2)], [boxes, scores],
                                 "quantmark_nms")
                self._compiled[key] = self._core.compile_model(
                    model, "CPU", {"INFERENCE_NUM_THREADS": 1})
            return self._compiled[key]

    def _request(self, iou_threshold: float, max_keep: int) -> Any:
        """This thread's infer request of the op for this threshold and cap."""
        requests = getattr(self._local, "requests", None)
        if requests is None:
            requests = self._local.requests = {}
        key = (float(iou_threshold), int(max_keep))
        request = requests.get(key)
        if request is None:
            request = requests[key] = self._model(*key).create_infer_request()
        return request

    def _selected(self, boxes: np.ndarray, scores: np.ndarray, iou_threshold: float,
                  max_keep: int) -> np.ndarray:
        """The op's kept (sample, class, box) triples, a copy (the request reuses its
        buffers). The inputs are set as tensors over the arrays and the outputs read from the
        request's own: ``infer(inputs)`` costs ~0.07 ms more a call (it lists the request's
        tensors and builds a result dict), a quarter of the op's time at 8 x 180 boxes."""
        import openvino as ov

        request = self._request(iou_threshold, max_keep)
        request.set_input_tensor(0, ov.Tensor(np.ascontiguousarray(boxes), shared_memory=True))
        request.set_input_tensor(1, ov.Tensor(np.ascontiguousarray(scores), shared_memory=True))
        request.infer()
        valid = int(request.get_output_tensor(1).data.reshape(-1)[0])
        return np.array(request.get_output_tensor(0).data[:valid])

    def suppress_padded(self, boxes: np.ndarray, scores: np.ndarray, iou_threshold: float,
                        max_keep: int) -> np.ndarray:
        """The kept (sample, class, box) triples of one infer request on the batch (float32
        boxes [B, W, 4], scores [B, W]), each sample's best first; the task drops the
        padding."""
        return self._selected(boxes, scores[:, None], iou_threshold, max_keep)

    def __call__(self, boxes: np.ndarray, scores: np.ndarray, iou_threshold: float,
                 max_keep: int) -> np.ndarray:
        return self._selected(boxes[None], scores[None, None], iou_threshold, max_keep)[:, 2]


def create() -> OpenVinoNms:
    """The op, compiled (the task builds one per process)."""
    return OpenVinoNms()
