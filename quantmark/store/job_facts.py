"""What one record file becomes in the store: which job it belongs to, its figure, its facts.

A job's figure is its scenario's objective, read from the run's LoadGen summary the way
``quantmark.recommend.measure`` reads it: SingleStream and MultiStream the percentile latency
in ms (``LATENCY_PERCENTILE``, the percentile those scenarios are judged by), Offline and
Server samples per second. A run a figure may not use (INVALID, logs LoadGen did not finish,
no official metric: ``left_out``, the rule of ``quantmark.run.validity.left_out_why``, read
here from the record's fields because the store sits below ``quantmark.run``) keeps its own
figure but is counted apart.

A run's figure, validity and scenario are LoadGen's, read from the logs beside its record by
``quantmark.report.logged_run``: a record that says otherwise (edited, beside another run's logs,
its logs cut short or missing) is refused in one line (``LogMismatch``), never recorded.

Runs of one repeat set (``repeat.set``, ``repeat.of`` > 1) are one job: ``set:<id>``; any
other record is its own job, keyed by its sha256. A run below a sweep's ``sweep.json`` that
lists it is a sweep cell.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from quantmark.ground.fingerprint import system_name
from quantmark.ground.metric import Metric
from quantmark.ground.records import (
    SWEEP_MANIFEST,
    DiagnosisRecord,
    ProfileRecord,
    RecommendationRecord,
    Record,
    RunRecord,
    UnreadableRecord,
    load_manifest,
    load_record,
)
from quantmark.report.logged_run import verify
from quantmark.store.environment_facts import record_facts
from quantmark.store.points import SeriesKey

log = logging.getLogger(__name__)

#: the latency percentile each latency-bound scenario is judged by (recommend's too)
LATENCY_PERCENTILE = {"SingleStream": "90.00", "MultiStream": "99.00"}
LATENCY, RATE = "latency_ms", "samples_per_s"
VALID = "VALID"
#: how far above a run folder a sweep's manifest may be
#: (SWEEP/runs/<model>/<sut>/<cell>/<system>/<model>/<scenario>/performance/run_1)
SWEEP_DEPTH = 10
#: record kinds that are not jobs: a run's interference (part of its run), a sweep's manifest
#: (its cells are the jobs), a train-bench configuration (not an inference figure)
NOT_JOBS = ("interference", "sweep-manifest", "train-bench")


@dataclass
class JobFacts:
    """One record file, read for the store."""

    kind: str  # run | repeat-set | sweep-cell | accuracy | audit | diagnosis | profile | ...
    job_key: str  # the job it belongs to: its own sha256, or "set:<id>" for a repeat set
    sha256: str  # of the file's bytes: recording the same file twice adds nothing
    path: str
    folder: str  # the job's folder (a repeat set's: the one that holds run_1 ... run_N)
    started_at: float
    version: str
    machine: str
    detail: dict[str, Any] = field(default_factory=dict)
    series: SeriesKey | None = None  # None: the job has no performance figure
    value: float | None = None
    left_out: str | None = None
    disturbed: bool = False
    repeat_index: int | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    #: its run's figures were checked against LoadGen's logs (what was there to check)
    checked: bool = True


def file_sha256(path: Path) -> str:
    """The record file's identity: sha256 of its bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_job(path: Path, cell: str | None = None) -> JobFacts | None:
    """The job facts of record file ``path`` (``cell``: its sweep cell id, when the caller
    knows it; else it is looked up); None for a kind that is not a job. An unreadable file is
    an UnreadableRecord, a newer schema a UserError (``load_record``)."""
    sha256 = file_sha256(path)
    record = load_record(path)
    if record.kind in NOT_JOBS:
        return None
    facts = JobFacts(kind=record.kind, job_key=sha256, sha256=sha256, path=str(path),
                     folder=str(path.parent), started_at=_started_at(record, path),
                     version=str((getattr(record, "software", {}) or {}).get("quantmark")
                                 or record.extra.get("quantmark_version") or ""),
                     machine=system_name(getattr(record, "machine", {}) or {}),
                     environment=record_facts(record))
    if isinstance(record, RunRecord):  # LoadGen's summary from its logs in place of its own
        logged = verify(path.parent, record).check(path.parent, "not recorded")
        _add_run(facts, logged.record(record),
                 cell if cell is not None else sweep_cell_of(path.parent))
    else:
        facts.detail = _detail(record)
    return facts


def _started_at(record: Record, path: Path) -> float:
    """When the job ran: LoadGen's start, else the record's own start, else the file's time."""
    times = getattr(record, "times", {}) or {}
    for key in ("loadgen_started_at", "started_at"):
        if isinstance(times.get(key), int | float):
            return float(times[key])
    return os.stat(path).st_mtime


