"""How ``points``, ``count`` and history's --since/--until narrow the store: exact names, dates
as whole UTC days."""

from __future__ import annotations

from datetime import date, datetime, timezone
from typing import Any

from sqlalchemy import select

from quantmark.ground.errors import UserError
from quantmark.store import store_schema as schema


def epoch(value: str | date | datetime | None, end: bool = False) -> float | None:
    """A --since/--until bound as epoch seconds: a date is its whole day (UTC; ``end``: up to
    its last second), a datetime itself (UTC when it names no zone)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = (date.fromisoformat(value) if len(value) == 10
                     else datetime.fromisoformat(value))
        except ValueError:
            raise UserError(f"date {value!r}: give YYYY-MM-DD or an ISO 8601 time "
                            "(2026-11-02T14:00)") from None
    if not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day, tzinfo=timezone.utc)
        return value.timestamp() + (86400 - 1e-6 if end else 0)
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.timestamp()


def matching(query: Any, *, model: str | None = None, sut: str | None = None,
              scenario: str | None = None, machine: str | None = None,
              version: str | None = None, since: str | date | datetime | None = None,
              until: str | date | datetime | None = None, tag: str | None = None) -> Any:
    """``query`` over figures joined to their jobs, narrowed by the filters (exact names;
    dates inclusive)."""
    figures, jobs = schema.figures, schema.jobs
    query = query.select_from(figures.join(jobs, figures.c.job_id == jobs.c.id))
    for column, wanted in ((figures.c.model, model), (figures.c.sut, sut),
                           (figures.c.scenario, scenario), (jobs.c.machine, machine),
                           (jobs.c.version, version)):
        if wanted is not None:
            query = query.where(column == wanted)
    if (low := epoch(since)) is not None:
        query = query.where(jobs.c.started_at >= low)
    if (high := epoch(until, end=True)) is not None:
        query = query.where(jobs.c.started_at <= high)
    if tag is not None:
        query = query.where(jobs.c.id.in_(select(schema.tags.c.job_id)
                                          .where(schema.tags.c.tag == tag)))
    return query
