"""A detector's output to final detections, inside the SUT's timed path.

MLPerf's yolo SUT answers LoadGen with final detections, so the score threshold, NMS and the
top-K cut are part of what is timed: they are done here in vectorised numpy (Python loops only
over the boxes NMS keeps), for every framework alike, so a framework's speed is never credited
or charged for a different post-processing. The suppression step itself (numpy's ``nms`` or a
framework's op, a sample a call or, where the op takes batches, a whole batch in one call) is
in ``suppression``.

Two output forms (``head``):

- ``"raw"``: Ultralytics' export ``[N, 4 + C, A]`` (rows 0-3 cx, cy, w, h in model-input
  pixels; rows 4.. per-class scores, already sigmoid-ed), or its transpose ``[N, A, 4 + C]``
  that some converters leave. Each anchor keeps only its best class (not multi-label): that is
  what Ultralytics' ``predict`` does, which MLPerf's yolo reference calls (with conf=0.001 and
  its defaults iou=0.7, max_det=300, the defaults here). Ultralytics' ``val`` uses multi-label
  NMS and reads a little higher; quantmark follows the benchmark's reference.
- ``"nms"``: ``[N, K, 6]`` rows (x1, y1, x2, y2, score, class) selected inside the model; rows
  with score <= 0 or below the threshold are padding.

Per sample the result is ``[K, 6]`` float32 (x1, y1, x2, y2, score, class), score descending.
LoadGen's response is ``[max(K, 1), 7]`` float32 (qsl_index, x1, y1, x2, y2, score, class); an
empty answer is one sentinel row of class -1. qsl_index is exact in float32 up to 2**24.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from quantmark.ground.errors import UserError
from quantmark.tasks.detection.suppression import (
    SHARED_NMS,
    BatchCall,
    BatchSuppressor,
    NativeSuppressor,
    NumpySuppressor,
    Suppressor,
    batch_suppression,
    nms,
)

# the suppression step lives in .suppression; these names are read from here too
__all__ = ["HEADS", "MAX_CANDIDATES", "NO_DETECTION", "SHARED_NMS", "BatchSuppressor",
           "NativeSuppressor", "NumpySuppressor", "Postprocess", "Suppressor", "decode", "nms",
           "responses"]

HEADS = ("raw", "nms")
#: candidates kept (best scores) before NMS, as Ultralytics' ``max_nms``: bounds NMS's time
#: when a near-zero threshold lets most anchors through
MAX_CANDIDATES = 30000
NO_DETECTION = -1.0  # the sentinel row's class


def _raw_layout(shape: tuple[int, ...], num_classes: int) -> bool:
    """Whether a raw head is transposed (``[N, A, 4 + C]``); the untransposed form wins when
    both axes are 4 + C."""
    rows = 4 + num_classes
    if shape[1] == rows:
        return False
    if shape[2] == rows:
        return True
    raise UserError(f"raw detector output {list(shape)} has no axis of 4 + num_classes = {rows}"
                    f"; pass the model's real class count (or head='nms' if the model already "
                    "does NMS)")


@dataclass(frozen=True)
class _Candidates:
    """One sample's anchors past the threshold, each with its best class: what NMS sees."""

    boxes: np.ndarray  # [M, 4] xyxy, float64, model-input pixels
    scores: np.ndarray  # [M] the best class's score
    classes: np.ndarray  # [M] the best class

    def offset_boxes(self) -> np.ndarray:
        """Class-aware NMS in one pass: each class's boxes moved to their own region (float64,
        so the offset costs no precision), where no box of another class can overlap them."""
        span = float(np.abs(self.boxes).max()) * 2 + 1
        return self.boxes + (self.classes * span)[:, None]

    def rows(self, keep: np.ndarray) -> np.ndarray:
        """The kept candidates as ``[K, 6]`` float32 rows, in ``keep``'s order."""
        out = np.empty((keep.size, 6), np.float32)
        out[:, :4] = self.boxes[keep]
        out[:, 4] = self.scores[keep]
        out[:, 5] = self.classes[keep]
        return out


