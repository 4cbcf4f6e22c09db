"""Box sets on which a framework's NMS must keep what quantmark's numpy ``nms`` keeps, and the
check itself: seeded random sets (overlapping clusters, several classes moved apart by the
class offset the postprocessing uses, distinct scores, caps that cut the answer short), and
seeded sets where most scores tie, and the edges (an IoU exactly at the threshold, tied
scores, boxes without an area, the empty set). Every box is float32-representable, so an op
computing in float32 sees the boxes the float64 reference sees. And what a detector's run
records of the NMS it ran."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

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


def recorded_nms(sut: str) -> dict:
    """What a run of ``sut`` on a raw-head detector records of its postprocessing (the task
    bound to the SUT as ``run.test_process.prepare`` binds it), its NMS op built."""
    from quantmark.sut.registry import get_sut
    from quantmark.tasks.catalog import get_task
    from tests.tasks.detection.tiny_cases import detector_spec

    return get_task("detection").for_sut(get_sut(sut)).describe(detector_spec("raw"))[
        "postprocess"]
