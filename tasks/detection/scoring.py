"""COCO mAP of a detection run from LoadGen's accuracy log, and the paired change of two runs.

Untimed. The mAP is pycocotools' (``COCOeval``, bbox), as MLPerf's yolo benchmark reports it.
The change of run B against run A has a paired bootstrap interval over images. mAP is no
per-image mean, so each resample is re-accumulated: pycocotools matches each (image, class)
once per run (``evaluate``), then numpy redoes only the accumulation, all resamples at once.
An image drawn w times weighs w in the running counts, as w copies of it would (checked
against COCOeval on duplicated images, and unweighted against COCOeval.accumulate, to 1e-9).
scipy's ``bootstrap`` draws the resamples and forms the BCa interval.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from quantmark.ground.errors import UserError
from quantmark.tasks.accuracy_log import read_log_entries, response_bytes, sample_index

if TYPE_CHECKING:
    from quantmark.tasks.detection.targets import TargetCheck

log = logging.getLogger(__name__)
ROW_FLOATS = 7  # qsl_index, x1, y1, x2, y2, score, class
RECALLS = np.linspace(0.0, 1.0, 101)  # COCO's recall thresholds (COCOeval.Params)
EPS = np.spacing(1)  # COCOeval.accumulate's guard in precision's denominator
CHUNK_CELLS = 2_000_000  # resamples x detections held at once (8-16 MB an array)


def _rows(hex_data: object, where: str) -> np.ndarray:
    """One response's rows ``[R, 7]``; data that is not hex of whole rows is a UserError."""
    raw = response_bytes(hex_data, where)
    if len(raw) % (4 * ROW_FLOATS):
        raise UserError(f"{where}: {len(raw)} response bytes are not whole detection rows of "
                        f"{ROW_FLOATS} float32; pass the accuracy log of a detection run")
    return np.frombuffer(raw, np.float32).reshape(-1, ROW_FLOATS)


def read_detections(log_path: str | Path, sample_count: int
                    ) -> tuple[dict[int, np.ndarray], int]:
    """qsl index -> ``[K, 6]`` detections (sentinel rows dropped), and how many of the
    ``sample_count`` samples have no response; later duplicates of a qsl_idx are ignored."""
    found: dict[int, np.ndarray] = {}
    duplicates = 0  # as classification's reader: the first response of a qsl_idx counts
    for number, entry in enumerate(read_log_entries(log_path)):
        where = f"{log_path}: entry {number}"
        index = sample_index(entry, where)
        if index >= sample_count:
            raise UserError(f"{where}: qsl_idx {index} is beyond the dataset's {sample_count} "
                            "samples; pass the accuracy log of a run on this dataset")
        rows = _rows(entry["data"], where)  # a malformed duplicate is still malformed
        if index in found:
            duplicates += 1
            continue
        found[index] = np.ascontiguousarray(rows[rows[:, 6] != -1, 1:])
    if duplicates:
        log.info("%s: %d duplicate responses ignored (first one counted)", log_path,
                 duplicates)
    return found, sum(1 for i in range(sample_count) if i not in found)


def to_original(detections: np.ndarray, image_height: int, image_width: int,
                target_height: int, target_width: int) -> np.ndarray:
    """Detections in model-input pixels -> the original image's pixels (the letterbox undone,
    boxes clipped to the image); score and class unchanged."""
    from quantmark.qsl.preprocess import letterbox_geometry

    ratio, pad_top, pad_left, _, _ = letterbox_geometry(image_height, image_width,
                                                        target_height, target_width)
    out = np.array(detections, dtype=np.float32, copy=True).reshape(-1, 6)
    out[:, [0, 2]] = np.clip((out[:, [0, 2]] - pad_left) / ratio, 0, image_width)
    out[:, [1, 3]] = np.clip((out[:, [1, 3]] - pad_top) / ratio, 0, image_height)
    return out


def coco_detections(by_row: dict[int, np.ndarray], image_ids: Sequence[int],
                    categories: Sequence[tuple[int, str]]) -> list[dict]:
    """COCO results (image_id, category_id, bbox xywh, score) of detections already in
    original pixels; row r is image ``image_ids[r]``, class k is dataset id
    ``categories[k][0]``. Non-finite rows (a broken model's NaN) are dropped and counted."""
    ids = np.array([category for category, _ in categories], dtype=np.int64)
    results: list[dict] = []
    dropped = 0
    for row in sorted(by_row):
        found = np.asarray(by_row[row], dtype=np.float64).reshape(-1, 6)
        finite = np.isfinite(found).all(axis=1)
        dropped += int((~finite).sum())
        found = found[finite]
        if not len(found):
            continue
        if row >= len(image_ids):
            raise UserError(f"detections for sample {row} but the dataset lists "
                            f"{len(image_ids)} images; score the log against its own dataset")
        classes = found[:, 5].astype(np.int64)
        bad = (classes < 0) | (classes >= len(ids))
        if bad.any():
            raise UserError(f"class {int(classes[bad][0])} detected but the dataset has "
                            f"{len(ids)} categories; the model's classes must be the "
                            "dataset's (pass the matching dataset or model)")
        xywh = np.column_stack((found[:, :2], found[:, 2:4] - found[:, :2])).tolist()
        image, scores = int(image_ids[row]), found[:, 4].tolist()
        results += [{"image_id": image, "category_id": int(category), "bbox": box, "score": score}
                    for box, score, category in zip(xywh, scores, ids[classes], strict=True)]
    if dropped:
        log.warning("%d detections with non-finite values dropped before scoring", dropped)
    return results


