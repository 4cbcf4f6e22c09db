"""The quality metric a report row is scored by, as its run's task names it, and the labels the
tables, CSVs and figures give it.

A run's results.json names its task's metric (``task.metric``); a record written before tasks
names none and is classification's top-1 (``Metric.from_record(None)``). Every label here is
built from the metric alone, so top-1's read exactly as they did before tasks (``top-1 %``,
``Δ top-1 vs fw FP32``, CSV ``top1_change_vs_fp32_pts``) and a detector's say mAP, never top-1.
A table whose rows are scored by several metrics carries one column group per metric, first
seen first; a row fills its own metric's and leaves the others blank.

Plain data only (no statistics): the single-run table of a lean install reads it too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from quantmark.ground.metric import TOP1, Metric


def metric_of(record: Any) -> Metric:
    """The metric a record's task names (a results.json's ``task.metric``; the record typed or
    as its JSON dict); top-1 for one written before tasks, which were all classification's."""
    task = record.get("task") if isinstance(record, dict) else getattr(record, "task", None)
    return Metric.from_record(task.get("metric") if isinstance(task, dict) else None)


def figure(accuracy: dict[str, Any] | None, metric: Metric) -> Any:
    """An accuracy run's figure in ``metric`` (its record's ``accuracy[metric.key]``); None
    for a run without one."""
    return (accuracy or {}).get(metric.key)


def classifies(metric: Metric) -> bool:
    """The metric scores one class per sample (top-1): only then does a model with random
    weights score at chance, and does each sample's answer agree or not with FP32's."""
    return metric == TOP1


def in_order(metrics: Iterable[Metric]) -> list[Metric]:
    """The distinct metrics, first seen first; top-1 alone where there are none, so a report
    of no scored run reads as it did before tasks."""
    return list(dict.fromkeys(metrics)) or [TOP1]


def value_label(metric: Metric, unit: bool = True) -> str:
    """``top-1 %``, ``mAP@[.5:.95] %`` (the bare name without ``unit``)."""
    return f"{metric.name} {metric.unit}" if unit and metric.unit else metric.name


def change_label(metric: Metric, against: str = "fw FP32") -> str:
    """``Δ top-1 vs fw FP32``: the column of the paired change against a reference."""
    return f"Δ {metric.name} vs {against}"


def csv_key(metric: Metric, suffix: str = "") -> str:
    """A CSV column of the metric: ``top1``, ``top1_change_vs_fp32_pts`` (``suffix``
    ``change_vs_fp32_pts``), ``map_change_low_pts`` ..."""
    return f"{metric.key}_{suffix}" if suffix else metric.key


def axis_label(metric: Metric, agreement: bool = False) -> str:
    """A figure's quality axis: ``top-1 accuracy (%)``, ``mAP@[.5:.95] (%)``; with
    ``agreement`` (a classifier with random weights) its agreement with the framework's FP32."""
    if agreement:
        return f"{metric.name} agreement with the framework's FP32 (%)"
    return f"{metric.name}{' accuracy' if classifies(metric) else ''} ({metric.unit})"


def task_section(metric: Metric, name: str) -> dict[str, Any]:
    """A record's ``task`` section as a run's results.json writes it (name and metric), for
    records that judge runs of a task without being one (a recommendation)."""
    return {"name": name, "metric": metric.to_record()}
