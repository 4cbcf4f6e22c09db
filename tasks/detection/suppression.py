"""The suppression step of a detector's NMS: quantmark's numpy ``nms``, the protocol a
framework's op is run through (``Suppressor``), and the batched form of it (``BatchSuppressor``)
for ops that suppress a whole batch in one call.

A batch goes to such an op padded to its longest sample (``pad_batch``): each shorter sample
gets zero-area boxes [0, 0, 0, 0] scored -inf after its own. Padding never changes what a
sample keeps, given only what the equivalence cases already check of every op (greedy NMS,
best score first, ties by lower index) and what both ops' specs state (NMS-9, ONNX
NonMaxSuppression: each batch entry is suppressed, and capped, on its own):

1. Each sample is its own batch entry, so its padding meets none of another sample's boxes
   and takes none of another sample's cap.
2. Within a sample, greedy NMS decides boxes in order (score descending, ties by lower
   index), and a box is dropped only by a box kept before it. Every padding box comes after
   every real box (a lower score, or at a real -inf score a tie with a higher index), so each
   real box is decided before any padding, against the same kept real boxes as without it:
   the real boxes kept, and their order, are those of the unpadded sample.
3. The cap counts kept boxes in that order, so it is reached (if at all) among real boxes
   exactly where it would be unpadded; padding kept after them is dropped here by index
   (index >= the sample's count).

Zero area and -inf make the padding inert besides (it overlaps nothing; NMS-9 drops a score at
its -inf score threshold, ONNX Runtime's op, given none, keeps and answers it), but the proof
rests on the order alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

NMS_BLOCK = 128  # candidates per block (measured: 128-256 fastest for 8400 anchors)
#: what the record names where quantmark's own NMS ran
SHARED_NMS = "quantmark numpy NMS (shared)"
#: a padding box's score: below every real score (or tied with a real -inf, at a higher index)
PAD_SCORE = np.float32(-np.inf)

#: one sample as a suppression sees it: class-offset xyxy boxes [M, 4], scores [M]
Sample = tuple[np.ndarray, np.ndarray]
#: a whole batch's suppression: samples, threshold, cap -> each sample's kept indices
BatchCall = Callable[[Sequence[Sample], float, int], list[np.ndarray]]


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


class BatchSuppressor(Suppressor, Protocol):
    """A suppressor that can also take a whole batch in one call (``batched``: whether it
    does, its op taking batches): ``suppress_batch`` gives each sample's kept indices as
    ``__call__`` would, so a batch of 8 costs one op call, not 8 (OpenVINO's op costs ~0.3 ms
    a call whatever its size)."""

    batched: bool

    def suppress_batch(self, samples: Sequence[Sample], iou_threshold: float,
                       max_keep: int) -> list[np.ndarray]: ...


class PaddedOp(Protocol):
    """What a framework's op offers to take a batch: ``suppress_padded`` (float32 boxes
    ``[B, W, 4]``, scores ``[B, W]``, the threshold, the cap -> the kept (sample, class, box)
    triples ``[K, 3]`` as NMS-9 and ONNX's op answer them, each sample's best first; the
    padding's may be among them)."""

    def suppress_padded(self, boxes: np.ndarray, scores: np.ndarray, iou_threshold: float,
                        max_keep: int) -> np.ndarray: ...


def batch_suppression(suppressor: Suppressor) -> BatchCall | None:
    """``suppressor``'s one call for a whole batch, or None where it takes a sample a call
    (numpy's ``nms``, an op without batches)."""
    return suppressor.suppress_batch if getattr(suppressor, "batched", False) else None