@contextlib.contextmanager
def _quiet():
    """pycocotools prints its progress; keep it off the console, in the debug log."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        yield
    log.debug("pycocotools: %s", " ".join(buffer.getvalue().split()))


def _coco(dataset: dict):
    from pycocotools.coco import COCO

    coco = COCO()
    coco.dataset = dataset
    with _quiet():
        coco.createIndex()
    return coco


def _ground_truth(ground_truth: dict):
    """The ground truth as pycocotools' COCO object. Annotation ids are renumbered from 1
    when any is missing, repeated or 0 (COCOeval takes a match with id 0 for no match)."""
    lacking = [key for key in ("images", "annotations", "categories") if key not in ground_truth]
    if lacking or not ground_truth["annotations"]:
        raise UserError(f"ground truth lacks {', '.join(lacking) or 'annotations'} (mAP needs "
                        "labelled objects); pass a COCO-format dict (images, annotations, "
                        "categories)")
    annotations = [dict(ann) for ann in ground_truth["annotations"]]
    ids = [ann.get("id") for ann in annotations]
    renumber = len(set(ids)) != len(ids) or any(not isinstance(i, int) or i < 1 for i in ids)
    for number, ann in enumerate(annotations, 1):
        if "bbox" not in ann or "image_id" not in ann or "category_id" not in ann:
            raise UserError(f"ground-truth annotation {number} lacks bbox, image_id or "
                            "category_id; pass COCO-format annotations")
        ann.setdefault("iscrowd", 0)
        ann.setdefault("area", float(ann["bbox"][2]) * float(ann["bbox"][3]))
        if renumber:
            ann["id"] = number
    return _coco({**ground_truth, "annotations": annotations})


def _results(coco_gt, results: list[dict]):
    """A run's results as a COCO object, as ``COCO.loadRes`` builds it for boxes (area = w*h,
    ids from 1) without touching the caller's dicts; an empty list is an empty run."""
    known = set(coco_gt.getImgIds())
    annotations = []
    for number, result in enumerate(results, 1):
        if result["image_id"] not in known:
            raise UserError(f"a detection names image {result['image_id']}, which the ground "
                            "truth does not have; score the run against its own dataset")
        box = [float(v) for v in result["bbox"]]
        annotations.append({**result, "bbox": box, "area": box[2] * box[3], "id": number,
                            "iscrowd": 0})
    return _coco({"images": list(coco_gt.dataset["images"]), "annotations": annotations,
                  "categories": list(coco_gt.dataset["categories"])})


def _evaluator(coco_gt, results: list[dict], area_all_only: bool = False):
    from pycocotools.cocoeval import COCOeval

    evaluator = COCOeval(coco_gt, _results(coco_gt, results), iouType="bbox")
    if area_all_only:  # the bootstrap needs only area "all": a quarter of the matching
        evaluator.params.areaRng = evaluator.params.areaRng[:1]
        evaluator.params.areaRngLbl = evaluator.params.areaRngLbl[:1]
    with _quiet():
        evaluator.evaluate()
    return evaluator


@dataclass(frozen=True)
class MapResult:
    """COCO mAP of one run, as fractions: ``map`` is mAP@[.5:.95], ``map50`` at IoU 0.5;
    ``stats`` are COCOeval's 12 summary numbers."""

    map: float
    map50: float
    images: int
    detections: int
    stats: tuple[float, ...]


def evaluate(ground_truth: dict, results: list[dict]) -> MapResult:
    """pycocotools' bbox mAP of ``results`` against ``ground_truth`` (a COCO-format dict)."""
    coco_gt = _ground_truth(ground_truth)
    evaluator = _evaluator(coco_gt, results)
    with _quiet():
        evaluator.accumulate()
        evaluator.summarize()
    stats = tuple(float(s) for s in evaluator.stats)
    return MapResult(max(stats[0], 0.0), max(stats[1], 0.0), len(coco_gt.getImgIds()),
                     len(results), stats)