def _raw_candidates(pred: np.ndarray, transposed: bool, conf: float) -> _Candidates | None:
    """One sample of a raw head: best class per anchor, threshold (None: nothing passed)."""
    scores = pred[:, 4:] if transposed else pred[4:]
    axis = 1 if transposed else 0
    best = scores.max(axis=axis)
    anchors = np.flatnonzero(best > conf)
    if anchors.size > MAX_CANDIDATES:
        anchors = anchors[np.argsort(-best[anchors], kind="stable")[:MAX_CANDIDATES]]
    if not anchors.size:
        return None
    picked = pred[anchors] if transposed else pred[:, anchors].T  # [M, 4 + C], small
    classes = picked[:, 4:].argmax(axis=1)
    cx, cy, half_w, half_h = (picked[:, i].astype(np.float64) for i in range(4))
    half_w, half_h = half_w / 2, half_h / 2
    boxes = np.stack((cx - half_w, cy - half_h, cx + half_w, cy + half_h), axis=1)
    finite = np.isfinite(boxes).all(axis=1)  # a broken model's NaN box is no detection
    if not finite.all():
        anchors, classes, boxes = anchors[finite], classes[finite], boxes[finite]
        if not anchors.size:
            return None
    return _Candidates(boxes, best[anchors], classes)


def _no_detections() -> np.ndarray:
    """A sample's empty answer (a fresh array each: a caller may keep it)."""
    return np.zeros((0, 6), np.float32)


def _decode_raw_sample(pred: np.ndarray, transposed: bool, conf: float, iou: float,
                       max_det: int, suppressor: Suppressor) -> np.ndarray:
    """One sample of a raw head: best class per anchor, threshold, class-aware NMS, top-K."""
    found = _raw_candidates(pred, transposed, conf)
    if found is None:
        return _no_detections()
    return found.rows(suppressor(found.offset_boxes(), found.scores, iou, max_det))


def _decode_raw_batch(outputs: np.ndarray, transposed: bool, conf: float, iou: float,
                      max_det: int, suppress_batch: BatchCall) -> list[np.ndarray]:
    """A raw head's batch with one suppression call: each sample's candidates, then the
    batch's class-aware NMS at once (samples with none left out), then each sample's top-K,
    as ``_decode_raw_sample`` cuts them."""
    found = [_raw_candidates(pred, transposed, conf) for pred in outputs]
    live = [sample for sample in found if sample is not None]
    kept = suppress_batch([(sample.offset_boxes(), sample.scores) for sample in live], iou,
                          max_det) if live else []
    if len(kept) != len(live):
        raise RuntimeError(f"the batched NMS answered {len(kept)} samples for {len(live)}")
    answers = iter(kept)
    return [_no_detections() if sample is None else sample.rows(np.asarray(next(answers)))
            for sample in found]


def _decode_nms_sample(rows: np.ndarray, conf: float, max_det: int) -> np.ndarray:
    """One sample of an in-model NMS head: padding dropped, score descending, top-K."""
    score = rows[:, 4]
    real = rows[(score > 0) & (score > conf)]
    order = np.argsort(-real[:, 4], kind="stable")[:max_det]
    return np.ascontiguousarray(real[order], dtype=np.float32)


def decode(outputs: np.ndarray, head: str, num_classes: int, conf_threshold: float = 0.001,
           iou_threshold: float = 0.7, max_detections: int = 300,
           suppressor: Suppressor | None = None) -> list[np.ndarray]:
    """Per-sample detections ``[K, 6]`` float32 (x1, y1, x2, y2, score, class) in model-input
    pixels, score descending; see the module docstring for the heads. A raw head's suppression
    runs on ``suppressor`` (default: ``nms``): the whole batch in one call where it takes
    batches (``BatchSuppressor.batched``), else one call a sample; both keep the same."""
    outputs = np.asarray(outputs)
    if outputs.ndim != 3:
        raise UserError(f"detector output has shape {list(outputs.shape)}, not 3 axes; a "
                        "detector's output is [N, 4 + C, anchors] (raw) or [N, K, 6] (nms)")
    if head == "raw":
        transposed = _raw_layout(outputs.shape, num_classes)
        suppressor = suppressor or NumpySuppressor()
        batch = batch_suppression(suppressor)
        if batch is not None:
            return _decode_raw_batch(outputs, transposed, conf_threshold, iou_threshold,
                                     max_detections, batch)
        return [_decode_raw_sample(sample, transposed, conf_threshold, iou_threshold,
                                   max_detections, suppressor) for sample in outputs]
    if head == "nms":
        if outputs.shape[2] != 6:
            raise UserError(f"nms detector output {list(outputs.shape)} is not [N, K, 6] "
                            "(x1, y1, x2, y2, score, class); pass head='raw' for Ultralytics' "
                            "raw export")
        return [_decode_nms_sample(sample, conf_threshold, max_detections)
                for sample in outputs]
    raise UserError(f"unknown detector head {head!r}; pass one of {', '.join(HEADS)}")


