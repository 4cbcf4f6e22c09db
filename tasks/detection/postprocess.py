"""A detector's output to final detections, inside the SUT's timed path.

MLPerf's yolo SUT answers LoadGen with final detections, so the score threshold, NMS and the
top-K cut are part of what is timed: they are done here in vectorised numpy (Python loops only
over the boxes NMS keeps), for every framework alike, so a framework's speed is never credited
or charged for a different post-processing.

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
from typing import Protocol

import numpy as np

from quantmark.ground.errors import UserError

HEADS = ("raw", "nms")
#: candidates kept (best scores) before NMS, as Ultralytics' ``max_nms``: bounds NMS's time
#: when a near-zero threshold lets most anchors through
MAX_CANDIDATES = 30000
NO_DETECTION = -1.0  # the sentinel row's class
NMS_BLOCK = 128  # candidates per block (measured: 128-256 fastest for 8400 anchors)
#: what the record names where quantmark's own NMS ran
SHARED_NMS = "quantmark numpy NMS (shared)"


def _overlaps(a: np.ndarray, b: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Whether each box of ``a`` overlaps each of ``b`` by IoU above the threshold ``[A, B]``
    (xyxy and area columns, float64). IoU > t is tested as inter > t * union, with no
    division: a pair of empty boxes (union 0) never overlaps."""
    inter = np.minimum(a[:, None, 2], b[None, :, 2])
    inter -= np.maximum(a[:, None, 0], b[None, :, 0])
    np.maximum(inter, 0, out=inter)
    height = np.minimum(a[:, None, 3], b[None, :, 3])
    height -= np.maximum(a[:, None, 1], b[None, :, 1])
    np.maximum(height, 0, out=height)
    inter *= height
    union = np.add(a[:, None, 4], b[None, :, 4], out=height)
    union -= inter
    union *= iou_threshold
    return inter > union


def nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float,
        max_keep: int | None = None) -> np.ndarray:
    """Greedy NMS: the indices kept, best score first (ties: lower index first). A box is
    dropped when its IoU with a kept, better box is above ``iou_threshold`` (torchvision's
    rule); ``max_keep`` stops after that many (the first K kept are the top K of the whole
    answer, greedy NMS keeping in score order).

    Candidates go in score-ordered blocks: a block first loses what the boxes already kept
    overlap (one vectorised IoU matrix), then its own overlaps are one matrix and the greedy
    pass does only a row update per kept box. Exact, as every box kept before a block scores
    above it; and the cap usually ends the work within the first blocks."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    sides = np.clip(boxes[:, 2:] - boxes[:, :2], 0, None)
    boxes = np.column_stack((boxes, sides[:, 0] * sides[:, 1]))  # x1, y1, x2, y2, area
    order = np.argsort(-np.asarray(scores), kind="stable")
    limit = len(order) if max_keep is None else max_keep
    keep: list[int] = []
    for start in range(0, len(order), NMS_BLOCK):
        if len(keep) >= limit:
            break
        block = order[start:start + NMS_BLOCK]
        if keep:
            block = block[~_overlaps(boxes[keep], boxes[block], iou_threshold).any(axis=0)]
        over = _overlaps(boxes[block], boxes[block], iou_threshold)
        alive = np.ones(len(block), dtype=bool)
        for i in range(len(block)):
            if not alive[i]:
                continue
            keep.append(int(block[i]))
            if len(keep) >= limit:
                break
            alive[i + 1:] &= ~over[i, i + 1:]
    return np.asarray(keep, dtype=np.intp)


class Suppressor(Protocol):
    """The suppression step of NMS, the one part a framework may run with its own op: class-
    offset boxes (xyxy ``[M, 4]``, float64), their scores ``[M]``, the IoU threshold and how
    many to keep -> the indices kept, best score first, as ``nms`` keeps them. ``name`` is
    what the record says ran ("onnxruntime NonMaxSuppression op")."""

    name: str

    def __call__(self, boxes: np.ndarray, scores: np.ndarray, iou_threshold: float,
                 max_keep: int) -> np.ndarray: ...


@dataclass(frozen=True)
class NumpySuppressor:
    """``nms``, for every SUT whose framework has no NMS op; ``reason`` says why it ran where
    a framework's op might have ("torch has no NMS op without torchvision")."""

    reason: str = ""
    name: str = SHARED_NMS

    def __call__(self, boxes: np.ndarray, scores: np.ndarray, iou_threshold: float,
                 max_keep: int) -> np.ndarray:
        return nms(boxes, scores, iou_threshold, max_keep)


