"""How the recovery curve judges a model's quality: in its task's own metric, on the same
evaluation samples for every point of the curve, each point's change against K=0 paired on
those samples.

A classifier is judged in top-1 (which samples it gets right; the change a paired test over
samples, or over source images where crops share one: ``report.stats.accuracy_change``); a
detector in the COCO mAP of its detections after the task's own postprocessing, mapped back to
each image's pixels as an accuracy run scores them (the change a paired bootstrap over images:
``diagnosis.output_quality``). The metric's key, name and unit are the task's (``Task.metric``):
the records and tables name it from there. A task whose outputs diagnose cannot score has no
judge, and ``refusal`` says why in a line.
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np

from quantmark.diagnosis import output_quality
from quantmark.ground.errors import UserError
from quantmark.ground.metric import Metric
from quantmark.report.quality import classifies
from quantmark.report.stats import accuracy_change
from quantmark.sut.interface import Backend
from quantmark.tasks.contract import QualityChange, Task

log = logging.getLogger(__name__)

#: ``batch(layout, start, stop)``: evaluation samples preprocessed for a backend's layout
Batches = Callable[[str, int, int], np.ndarray]


class Judge(ABC):
    """Scores each variant of the curve on the first ``count`` evaluation samples."""

    #: the model's outputs go through the task's postprocessing (not in predict) to be scored
    postprocessed: bool = False

    def __init__(self, metric: Metric, count: int, batch: int) -> None:
        self.metric, self.count, self.batch = metric, count, batch

    @abstractmethod
    def answers(self, backend: Backend) -> Any:
        """What the backend answered on the samples, in the form ``figure`` and ``change``
        read (kept per variant, so every change is paired on the same samples)."""

    @abstractmethod
    def figure(self, answers: Any) -> float:
        """The metric of ``answers``, in the metric's unit."""

    @abstractmethod
    def change(self, base: Any, answers: Any) -> QualityChange:
        """``answers`` against ``base`` (K=0), paired, in the metric's points."""


def change_record(change: QualityChange) -> dict[str, Any]:
    """A row's paired change as the record keeps it (p_value None where the method has none,
    as a bootstrap interval)."""
    p_value = None if math.isnan(change.p_value) else change.p_value
    return {"points": round(change.delta_points, 3), "low": round(change.low, 3),
            "high": round(change.high, 3), "p_value": p_value, "test": change.method,
            "groups": change.n_groups}


class TopOne(Judge):
    """A classifier: which samples it gets right, paired sample by sample (by source image
    where the data names one)."""

    def __init__(self, metric: Metric, count: int, batch: int, batches: Batches,
                 labels: np.ndarray, groups: np.ndarray | None) -> None:
        super().__init__(metric, count, batch)
        self.batches, self.labels = batches, np.asarray(labels)[:count]
        self.groups = groups[:count] if groups is not None else None

    def answers(self, backend: Backend) -> np.ndarray:
        correct = []
        for start in range(0, self.count, self.batch):
            stop = min(start + self.batch, self.count)
            x = backend.encode_samples(self.batches(backend.layout, start, stop))
            correct.append(predicted_classes(backend, backend.predict(x))
                           == self.labels[start:stop])
        return np.concatenate(correct)

    def figure(self, answers: np.ndarray) -> float:
        return 100.0 * float(np.mean(answers))

    def change(self, base: np.ndarray, answers: np.ndarray) -> QualityChange:
        found = accuracy_change(base, answers, self.groups)
        return QualityChange(found.delta_points, found.low, found.high, found.n_samples,
                             found.n_groups, found.method, self.metric.name,
                             p_value=found.p_value)


def predicted_classes(backend: Backend, scores: np.ndarray) -> np.ndarray:
    """Class per sample from a backend's output (scores or class indices), on the dataset's
    label scale."""
    classes = scores if scores.ndim == 1 else scores.argmax(axis=1)
    return np.asarray(classes, dtype=np.int64) - int(getattr(backend, "label_offset", 0))


class Boxes(Judge):
    """A detector: its raw outputs through the task's postprocessing (the NMS a run times),
    scored against the images' ground truth; paired image by image."""

    postprocessed = True

    def __init__(self, task: Task, spec: Any, data: Any, count: int, batch: int) -> None:
        super().__init__(task.metric, count, batch)
        self.task, self.spec, self.data = task, spec, data
        self.truth = output_quality.ground_truth(data, count, "--eval-samples")

    def answers(self, backend: Backend) -> list[dict]:
        raw = output_quality.outputs(backend, self.data, self.count, self.batch)
        return output_quality.detections(self.task, self.spec, self.data, raw)

    def figure(self, answers: list[dict]) -> float:
        from quantmark.tasks.detection import scoring

        return 100.0 * scoring.evaluate(self.truth, answers).map

    def change(self, base: list[dict], answers: list[dict]) -> QualityChange:
        from quantmark.tasks.detection import scoring

        found = scoring.paired_change(self.truth, base, answers)
        return QualityChange(found.delta, found.low, found.high, found.images, found.images,
                             found.method, self.metric.name, baseline=found.baseline,
                             candidate=found.candidate)


def refusal(task: Task) -> str | None:
    """Why the recovery curve cannot judge the task's models (None: it can)."""
    if classifies(task.metric) or output_quality.scores_boxes(task):
        return None
    return (f"--recover: task {task.name} gives diagnose no way to score a model's outputs in "
            f"its metric ({task.metric.name}) yet; the curve is judged for classifiers and "
            "detectors")


def judge_for(task: Task, spec: Any, data: Any, count: int, batch: int) -> Judge:
    """The judge of the task's models on the first ``count`` evaluation samples of ``data``
    (``steps.Data``)."""
    if classifies(task.metric):
        return TopOne(task.metric, count, batch, data.batch, data.labels, data.groups)
    if output_quality.scores_boxes(task):
        return Boxes(task, spec, data, count, batch)
    raise UserError(refusal(task) or f"--recover: no judge for task {task.name}")