@dataclass(frozen=True)
class _ClassTable:
    """One class's per-image evaluation, detections in accumulation order (score descending,
    ties in image order; one ignored at every IoU threshold is left out, as it moves no
    count): each detection's image, and per IoU threshold the positions of the true
    positives and of the ignored detections (with how many of those precede each true
    positive); each image's count of non-ignored objects."""

    image: np.ndarray  # [D] image position
    hits: list[np.ndarray]  # per threshold: positions of true positives
    skipped: list[np.ndarray]  # per threshold: positions of ignored detections
    skipped_before: list[np.ndarray]  # per threshold, per true positive
    objects: np.ndarray  # [I]


def _tables(evaluator) -> list[_ClassTable]:
    """COCOeval.evaluate's per-image entries (area "all", at most maxDets[-1] per image)
    regrouped per class, as COCOeval.accumulate reads them."""
    count, thresholds = len(evaluator.params.imgIds), len(evaluator.params.iouThrs)
    tables = []
    for k in range(len(evaluator.params.catIds)):
        objects = np.zeros(count)
        scores, image = [], []
        matches, ignores = [np.zeros((thresholds, 0))], [np.zeros((thresholds, 0))]
        for i, entry in enumerate(evaluator.evalImgs[k * count:(k + 1) * count]):
            if entry is None:
                continue
            objects[i] = np.count_nonzero(entry["gtIgnore"] == 0)
            scores += entry["dtScores"]
            image += [i] * len(entry["dtScores"])
            matches.append(entry["dtMatches"])
            ignores.append(entry["dtIgnore"])
        order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="mergesort")
        ignored = np.concatenate(ignores, axis=1)[:, order].astype(bool)
        order, ignored = order[~ignored.all(axis=0)], ignored[:, ~ignored.all(axis=0)]
        tps = (np.concatenate(matches, axis=1)[:, order] != 0) & ~ignored
        hits = [np.flatnonzero(row) for row in tps]
        skipped = [np.flatnonzero(row) for row in ignored]
        before = [np.searchsorted(s, h) for s, h in zip(skipped, hits, strict=True)]
        tables.append(_ClassTable(np.asarray(image, np.intp)[order], hits, skipped, before,
                                  objects))
    return tables


def _first_reaching(recall: np.ndarray) -> np.ndarray:
    """``searchsorted(row, RECALLS, "left")`` for each row of ``recall`` ``[rows, P]``
    (nondecreasing, >= 0). float64 (the unresampled run) row by row, as COCOeval compares;
    float32 (resamples) in one search, rows kept apart by adding row << 31 to the float's
    bits (which order as the floats do)."""
    if recall.dtype == np.float64:
        return np.stack([np.searchsorted(row, RECALLS) for row in recall])
    rows, count = recall.shape
    offsets = np.arange(rows, dtype=np.int64)[:, None] << 31
    keys = (recall.view(np.int32) + offsets).ravel()
    probes = (RECALLS.astype(np.float32).view(np.int32) + offsets).ravel()
    return np.searchsorted(keys, probes).reshape(rows, -1) - np.arange(rows)[:, None] * count


