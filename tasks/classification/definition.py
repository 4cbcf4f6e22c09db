"""Image classification: a model with one image input and an ``[N, classes]`` output, a
labelled image folder (val_map.txt or class folders), top-1 accuracy.

Its scoring lives here (scoring.py, label_shift.py); the model and dataset readers it names
still live where they grew (models.workload, qsl), shared with the image machinery every image
task uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import atomic_write_text
from quantmark.ground.metric import TOP1, Metric
from quantmark.tasks.contract import Task


class ClassificationTask(Task):
    name: ClassVar[str] = "classification"
    metric: ClassVar[Metric] = TOP1

    @property
    def models(self) -> tuple[str, ...]:  # type: ignore[override]
        from quantmark.models.zoo import MODEL_NAMES

        return MODEL_NAMES

    def claims(self, model_path: Path) -> bool:
        from quantmark.models.workload import inspect_onnx

        try:
            inspect_onnx(model_path, str(model_path))
        except UserError:
            return False
        return True

    def resolve_spec(self, config: Any) -> Any:
        from quantmark.models.workload import resolve_spec

        return resolve_spec(config)

    def open_dataset(self, config: Any, spec: Any) -> Any:
        from quantmark.models.workload import open_run_dataset

        return open_run_dataset(config, spec)

    def score(self, work: Path, prepared: Any) -> dict[str, Any]:
        """Top-1 from the accuracy log, written as accuracy.txt unless samples are missing;
        near 0% with the model's classes one off the labels, with a ``hint`` that says so."""
        from quantmark.tasks.classification.label_shift import note_shift
        from quantmark.tasks.classification.scoring import (
            accuracy_text,
            compute_accuracy,
            read_val_map_labels,
        )

        accuracy = compute_accuracy(work / "mlperf_log_accuracy.json",
                                    read_val_map_labels(work / "val_map.txt"),
                                    expected_count=prepared.qsl.total_count)
        if accuracy.missing:
            return {"missing": accuracy.missing}
        atomic_write_text(work / "accuracy.txt", accuracy_text(accuracy))
        result = {"top1": accuracy.percent, "good": accuracy.good, "total": accuracy.total,
                  "duplicates": accuracy.duplicates}
        note_shift(result, work, getattr(prepared.backend.artifact, "meta", None))
        return result


TASK = ClassificationTask()
