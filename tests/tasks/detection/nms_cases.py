"""Box sets on which a framework's NMS must keep what quantmark's numpy ``nms`` keeps, and the
check itself: seeded random sets (overlapping clusters, several classes moved apart by the
class offset the postprocessing uses, distinct scores, caps that cut the answer short), and
seeded sets where most scores tie, and the edges (an IoU exactly at the threshold, tied
scores, boxes without an area, the empty set). Every box is float32-representable, so an op
computing in float32 sees the boxes the float64 reference sees. The same cases assembled into
batches of mixed lengths (empty samples and batches of one among them) for an op that takes a
whole batch at once, raw heads of mixed candidate counts for the whole postprocessing, and
what a detector's run records of the NMS it ran."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import groupby

import numpy as np

from quantmark.tasks.detection.postprocess import nms

SEEDS = range(60)
TIED_SEEDS = range(100, 120)
IOU_THRESHOLDS = (0.7, 0.5, 0.45, 0.3, 0.9)


@dataclass(frozen=True)
class Case:
    name: str
    boxes: np.ndarray  # [M, 4] float64, float32-representable
    scores: np.ndarray  # [M] float32
    iou_threshold: float
    max_keep: int


def _clusters(rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` xyxy boxes around a few centres, so many pairs overlap near any threshold."""
    centres = rng.uniform(20, 600, (int(rng.integers(1, 8)), 2))
    around = centres[rng.integers(0, len(centres), count)] + rng.normal(0, 6, (count, 2))
    sizes = rng.uniform(4, 80, (count, 2)) * rng.uniform(0.8, 1.25, (count, 1))
    return np.concatenate((around - sizes / 2, around + sizes / 2), axis=1)


def random_case(seed: int, ties: bool = False) -> Case:
    """One seeded set: class-offset boxes as ``_decode_raw_sample`` makes them; with ``ties``
    the scores take a few values only, so most boxes tie with others."""
    rng = np.random.default_rng(seed)
    count = int(rng.integers(1, 400))
    boxes = _clusters(rng, count)
    classes = rng.integers(0, int(rng.integers(1, 5)), count)
    span = float(np.abs(boxes).max()) * 2 + 1
    boxes = (boxes + (classes * span)[:, None]).astype(np.float32).astype(np.float64)
    scores = ((rng.permutation(count) + rng.uniform(0.05, 0.95, count)) / count)
    if ties:
        scores = np.round(scores * 6) / 6
    cap = int(rng.choice([1, 5, 30, 300, count]))
    return Case(f"seed {seed}{' (ties)' if ties else ''}", boxes, scores.astype(np.float32),
                IOU_THRESHOLDS[seed % len(IOU_THRESHOLDS)], cap)


def _case(name: str, boxes: list, scores: list, iou: float = 0.5, cap: int = 300) -> Case:
    return Case(name, np.array(boxes, np.float64).reshape(-1, 4), np.array(scores, np.float32),
                iou, cap)


EDGES = (
    _case("IoU exactly at the threshold (kept)", [[0, 0, 3, 1], [1, 0, 4, 1]], [0.9, 0.8]),
    _case("IoU just above the threshold (dropped)", [[0, 0, 3, 1], [1, 0, 4.25, 1]],
          [0.9, 0.8], iou=0.45),
    _case("touching boxes at threshold 0 (kept)", [[0, 0, 2, 2], [2, 2, 4, 4], [1, 1, 3, 3]],
          [0.9, 0.8, 0.7], iou=0.0),
    _case("identical boxes at threshold 1 (kept)", [[0, 0, 2, 2], [0, 0, 2, 2]], [0.9, 0.8],
          iou=1.0),
    _case("tied scores, overlapping: lower index kept", [[0, 0, 2, 2], [0, 0, 2, 2.1]],
          [0.5, 0.5]),
    _case("tied scores, apart: lower index first", [[5, 5, 6, 6], [0, 0, 1, 1], [9, 9, 10, 10]],
          [0.5, 0.5, 0.5]),
    _case("zero and negative scores", [[0, 0, 1, 1], [5, 5, 6, 6], [5, 5, 6, 6.2]],
          [0.0, -0.5, -0.25]),
    _case("boxes without an area among others", [[0, 0, 0, 0], [5, 5, 6, 6], [1, 1, 1, 3],
                                                 [5, 5, 6, 6.1], [3, 3, 2, 4], [0, 0, 2, 2]],
          [0.95, 0.9, 0.8, 0.7, 0.6, 0.5]),
    _case("only boxes without an area", [[1, 1, 1, 1], [2, 2, 2, 5]], [0.3, 0.6]),
    _case("cap of one", [[0, 0, 2, 2], [10, 10, 12, 12], [20, 20, 22, 22]], [0.7, 0.9, 0.8],
          cap=1),
    _case("empty", [], []),
)


