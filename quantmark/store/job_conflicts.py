"""Whether a run may join a job the store already holds: a repeat set grows run by run, but a
changed copy of a set is not one of its runs.

A repeat set is one job keyed by its set id (``set:<id>``), so a copy of its folder whose
results.json files were rewritten (other figures, another machine's runs) carries the same key
with other bytes: joining it to the stored job would pool two measurements into one median and
interval. A run joins only where it is new to the set - a repeat index the job does not hold,
the set's series, machine and size - else it is refused in one line naming what differs
(``StoreConflict``).
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, select

from quantmark.ground.errors import UserError
from quantmark.store import store_schema as schema
from quantmark.store.job_facts import JobFacts, dumps
from quantmark.store.point_rows import iso_utc


class StoreConflict(UserError):
    """A record that would join a job the store holds, but is not one of its runs."""


def check_joins(connection: Connection, job_id: int, facts: JobFacts) -> None:
    """A StoreConflict naming what differs where ``facts`` would join job ``job_id`` but is
    not one of its runs: another run under a repeat index the job holds, or another series,
    machine or set size."""
    job = connection.execute(select(schema.jobs).where(schema.jobs.c.id == job_id)
                             ).mappings().one()
    differs = []
    if facts.repeat_index is not None:
        same = connection.execute(select(schema.records).where(
            schema.records.c.job_id == job_id,
            schema.records.c.repeat_index == facts.repeat_index)).mappings().first()
        if same is not None:
            differs.append(run_differs(same, facts))
    figure = connection.execute(select(schema.figures).where(
        schema.figures.c.job_id == job_id)).mappings().first()
    series = facts.series
    if figure is not None and series is not None:
        held = (figure["model"], figure["sut"], figure["scenario"], figure["metric"])
        if held != (series.model, series.sut, series.scenario, series.metric):
            differs.append(f"the set measured {' '.join(held)}, this run {series.label()}")
    if job["machine"] != facts.machine:
        differs.append(f"the set ran on {job['machine']}, this run on {facts.machine}")
    held_detail = json.loads(job["detail"])
    if held_detail.get("of") != facts.detail.get("of"):
        differs.append(f"the set is of {held_detail.get('of')} runs, this run's of "
                       f"{facts.detail.get('of')}")
    if differs:
        raise StoreConflict(
            f"{facts.path}: not recorded: the store already holds its repeat set "
            f"({facts.job_key}, from {job['folder']}) with other content ({'; '.join(differs)})"
            "; a changed copy of a set is not one of its runs: import the original folder, or "
            "run the set again for a set of its own")


def run_differs(held: Any, facts: JobFacts) -> str:
    """How the run the job holds under a repeat index differs from ``facts``, in words."""
    parts = [f"{name} {_text(mine)} there, {_text(theirs)} here"
             for name, mine, theirs in (
                 ("figure", held["value"], facts.value),
                 ("left out", held["left_out"], facts.left_out),
                 ("started", iso_utc(held["started_at"]), iso_utc(facts.started_at)))
             if dumps(mine) != dumps(theirs)]
    what = ", ".join(parts) or "only the file's bytes"
    return f"repeat {facts.repeat_index} is already recorded from {held['path']}: {what}"


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "none" if value is None else str(value)
