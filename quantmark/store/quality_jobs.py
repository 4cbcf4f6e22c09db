"""The accuracy runs of the results store, each by its task's metric: what ``run.py history``
shows beside the performance series.

An accuracy run is a job without a performance figure (``jobs.kind`` ``accuracy``); its
``detail`` holds its figure under its metric's key and, where its record named its task, the
metric itself with the model, SUT and scenario (``job_facts.accuracy_detail``). A series here
is (model, SUT, metric): a detector's mAP and a classifier's top-1 never share one. An accuracy
run recorded before tasks named neither model nor metric: it is top-1 of no known model, so a
model or SUT filter leaves it out, as the store always did.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from quantmark.ground.metric import Metric
from quantmark.store import store_schema as schema
from quantmark.store.point_rows import iso_utc
from quantmark.store.points import Point, SeriesKey

KIND = "accuracy"


@dataclass(frozen=True)
class QualityPoint:
    """One accuracy run's figure in its task's metric."""

    model: str  # "" for a run recorded before tasks
    sut: str
    metric: Metric
    value: float | None
    when: str  # ISO 8601 UTC
    version: str
    machine: str
    run_dir: str

    @property
    def series(self) -> tuple[str, str, str]:
        """What makes two figures comparable: the model, the SUT and the metric's key."""
        return (self.model, self.sut, self.metric.key)


def as_point(point: QualityPoint) -> Point:
    """The accuracy run as a trend point (``trend_plot``), its series named by the metric:
    the panel's title says "accuracy" and its axis the metric's name and unit."""
    unit = f" ({point.metric.unit})" if point.metric.unit else ""
    return Point(series=SeriesKey(point.model or "(model not recorded)", point.sut, KIND,
                                  f"{point.metric.name}{unit}"),
                 job_id=point.run_dir, when=point.when, value=point.value, low=None, high=None,
                 runs=() if point.value is None else (point.value,), version=point.version,
                 run_dir=point.run_dir, machine=point.machine)


def quality_point(row: Any) -> QualityPoint:
    """The point of one ``jobs`` row of an accuracy run."""
    detail = json.loads(row["detail"] or "{}")
    metric = Metric.from_record(detail.get("metric"))
    value = detail.get(metric.key)
    return QualityPoint(model=str(detail.get("model") or ""), sut=str(detail.get("sut") or ""),
                        metric=metric, value=None if value is None else float(value),
                        when=iso_utc(row["started_at"]), version=row["version"],
                        machine=row["machine"], run_dir=row["folder"])


def accuracy_query(machine: str | None = None, version: str | None = None,
                   low: float | None = None, high: float | None = None,
                   tag: str | None = None) -> Any:
    """The accuracy runs' ``jobs`` rows narrowed by the filters SQL can apply (``low`` and
    ``high``: the --since/--until bounds as epoch seconds), oldest first."""
    jobs = schema.jobs
    query = select(jobs).where(jobs.c.kind == KIND)
    for column, wanted in ((jobs.c.machine, machine), (jobs.c.version, version)):
        if wanted is not None:
            query = query.where(column == wanted)
    if low is not None:
        query = query.where(jobs.c.started_at >= low)
    if high is not None:
        query = query.where(jobs.c.started_at <= high)
    if tag is not None:
        query = query.where(jobs.c.id.in_(select(schema.tags.c.job_id)
                                          .where(schema.tags.c.tag == tag)))
    return query.order_by(jobs.c.started_at, jobs.c.id)


def matching(rows: Sequence[Any], model: str | None = None, sut: str | None = None,
             scenario: str | None = None) -> list[QualityPoint]:
    """The points of ``rows`` of this model and SUT (named in their detail), by series then
    time. An accuracy run is an Offline test: another --scenario leaves every one out."""
    if scenario is not None and scenario != "Offline":
        return []
    found = [quality_point(row) for row in rows]
    wanted = {"model": model, "sut": sut}
    found = [p for p in found if all(v is None or getattr(p, k) == v for k, v in wanted.items())]
    return sorted(found, key=lambda p: p.series)  # stable: by time within a series