def _class_precision(table: _ClassTable, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean interpolated precision over COCO's 101 recall points ``[B, T]`` of one class for
    each weighting of the images (``weights`` [B, I]), and whether the class has objects
    there (COCO leaves a class without objects out of the mean).

    COCO's interpolated precision at recall r is the best precision at any point of recall
    >= r; recall only grows at a true positive, where precision peaks between them, so only
    the true positives' points are computed. Arithmetic in the weights' dtype: float64 is
    COCOeval's own, float32 halves the resamples' memory traffic."""
    objects = weights @ table.objects.astype(weights.dtype)
    out = np.zeros((len(weights), len(table.hits)))
    if not table.image.size:
        return out, objects > 0
    w = weights[:, table.image]
    scored = np.cumsum(w, axis=1)  # detections so far, ignored ones included
    share = np.where(objects > 0, objects, 1).astype(w.dtype)[:, None]
    for t, (hits, skipped, before) in enumerate(zip(table.hits, table.skipped,
                                                    table.skipped_before, strict=True)):
        if not hits.size:
            continue  # no true positive: precision 0 at every recall point
        tp = np.cumsum(w[:, hits], axis=1)
        seen = scored[:, hits]
        if skipped.size:
            passed = np.zeros((len(w), skipped.size + 1), w.dtype)
            np.cumsum(w[:, skipped], axis=1, out=passed[:, 1:])
            seen = seen - passed[:, before]
        precision = tp / (seen + EPS)
        envelope = np.maximum.accumulate(precision[:, ::-1], axis=1)[:, ::-1]
        first = _first_reaching(tp / share)
        picked = np.take_along_axis(envelope, np.minimum(first, hits.size - 1), axis=1)
        out[:, t] = np.where(first < hits.size, picked, 0.0).mean(axis=1)
    return out, objects > 0


def weighted_map(tables: list[_ClassTable], weights: np.ndarray) -> np.ndarray:
    """mAP@[.5:.95] and mAP50 (fractions, ``[2, B]``) for each row of image weights
    ``[B, I]``; float64 ones are COCOeval's own accumulation."""
    weights = np.atleast_2d(weights)
    step = max(1, CHUNK_CELLS // max([table.image.size for table in tables] + [1]))
    out = np.zeros((2, len(weights)))
    for start in range(0, len(weights), step):
        chunk = weights[start:start + step]
        sums, classes = np.zeros((2, len(chunk))), np.zeros(len(chunk))
        for table in tables:
            precision, present = _class_precision(table, chunk)
            sums += np.where(present, [precision.mean(axis=1), precision[:, 0]], 0.0)
            classes += present
        out[:, start:start + step] = np.where(classes > 0, sums / np.maximum(classes, 1), 0.0)
    return out


@dataclass(frozen=True)
class Change:
    """Run B's mAP against run A's on the same images, in percentage points: mAP@[.5:.95]
    (``baseline``, ``candidate``, ``delta``, interval ``low``..``high``) and the same for
    mAP50; ``method`` says how the interval was formed."""

    baseline: float
    candidate: float
    delta: float
    low: float
    high: float
    images: int
    method: str
    baseline50: float
    candidate50: float
    delta50: float
    low50: float
    high50: float


def _image_weights(draws: np.ndarray, count: int) -> np.ndarray:
    """Each resample's draws (image positions, ``[B, n]``) as per-image weights ``[B, I]``."""
    draws = np.atleast_2d(draws).astype(np.intp)
    offsets = np.arange(len(draws))[:, None] * count
    return np.bincount((draws + offsets).ravel(), minlength=len(draws) * count).reshape(
        len(draws), count).astype(np.float32)


def paired_change(ground_truth: dict, results_a: list[dict], results_b: list[dict],
                  resamples: int = 1000, seed: int = 0, confidence: float = 0.95) -> Change:
    """The change of run B (candidate) against run A (baseline) in mAP and mAP50, with a
    paired bootstrap interval over images (BCa; percentile where BCa is undefined, as when
    both runs answered alike). Seeded: the same call gives the same interval."""
    from scipy.stats import bootstrap

    if resamples < 10 or not 0 < confidence < 1:
        raise UserError(f"resamples {resamples} / confidence {confidence}: pass at least 10 "
                        "resamples and a confidence between 0 and 1 (e.g. 1000, 0.95)")
    coco_gt = _ground_truth(ground_truth)
    count = len(coco_gt.getImgIds())
    tables_a, tables_b = (_tables(_evaluator(coco_gt, results, area_all_only=True))
                          for results in (results_a, results_b))

    def delta(draws: np.ndarray, axis: int = -1) -> np.ndarray:
        weights = _image_weights(draws, count)
        points = 100.0 * (weighted_map(tables_b, weights) - weighted_map(tables_a, weights))
        return points if np.ndim(draws) > 1 else points[:, 0]

    base = 100.0 * weighted_map(tables_a, np.ones(count))[:, 0]  # float64: COCOeval's
    cand = 100.0 * weighted_map(tables_b, np.ones(count))[:, 0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BCa on a degenerate distribution: handled below
        result = bootstrap((np.arange(count),), delta, n_resamples=resamples, vectorized=True,
                           confidence_level=confidence, method="BCa",
                           rng=np.random.default_rng(seed))
    low, high = (np.asarray(end) for end in result.confidence_interval)
    method = f"paired bootstrap over images, BCa, {resamples} resamples, {confidence:.0%}"
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        tail = 100 * (1 - confidence) / 2
        low, high = np.percentile(result.bootstrap_distribution, [tail, 100 - tail], axis=-1)
        method = method.replace("BCa", "percentile")
    return Change(float(base[0]), float(cand[0]), float(cand[0] - base[0]), float(low[0]),
                  float(high[0]), count, method, float(base[1]), float(cand[1]),
                  float(cand[1] - base[1]), float(low[1]), float(high[1]))


def accuracy_text(result: MapResult, target: TargetCheck | None,
                  log_path: str | Path | None = None) -> str:
    """accuracy.txt in the official form: ``mAP=`` first (the only line the MLPerf checker
    reads as the result), mAP50, the image count, the target check, and (submission form)
    the accuracy log's sha256."""
    lines = [f"mAP={100 * result.map:.3f}%", f"mAP50={100 * result.map50:.3f}%",
             f"images={result.images}", f"detections={result.detections}"]
    if target is not None:
        lines.append(target.line())
    if log_path is not None:
        from quantmark.ground.hashing import hash_file

        lines.append(f"hash={hash_file(log_path, length=64)}")
    return "\n".join(lines) + "\n"