def responses(detections: list[np.ndarray], indices: Sequence[int]) -> list[np.ndarray]:
    """LoadGen's response arrays, one per sample: ``[max(K, 1), 7]`` float32, C-contiguous
    (its buffer is handed to LoadGen as is); an empty sample gets the class -1 sentinel row."""
    if len(detections) != len(indices):
        raise ValueError(f"{len(detections)} detection arrays for {len(indices)} samples")
    out = []
    for found, index in zip(detections, indices, strict=True):
        count = len(found)
        response = np.zeros((max(count, 1), 7), np.float32)
        response[:, 0] = index
        if count:
            response[:, 1:] = found
        else:
            response[0, 6] = NO_DETECTION
        out.append(response)
    return out


@dataclass(frozen=True)
class Postprocess:
    """The SUT's post-processing step, built once per run: ``post(outputs, indices)`` gives
    the responses. ``describe()`` is what the run record keeps, so two runs' detections are
    known to be cut the same way, and by which NMS. ``suppressor`` runs a raw head's
    suppression (None: ``nms``); a model with NMS inside needs none."""

    head: str
    num_classes: int
    conf_threshold: float = 0.001
    iou_threshold: float = 0.7
    max_detections: int = 300
    suppressor: Suppressor | None = None

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise UserError(f"unknown detector head {self.head!r}; pass one of "
                            f"{', '.join(HEADS)}")
        if self.num_classes < 1:
            raise UserError(f"num_classes {self.num_classes} is not a class count; pass the "
                            "detector's number of classes (1 or more)")
        for name, value in (("conf_threshold", self.conf_threshold),
                            ("iou_threshold", self.iou_threshold)):
            if not 0.0 <= value <= 1.0:
                raise UserError(f"{name} {value} is outside [0, 1]; pass a fraction")
        if self.max_detections < 1:
            raise UserError(f"max_detections {self.max_detections} is below 1; pass how many "
                            "detections per image to keep (MLPerf's reference: 300)")
        if self.suppressor is None and self.head == "raw":
            object.__setattr__(self, "suppressor", NumpySuppressor())

    def __call__(self, outputs: np.ndarray, indices: Sequence[int]) -> list[np.ndarray]:
        return responses(decode(outputs, self.head, self.num_classes, self.conf_threshold,
                                self.iou_threshold, self.max_detections, self.suppressor),
                         indices)

    def with_suppressor(self, suppressor: Suppressor) -> Postprocess:
        """The same step with another suppression (a profile's timed wrapper of this one)."""
        return replace(self, suppressor=suppressor)

    def describe(self) -> dict:
        """Where NMS ran and with which cuts, for the run record: ``nms`` names the op (or
        "in the model"), ``nms_reason`` why the shared one ran where a framework's might."""
        raw = self.head == "raw"
        return {
            "head": self.head,
            "num_classes": self.num_classes,
            "nms": self.suppressor.name if raw and self.suppressor else "in the model",
            "nms_reason": (getattr(self.suppressor, "reason", "") or None) if raw else None,
            "class_aware": raw or None,
            "labels_per_box": "best class" if raw else "as the model chose",
            "conf_threshold": self.conf_threshold,
            "iou_threshold": self.iou_threshold if raw else None,
            "max_detections": self.max_detections,
        }
