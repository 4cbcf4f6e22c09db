"""What the diagnosed layers' errors come to at the end, for a task whose output is not one
class per sample (a detector): the final output's error against the reference's, and the task's
own metric of both SUTs' answers on the diagnosed samples.

Top-1 agreement means nothing for a detector's raw head, and its SQNR alone does not say
whether a box moved: so both SUTs' outputs go through the task's own postprocessing
(``Task.respond``, the NMS a run times) and are scored as an accuracy run scores them (COCO mAP
of the detections mapped back to each image's pixels, against those images' ground truth),
paired image by image.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from quantmark.ground.errors import UserError
from quantmark.sut.interface import Backend

log = logging.getLogger(__name__)


def outputs(backend: Backend, data: Any, count: int, batch: int) -> np.ndarray:
    """The backend's final output for the first ``count`` samples, batch by batch."""
    found = []
    for start in range(0, count, batch):
        stop = min(start + batch, count)
        x = backend.encode_samples(data.batch(backend.layout, start, stop))
        found.append(np.asarray(backend.predict(x), dtype=np.float32))
    return np.concatenate(found)


def output_error(got: np.ndarray, want: np.ndarray) -> dict[str, Any]:
    """SQNR (dB) and cosine of the test's final output against the reference's, over every
    value; None where the two have other shapes (then only the metric compares them)."""
    if got.shape != want.shape:
        return {"shape": list(got.shape), "reference_shape": list(want.shape),
                "sqnr_db": None, "cosine": None}
    got64, want64 = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    noise = float(np.sum((got64 - want64) ** 2))
    signal = float(np.sum(want64 ** 2))
    sqnr = 10.0 * np.log10(signal / noise) if noise > 0 and signal > 0 else float("inf")
    norms = float(np.linalg.norm(got64) * np.linalg.norm(want64))
    cosine = float(got64 @ want64 / norms) if norms else 1.0
    return {"shape": list(got.shape), "sqnr_db": round(sqnr, 3) if np.isfinite(sqnr) else None,
            "cosine": round(cosine, 6), "identical": noise == 0}


def scores_boxes(task: Any) -> bool:
    """Whether the task's answers are boxes this module scores (the detection task's, whose
    postprocessing gives COCO rows and whose dataset holds their ground truth)."""
    from quantmark.tasks.detection.definition import DetectionTask

    return isinstance(task, DetectionTask)


def detections(task: Any, spec: Any, data: Any, raw: np.ndarray) -> list[dict]:
    """COCO results of the raw outputs' detections (the task's postprocessing), in each
    image's own pixels."""
    from quantmark.tasks.detection import scoring

    respond = task.respond(spec)
    answers = respond(raw, list(range(len(raw))))
    rows = data.dataset.cache_rows
    by_index = {}
    for index, answer in enumerate(answers):
        found = np.asarray(answer)[np.asarray(answer)[:, 6] != -1, 1:]
        height, width = (int(v) for v in data.dataset.image_sizes[rows[index]])
        by_index[index] = scoring.to_original(found, height, width, spec.input_size,
                                              spec.input_width)
    ids = [data.dataset.image_id(int(r)) for r in rows[:len(raw)]]
    return scoring.coco_detections(by_index, ids, data.dataset.categories)


def ground_truth(data: Any, count: int, flag: str) -> dict[str, Any]:
    """The COCO ground truth of the first ``count`` evaluation images; a UserError naming
    ``flag`` where they hold no object (mAP needs some)."""
    truth = data.dataset.ground_truth(data.dataset.cache_rows[:count])
    if not truth["annotations"]:
        raise UserError(f"the first {count} evaluation images have no ground-truth boxes: "
                        f"pass more {flag} or a dataset with objects")
    return truth


def detection_quality(task: Any, spec: Any, data: Any, test: Backend, ref: Backend,
                      count: int, batch: int) -> dict[str, Any]:
    """The final output's error, and the mAP of the test's and the reference's detections on
    the first ``count`` samples with the paired change (points, bootstrap over images)."""
    from quantmark.tasks.detection import scoring

    got, want = outputs(test, data, count, batch), outputs(ref, data, count, batch)
    truth = ground_truth(data, count, "--samples")
    change = scoring.paired_change(truth, detections(task, spec, data, want),
                                   detections(task, spec, data, got))
    log.info("final output: %s %.2f vs %.2f (reference)", task.metric.name, change.candidate,
             change.baseline)
    return {"output": output_error(got, want), "metric": task.metric.to_record(),
            "images": change.images, "test": round(change.candidate, 3),
            "reference": round(change.baseline, 3),
            "change_points": {"delta": round(change.delta, 3), "low": round(change.low, 3),
                              "high": round(change.high, 3), "method": change.method},
            "map50": {"test": round(change.candidate50, 3),
                      "reference": round(change.baseline50, 3),
                      "delta": round(change.delta50, 3)},
            "postprocess": task.describe(spec).get("postprocess")}