def cases() -> Iterator[Case]:
    yield from EDGES
    yield from (random_case(seed) for seed in SEEDS)
    yield from (random_case(seed, ties=True) for seed in TIED_SEEDS)


Suppress = Callable[[np.ndarray, np.ndarray, float, int], np.ndarray]


def differences(suppress: Suppress) -> list[str]:
    """Each case where ``suppress`` keeps other indices (or another order) than ``nms``."""
    found = []
    for case in cases():
        want = nms(case.boxes, case.scores, case.iou_threshold, case.max_keep).tolist()
        got = np.asarray(suppress(case.boxes, case.scores, case.iou_threshold,
                                  case.max_keep)).tolist()
        if got != want:
            found.append(f"{case.name}: kept {got[:12]}, numpy keeps {want[:12]}")
    return found


SuppressBatch = Callable[[Sequence[tuple[np.ndarray, np.ndarray]], float, int],
                        list[np.ndarray]]
EMPTY = EDGES[-1]
#: (threshold, cap) every case is also batched at, whatever its own: caps that cut inside the
#: real boxes (where padding taking a place would tell) and one that none reaches
SHARED_SETTINGS = ((0.5, 1), (0.45, 5), (0.7, 300), (0.3, 1000))


def _setting(case: Case) -> tuple[float, int]:
    return case.iou_threshold, case.max_keep


def batches() -> Iterator[tuple[str, list[Case], float, int]]:
    """(name, cases, threshold, cap) batches of mixed lengths: the cases of each (threshold,
    cap) in eights with an empty sample among them, every case alone (a batch of one), a batch
    of empty samples only, and all cases in eights at each shared setting."""
    every = list(cases())
    for (iou, cap), group in groupby(sorted(every, key=_setting), key=_setting):
        members = list(group)
        for start in range(0, len(members), 7):
            chunk = members[start:start + 7]
            chunk.insert(start % (len(chunk) + 1), EMPTY)
            yield f"iou {iou}, cap {cap}, from case {start}", chunk, iou, cap
    for case in every:
        yield f"{case.name} alone", [case], case.iou_threshold, case.max_keep
    yield "empty samples only", [EMPTY] * 3, 0.5, 300
    for iou, cap in SHARED_SETTINGS:
        for start in range(0, len(every), 8):
            yield (f"iou {iou}, cap {cap}, cases {start}-{start + 7}", every[start:start + 8],
                   iou, cap)


def batch_differences(suppress_batch: SuppressBatch) -> list[str]:
    """Each sample of each batch where ``suppress_batch`` keeps other indices (or another
    order) than ``nms`` keeps of that sample alone."""
    found = []
    for name, members, iou, cap in batches():
        got = suppress_batch([(case.boxes, case.scores) for case in members], iou, cap)
        if len(got) != len(members):
            found.append(f"{name}: {len(got)} answers for {len(members)} samples")
            continue
        for case, kept in zip(members, got, strict=True):
            want = nms(case.boxes, case.scores, iou, cap).tolist()
            if np.asarray(kept).tolist() != want:
                found.append(f"{name}, {case.name}: kept {np.asarray(kept).tolist()[:12]}, "
                             f"numpy keeps {want[:12]}")
    return found


