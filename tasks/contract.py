"""The one interface every task folder implements (its ``definition.py`` declares ``TASK``).

A task owns what a model's output means: how a model of the task is recognised from its file,
its dataset readers and preprocessing, the postprocessing a SUT runs inside its timed work
(MLPerf: the SUT returns final answers, e.g. a detector's detections after NMS), and the
quality metric with its official-form ``accuracy.txt``. The run, the record and the reports ask
the task; none of them says "top-1" itself.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from quantmark.ground.metric import Metric, PointsChange

#: ``respond(outputs, qsl_indices)``: the model's outputs for a batch -> one float32 response
#: array per sample (what LoadGen logs); run on the SUT's thread, inside the timed work
Respond = Callable[[np.ndarray, Sequence[int]], list[np.ndarray]]


@dataclass(frozen=True)
class QualityChange(PointsChange):
    """A candidate's change in its task's metric against a baseline on the same samples, in
    the metric's points, with its interval: what a task that pairs its own runs returns, read
    by the reports exactly as classification's top-1 change (``report.stats.AccuracyChange``)."""

    delta_points: float
    low: float
    high: float
    n_samples: int  # compared: the images both runs answered
    n_groups: int  # the independent units resampled (images)
    method: str  # e.g. "bootstrap over images"
    metric: str  # e.g. "mAP@[.5:.95]"
    baseline: float = math.nan  # the two figures, in the metric's points
    candidate: float = math.nan
    p_value: float = math.nan
    left_out: int = 0
    #: what the resampled units are ("images"; a text task's "sentences")
    units: str = "images"

    def text(self) -> str:
        """``-0.84 pt mAP@[.5:.95] [-1.90, +0.21] over 360 images, bootstrap over images: no
        measurable change; the set resolves ±1.1 pt``."""
        return (f"{self.delta_points:+.2f} pt {self.metric} [{self.low:+.2f}, {self.high:+.2f}] "
                f"over {self.n_groups} {self.units}, {self.method}: {self.verdict}; "
                f"{self.resolving_text()}")


class Task(ABC):
    """A kind of model and how it is scored. Instances are stateless: one per task folder,
    and the copies ``for_sut`` binds to a SUT."""

    #: the task's name (the folder's): ``--task`` takes it, results.json records it
    name: ClassVar[str]
    #: how its quality is measured
    metric: ClassVar[Metric]
    #: the built-in models this task owns (``--model NAME`` picks the task)
    models: ClassVar[tuple[str, ...]] = ()
    #: whether the task pairs two accuracy runs itself (``paired_change``); classification's
    #: samples are paired by the report's own readers (report.accuracy)
    pairs_runs: ClassVar[bool] = False

    @abstractmethod
    def claims(self, model_path: Path) -> bool:
        """Whether the model file's inputs and outputs are this task's (read, not run)."""

    @abstractmethod
    def resolve_spec(self, config: Any) -> Any:
        """The run's ``ModelSpec``: a pure function of the config, so the parent (validating)
        and the test process (running) resolve the same one."""

    def model_file(self, config: Any) -> str | None:
        """The model file the SUT loads: ``--model-path``, or the file a built-in model of the
        task is (a detector quantmark trained); None for a model built from its weights."""
        return config.model_path

    def calibration_list(self, config: Any, dataset: Any) -> str | None:
        """The images a static INT8 SUT calibrates on (one path a line, relative to the
        dataset): ``--calibration-list``, or the task's own for its built-in dataset; None
        holds calibration images out of the dataset (the same for every SUT)."""
        return config.calibration_list

    @abstractmethod
    def open_dataset(self, config: Any, spec: Any) -> Any:
        """The run's dataset (``--dataset-path`` or the task's built-in one), checked against
        the model: one line naming both where they do not fit."""

    def sample_library(self, dataset: Any, spec: Any, backend: Any) -> Any:
        """The LoadGen QSL over the dataset's evaluation images, preprocessed by the spec's
        recipe into the backend's layout (image tasks share the uint8 cache)."""
        from quantmark.qsl.library import QuerySampleLibrary
        from quantmark.qsl.preprocess import recipe_for

        return QuerySampleLibrary.from_dataset(dataset, recipe_for(spec, backend.layout),
                                               spec.performance_sample_count,
                                               encode=backend.encode_samples)

    def for_config(self, config: Any) -> Task:
        """The task as the run's model makes it: a task whose metric depends on the model (a
        text encoder's embedding or classifier head) returns a copy bound to it. By default
        the task itself."""
        return self

    def calibration(self, dataset: Any, spec: Any, listing: str | None) -> Any:
        """The calibration set a static INT8 SUT quantizes with (``sut.interface.Calibration``):
        images of the dataset, or ``listing``'s; a task with other samples gives its own."""
        from quantmark.qsl.calibration_sets import CalibrationProvider

        return CalibrationProvider(dataset, spec, listing)

    def for_sut(self, sut: Any) -> Task:
        """The task as the SUT ``sut`` (its ``SutInfo``) runs it: where a task's
        postprocessing has a framework's own form (a detector's NMS on the framework's op),
        a copy bound to that SUT, whose ``respond`` and ``describe`` both use it, so a run's
        timed work and its record agree. By default the task itself: classification, and a
        task written without it, run the same for every SUT."""
        return self

    def respond(self, spec: Any) -> Respond | None:
        """The postprocessing the SUT runs after predict, in its timed work; None: the
        classification convention (one float32 class per sample, argmax in the harness)."""
        return None

    def describe(self, spec: Any) -> dict[str, Any]:
        """What results.json records of the task (its name, metric, postprocessing)."""
        return {"name": self.name, "metric": self.metric.to_record()}

    @abstractmethod
    def score(self, work: Path, prepared: Any) -> dict[str, Any]:
        """Score an accuracy run's ``mlperf_log_accuracy.json`` in ``work``: write the
        official-form ``accuracy.txt`` and return the record's accuracy (the figure under
        ``metric.key``; ``missing``: samples without a response, then nothing is written)."""

    def paired_change(self, baseline: Path, candidate: Path) -> QualityChange | None:
        """The candidate accuracy run's change against the baseline's on the samples both
        answered (``pairs_runs`` tasks); None where they share none or read other data."""
        raise NotImplementedError(f"task {self.name} does not pair runs itself")