def pad_batch(samples: Sequence[Sample]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Samples of different lengths as one batch: float32 boxes ``[B, W, 4]``, scores
    ``[B, W]`` (W the longest), each sample's count ``[B]``; the padding is what the module
    docstring proves can never change what a sample keeps."""
    counts = np.array([len(scores) for _, scores in samples], dtype=np.intp)
    width = int(counts.max(initial=0))
    boxes = np.zeros((len(samples), width, 4), np.float32)
    scores = np.full((len(samples), width), PAD_SCORE, np.float32)
    for row, (sample_boxes, sample_scores) in enumerate(samples):
        boxes[row, :counts[row]] = sample_boxes
        scores[row, :counts[row]] = sample_scores
    return boxes, scores, counts


def suppress_padded(op: PaddedOp, samples: Sequence[Sample], iou_threshold: float,
                    max_keep: int) -> list[np.ndarray]:
    """Each sample's kept indices from one call of ``op`` on the padded batch, best first,
    the padding dropped by index (no call where every sample is empty)."""
    boxes, scores, counts = pad_batch(samples)
    if not boxes.shape[1]:
        return [np.zeros(0, np.intp) for _ in samples]
    triples = np.asarray(op.suppress_padded(boxes, scores, iou_threshold, max_keep),
                         dtype=np.intp).reshape(-1, 3)
    sample, index = triples[:, 0], triples[:, 2]
    if not ((0 <= sample) & (sample < len(samples)) & (index >= 0)).all():
        raise RuntimeError(f"the NMS op answered a box outside the batch of {len(samples)}")
    real = index < counts[sample]
    sample, index = sample[real], index[real]
    order = np.argsort(sample, kind="stable")  # by sample, each in the op's own order
    return np.split(index[order], np.cumsum(np.bincount(sample, minlength=len(samples)))[:-1])


@dataclass(frozen=True)
class NumpySuppressor:
    """``nms``, for every SUT whose framework has no NMS op; ``reason`` says why it ran where
    a framework's op might have ("torch has no NMS op without torchvision")."""

    reason: str = ""
    name: str = SHARED_NMS

    def __call__(self, boxes: np.ndarray, scores: np.ndarray, iou_threshold: float,
                 max_keep: int) -> np.ndarray:
        return nms(boxes, scores, iou_threshold, max_keep)


def _op_input(boxes: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                               np.ndarray]:
    """A sample as an op takes it (contiguous float32) and which of its boxes have an area."""
    boxes = np.ascontiguousarray(boxes, dtype=np.float32).reshape(-1, 4)
    scores = np.ascontiguousarray(scores, dtype=np.float32).reshape(-1)
    sides = boxes[:, 2:] - boxes[:, :2]
    has_area = (sides > 0).all(axis=1) & (sides[:, 0] * sides[:, 1] > 0)
    return boxes, scores, has_area


def _with_arealess(kept: np.ndarray, has_area: np.ndarray, scores: np.ndarray,
                   max_keep: int) -> np.ndarray:
    """The op's kept boxes with every box without an area (which ``nms`` keeps: it overlaps
    nothing) merged in by score, ties by lower index, cut to the cap."""
    merged = np.concatenate((kept, np.flatnonzero(~has_area)))
    return merged[np.lexsort((merged, -scores[merged]))][:max_keep]


@dataclass(frozen=True)
class NativeSuppressor:
    """A framework's op (``op``: float32 boxes that all have an area, their float32
    scores, the threshold, the cap -> kept indices, best first) made to keep what ``nms``
    keeps. Boxes without an area (x2 <= x1 or y2 <= y1, or an area of 0 in float32) overlap
    nothing under ``nms``'s rule, so they are kept here without the op and merged in by score
    (ties: lower index first): LiteRT's NON_MAX_SUPPRESSION_V4 keeps a zero-area box again
    and again, and the ONNX and TF ops sort a box's corners, giving an inverted box an
    area. The op computes in float32: class offsets of ~1e5 px round boxes to ~0.01 px there,
    which may flip a pair whose IoU is that close to the threshold. An op that also offers
    ``suppress_padded`` (``PaddedOp``) takes a whole batch in one call (``batched``)."""

    op: Suppressor

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def batched(self) -> bool:
        """Whether the op takes a whole batch in one call."""
        return callable(getattr(self.op, "suppress_padded", None))

    def __call__(self, boxes: np.ndarray, scores: np.ndarray, iou_threshold: float,
                 max_keep: int) -> np.ndarray:
        boxes, scores, has_area = _op_input(boxes, scores)
        if has_area.all() and len(boxes):
            return np.asarray(self.op(boxes, scores, iou_threshold, max_keep), dtype=np.intp)
        proper = np.flatnonzero(has_area)
        kept = np.zeros(0, np.intp)
        if proper.size:
            found = self.op(boxes[proper], scores[proper], iou_threshold, max_keep)
            kept = proper[np.asarray(found, dtype=np.intp)]
        return _with_arealess(kept, has_area, scores, max_keep)

    def suppress_batch(self, samples: Sequence[Sample], iou_threshold: float,
                       max_keep: int) -> list[np.ndarray]:
        """Each sample's kept indices, as ``__call__`` keeps them, from one call of the op
        on the batch's boxes with an area (an op without batches: one call a sample)."""
        if not self.batched:
            return [self(boxes, scores, iou_threshold, max_keep) for boxes, scores in samples]
        inputs = [_op_input(boxes, scores) for boxes, scores in samples]
        proper = [np.flatnonzero(has_area) for _, _, has_area in inputs]
        found = suppress_padded(self.op, [(boxes[rows], scores[rows]) for (boxes, scores, _),
                                          rows in zip(inputs, proper, strict=True)],
                                iou_threshold, max_keep)
        out = []
        for (_, scores, has_area), rows, kept in zip(inputs, proper, found, strict=True):
            kept = rows[kept]
            out.append(kept if has_area.all() else
                       _with_arealess(kept, has_area, scores, max_keep))
        return out