class PerSample:
    """A batched op seen without its batch (``suppress_padded`` hidden): the per-sample
    path over the very same op."""

    def __init__(self, op: Suppress) -> None:
        self.op = op
        self.name = getattr(op, "name", "op")

    def __call__(self, boxes: np.ndarray, scores: np.ndarray, iou_threshold: float,
                 max_keep: int) -> np.ndarray:
        return self.op(boxes, scores, iou_threshold, max_keep)


def raw_heads(seed: int = 0, classes: int = 3, anchors: int = 400) -> list[np.ndarray]:
    """Raw heads ``[N, 4 + C, A]`` whose samples pass 0.25 in very different numbers: a batch
    of 8 (one sample with no candidate, one where all pass, boxes without an area and tied
    scores among them) and a batch of one."""
    rng = np.random.default_rng(seed)
    head = np.empty((8, 4 + classes, anchors), np.float32)
    head[:, :2] = rng.uniform(20, 300, (8, 2, anchors))
    head[:, 2:4] = rng.uniform(0, 60, (8, 2, anchors))
    head[:, 2, ::17] = 0  # no width: no area
    head[:, 4:] = rng.random((8, classes, anchors)) ** np.array([1, 2, 4, 8, 16, 32, 64, 1])[
        :, None, None]
    head[:, 4:, ::5] = np.round(head[:, 4:, ::5], 1)  # ties
    head[0, 4:] = 0.1  # nothing passes 0.25
    head[7, 4:] = np.maximum(head[7, 4:], 0.3)  # everything passes
    single = head[2:3].copy()
    return [head, single]


class Counted:
    """An op with its calls counted, per sample and per batch."""

    def __init__(self, op: Suppress) -> None:
        self.op = op
        self.name = getattr(op, "name", "op")
        self.singles = self.batches = 0

    def __call__(self, boxes: np.ndarray, scores: np.ndarray, iou_threshold: float,
                 max_keep: int) -> np.ndarray:
        self.singles += 1
        return self.op(boxes, scores, iou_threshold, max_keep)

    def suppress_padded(self, boxes: np.ndarray, scores: np.ndarray, iou_threshold: float,
                        max_keep: int) -> np.ndarray:
        self.batches += 1
        return self.op.suppress_padded(boxes, scores, iou_threshold, max_keep)


def decode_paths(op: Suppress) -> list[str]:
    """Where the task's postprocessing of ``raw_heads`` over ``op`` answers LoadGen other bytes
    on the batched path than on the per-sample one, or took other than one op call a batch."""
    from quantmark.tasks.detection.postprocess import NativeSuppressor, Postprocess

    found = []
    counted = Counted(op)
    batched = Postprocess("raw", 3, conf_threshold=0.25, suppressor=NativeSuppressor(counted))
    single = batched.with_suppressor(NativeSuppressor(PerSample(op)))
    for number, head in enumerate(raw_heads()):
        indices = list(range(100, 100 + len(head)))
        before = counted.batches
        got, want = batched(head, indices), single(head, indices)
        if counted.batches != before + 1 or counted.singles:
            found.append(f"head {number}: {counted.batches - before} batched op calls and "
                         f"{counted.singles} per-sample ones, not one batched call")
        for sample, (a, b) in enumerate(zip(got, want, strict=True)):
            if (a.dtype, a.shape, a.tobytes()) != (b.dtype, b.shape, b.tobytes()):
                found.append(f"head {number}, sample {sample}: {a.shape} rows batched, "
                             f"{b.shape} per sample, not the same bytes")
        if len({len(a) for a in got}) < min(len(got), 3):
            found.append(f"head {number}: too few different detection counts to tell")
    return found


def recorded_nms(sut: str) -> dict:
    """What a run of ``sut`` on a raw-head detector records of its postprocessing (the task
    bound to the SUT as ``run.test_process.prepare`` binds it), its NMS op built."""
    from quantmark.sut.registry import get_sut
    from quantmark.tasks.catalog import get_task
    from tests.tasks.detection.tiny_cases import detector_spec

    return get_task("detection").for_sut(get_sut(sut)).describe(detector_spec("raw"))[
        "postprocess"]