@dataclass(frozen=True)
class NativeSuppressor:
    """A framework's NMS op (``op``: float32 boxes that all have an area, their float32
    scores, the threshold, the cap -> kept indices, best first) made to keep what ``nms``
    keeps. Boxes without an area (x2 <= x1 or y2 <= y1, or an area of 0 in float32) overlap
    nothing under ``nms``'s rule, so they are kept here without the op and merged in by score
    (ties: lower index first): LiteRT's NON_MAX_SUPPRESSION_V4 keeps a zero-area box again
    and again, and the ONNX and TF ops sort a box's corners, giving an inverted box an
    area. The op computes in float32: class offsets of ~1e5 px round boxes to ~0.01 px there,
    which may flip a pair whose IoU is that close to the threshold."""

    op: Suppressor

    @property
    def name(self) -> str:
        return self.op.name

    def __call__(self, boxes: np.ndarray, scores: np.ndarray, iou_threshold: float,
                 max_keep: int) -> np.ndarray:
        boxes = np.ascontiguousarray(boxes, dtype=np.float32).reshape(-1, 4)
        scores = np.ascontiguousarray(scores, dtype=np.float32).reshape(-1)
        sides = boxes[:, 2:] - boxes[:, :2]
        has_area = (sides > 0).all(axis=1) & (sides[:, 0] * sides[:, 1] > 0)
        if has_area.all() and len(boxes):
            return np.asarray(self.op(boxes, scores, iou_threshold, max_keep), dtype=np.intp)
        proper = np.flatnonzero(has_area)
        kept = np.zeros(0, np.intp)
        if proper.size:
            found = self.op(boxes[proper], scores[proper], iou_threshold, max_keep)
            kept = proper[np.asarray(found, dtype=np.intp)]
        merged = np.concatenate((kept, np.flatnonzero(~has_area)))
        return merged[np.lexsort((merged, -scores[merged]))][:max_keep]


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


def _decode_raw_sample(pred: np.ndarray, transposed: bool, conf: float, iou: float,
                       max_det: int, suppressor: Suppressor) -> np.ndarray:
    """One sample of a raw head: best class per anchor, threshold, class-aware NMS, top-K."""
    scores = pred[:, 4:] if transposed else pred[4:]
    axis = 1 if transposed else 0
    best = scores.max(axis=axis)
    anchors = np.flatnonzero(best > conf)
    if anchors.size > MAX_CANDIDATES:
        anchors = anchors[np.argsort(-best[anchors], kind="stable")[:MAX_CANDIDATES]]
    if not anchors.size:
        return np.zeros((0, 6), np.float32)
    picked = pred[anchors] if transposed else pred[:, anchors].T  # [M, 4 + C], small
    classes = picked[:, 4:].argmax(axis=1)
    cx, cy, half_w, half_h = (picked[:, i].astype(np.float64) for i in range(4))
    half_w, half_h = half_w / 2, half_h / 2
    boxes = np.stack((cx - half_w, cy - half_h, cx + half_w, cy + half_h), axis=1)
    finite = np.isfinite(boxes).all(axis=1)  # a broken model's NaN box is no detection
    if not finite.all():
        anchors, classes, boxes = anchors[finite], classes[finite], boxes[finite]
        if not anchors.size:
            return np.zeros((0, 6), np.float32)
    # class-aware in one pass: each class's boxes are moved to their own region (float64, so
    # the offset costs no precision), where no box of another class can overlap them
    span = float(np.abs(boxes).max()) * 2 + 1
    keep = suppressor(boxes + (classes * span)[:, None], best[anchors], iou, max_det)
    out = np.empty((keep.size, 6), np.float32)
    out[:, :4] = boxes[keep]
    out[:, 4] = best[anchors[keep]]
    out[:, 5] = classes[keep]
    return out


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
    runs on ``suppressor`` (default: ``nms``)."""
    outputs = np.asarray(outputs)
    if outputs.ndim != 3:
        raise UserError(f"detector output has shape {list(outputs.shape)}, not 3 axes; a "
                        "detector's output is [N, 4 + C, anchors] (raw) or [N, K, 6] (nms)")
    if head == "raw":
        transposed = _raw_layout(outputs.shape, num_classes)
        suppressor = suppressor or NumpySuppressor()
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