def _add_run(facts: JobFacts, record: RunRecord, cell: str | None) -> None:
    """A run's kind, job, figure and validity."""
    config, summary = record.config, record.summary
    repeat = record.repeat or {}
    facts.disturbed = bool((record.interference or {}).get("disturbed"))
    facts.repeat_index = record.repeat_index
    if config.get("mode") == "accuracy":
        facts.kind = "accuracy"
        facts.detail = accuracy_detail(record)
        return
    if config.get("audit"):
        facts.kind = "audit"
        facts.detail = {"test": config["audit"], "validity": record.validity}
        return
    if cell is not None:
        facts.kind, facts.detail = "sweep-cell", {"cell": cell}
    elif repeat.get("set") and isinstance(repeat.get("of"), int) and repeat["of"] > 1:
        facts.kind, facts.job_key = "repeat-set", f"set:{repeat['set']}"
        facts.folder = str(Path(facts.folder).parent)
        facts.detail = {"of": repeat["of"]}
    scenario = str(config.get("scenario") or summary.get("scenario") or "")
    model = str(config.get("model") or record.model.get("name") or "")
    sut = str(config.get("sut") or record.sut.get("name") or "")
    if scenario and model and sut:
        metric = LATENCY if scenario in LATENCY_PERCENTILE else RATE
        facts.series = SeriesKey(model, sut, scenario, metric)
        facts.value = objective(summary, scenario)
    facts.left_out = left_out(record)


def accuracy_detail(record: RunRecord) -> dict[str, Any]:
    """An accuracy run's figure under its task's metric key, as its record names it. A record
    of before tasks keeps the one field it always had (``top1``); one naming its task adds the
    metric (key, name, unit, direction), the model, SUT and scenario, so history shows it by
    name and never puts a detector's mAP beside a classifier's top-1."""
    task = record.task if isinstance(record.task, dict) else None
    metric = Metric.from_record(task.get("metric") if task else None)
    detail: dict[str, Any] = {metric.key: (record.accuracy or {}).get(metric.key)}
    if task:
        config = record.config
        detail.update(metric=metric.to_record(), task=str(task.get("name") or ""),
                      model=str(config.get("model") or record.model.get("name") or ""),
                      sut=str(config.get("sut") or record.sut.get("name") or ""),
                      scenario=str(config.get("scenario") or ""))
    return detail


def objective(summary: dict[str, Any], scenario: str) -> float | None:
    """The scenario's objective from a LoadGen summary: the judged percentile latency in ms,
    or samples per second; None where the summary lacks it."""
    percentile = LATENCY_PERCENTILE.get(scenario)
    if percentile is not None:
        latency_ns = (summary.get("percentiles_ns") or {}).get(percentile)
        return None if latency_ns is None else float(latency_ns) / 1e6
    rate = summary.get("samples_per_second")
    return None if rate is None else float(rate)


def left_out(record: RunRecord) -> str | None:
    """Why a figure may not use this run (``left_out_why``'s rule, in short), None if it may."""
    summary = record.summary
    if summary.get("incomplete"):
        return f"incomplete: {summary['incomplete']}"
    if summary.get("validity") != VALID:
        return str(summary.get("validity") or "no validity recorded")
    if not summary.get("metric_value"):
        return "no official metric"
    return None


def _detail(record: Record) -> dict[str, Any]:
    """What a job of a kind without a figure is about, for history's and the dashboard's
    rows."""
    if isinstance(record, DiagnosisRecord):
        return {"model": record.model, "sut": record.sut, "against": record.against,
                "first_jump": record.first_jump}
    if isinstance(record, ProfileRecord):
        return {"model": record.model, "sut": record.sut, "against": record.against}
    if isinstance(record, RecommendationRecord):
        return {"model": record.model, "scenario": record.scenario, "verdict": record.verdict,
                "recommended": (record.recommended or {}).get("key")}
    return {}


def sweep_cell_of(run_folder: Path) -> str | None:
    """The id of the sweep cell whose run folder this is, when a ``sweep.json`` above it (up to
    SWEEP_DEPTH folders) lists it; None for a run of no sweep."""
    here = run_folder.resolve()
    for root in list(here.parents)[:SWEEP_DEPTH]:
        if (root / SWEEP_MANIFEST).is_file():
            return _cells_by_folder(root, (root / SWEEP_MANIFEST).stat().st_mtime_ns).get(
                str(here.relative_to(root)))
    return None


@lru_cache(maxsize=8)
def _cells_by_folder(root: Path, _mtime_ns: int) -> dict[str, str]:
    """A sweep's cells by run folder (relative to the sweep); read once per manifest version."""
    try:
        manifest = load_manifest(root)
    except UnreadableRecord as exc:
        log.warning("%s; its runs are recorded as plain runs", exc)
        return {}
    cells = manifest.cells if manifest else {}
    return {str(Path(entry["run_dir"])): cell_id for cell_id, entry in cells.items()
            if isinstance(entry, dict) and entry.get("run_dir")}


def dumps(value: Any) -> str:
    """JSON text for the store's JSON columns (stable: sorted keys)."""
    return json.dumps(value, sort_keys=True, default=str)
