"""One reader of a run's figure and validity: LoadGen's own logs, checked against its record.

``results.json`` copies LoadGen's summary when the run ends (``quantmark.run.record``), but it
is a file: it can be edited, copied beside another run's logs, or kept after the logs were cut
short. So every reader of a run's figure (the report, compare, the store and, through the store,
history and the dashboard) takes the figure, validity and scenario from LoadGen's logs - the
numbers of ``mlperf_log_detail.txt``, which ``mlperf_log_summary.txt`` (where it was kept) must
repeat - and names each field where the record says otherwise (``LoggedRun.mismatches``) and
what is wrong with the logs themselves (``LoggedRun.problems``: missing, cut off, the two files
disagreeing).

The record's LoadGen start (``times.loadgen_started_at``) is its fingerprint: LoadGen logs the
second its test began (``test_datetime``), so logs of another run beside a record are named
even where the two runs' figures happen to agree. A record without it (written before it was
recorded) is checked on its figures alone.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.ground.records import RESULTS, RunRecord
from quantmark.report.loadgen_log import (
    INCOMPLETE,
    PERCENTILES,
    RunSummary,
    read_logs,
    summarize,
    unreadable_summary,
)

#: the summary fields a record must share with LoadGen's logs, and how a line names each
FIELDS = {"scenario": "scenario", "mode": "mode", "validity": "validity",
          "metric_key": "official metric", "metric_value": "official metric value",
          "samples_per_second": "samples/s", "query_count": "queries",
          "min_latency_ns": "min latency (ns)", "mean_latency_ns": "mean latency (ns)",
          "max_latency_ns": "max latency (ns)", "loadgen_version": "LoadGen version"}
#: quantmark's mode -> LoadGen's
MODES = {"performance": "PerformanceOnly", "accuracy": "AccuracyOnly"}
#: how far the record's LoadGen start may be from LoadGen's own (logged to the second)
START_SLACK_S = 3.0
FIX = "restore the folder as the run left it (its results.json and logs), or run it again"


class LogMismatch(UserError):
    """A run's record disagrees with LoadGen's logs, or the logs cannot back it."""


@dataclass(frozen=True)
class LoggedRun:
    """A run as LoadGen's logs tell it, and where its record says otherwise."""

    folder: Path
    #: LoadGen's figures (validity INCOMPLETE, with why, where ``problems`` is not empty)
    summary: RunSummary
    problems: tuple[str, ...] = ()  # the logs' own: missing, cut off, summary vs detail
    mismatches: tuple[str, ...] = ()  # where the record says otherwise
    started_at: float | None = None  # LoadGen's test_datetime, epoch seconds
    parsed: bool = True  # False: the detail log is missing or does not parse at all

    @property
    def agrees(self) -> bool:
        return not self.mismatches

    def record(self, record: RunRecord) -> RunRecord:
        """``record`` with LoadGen's summary in place of its own: what every rule that reads
        a record's validity and figure (``left_out_why``, the store's) must be given."""
        return dataclasses.replace(record, summary=self.summary.to_dict())

    def disagreement(self, where: str | Path | None = None, then: str = "") -> str:
        """One line: the run, what its record says against LoadGen's logs, what the caller
        did about it (``then``) and the fix."""
        return (f"{where or self.folder}: {RESULTS} disagrees with LoadGen's logs "
                f"({'; '.join(self.mismatches)}); {then + '; ' if then else ''}{FIX}")

    def check(self, where: str | Path | None = None, then: str = "") -> LoggedRun:
        """Itself when the record agrees with the logs; else LogMismatch (one line)."""
        if self.mismatches:
            raise LogMismatch(self.disagreement(where, then))
        return self


def verify(folder: str | Path, record: RunRecord | None = None) -> LoggedRun:
    """The run in ``folder`` as LoadGen's logs tell it; with ``record`` (its results.json),
    every field where the record says otherwise."""
    folder = Path(folder)
    detail, problems = read_logs(folder, need_summary=False)
    if detail is None:
        summary = unreadable_summary("; ".join(problems))
    else:
        summary = summarize(detail)
        if problems:
            summary = dataclasses.replace(summary, validity=INCOMPLETE,
                                          incomplete="; ".join(problems))
    started = _logged_start(detail)
    mismatches = _mismatches(record, summary, problems, started) if record else []
    return LoggedRun(folder, summary, tuple(problems), tuple(mismatches), started,
                     parsed=detail is not None)


def _logged_start(detail: dict[str, Any] | None) -> float | None:
    """LoadGen's ``test_datetime`` (UTC, to the second) as epoch seconds; None if absent."""
    value = (detail or {}).get("test_datetime")
    try:
        when = datetime.strptime(str(value), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return None
    return when.replace(tzinfo=timezone.utc).timestamp()


def _mismatches(record: RunRecord, logged: RunSummary, problems: list[str],
                started: float | None) -> list[str]:
    """Each field where ``record`` says other than LoadGen's logs, as a short phrase."""
    said = record.summary
    if problems:  # the logs cannot back a figure: only a record that says so agrees
        if said.get("validity") == INCOMPLETE:
            return []
        return [f"it says {said.get('validity') or 'nothing of validity'}, but LoadGen's logs "
                f"are not whole: {'; '.join(problems)}"]
    found = []
    theirs = logged.to_dict()
    for key, label in FIELDS.items():
        if key in said and not _same(said[key], theirs[key]):
            found.append(_phrase(label, said[key], theirs[key]))
    mine = said.get("percentiles_ns")
    if isinstance(mine, dict):
        for p in PERCENTILES:
            if p in mine and not _same(mine[p], logged.percentiles_ns.get(p)):
                found.append(_phrase(f"p{p.rstrip('0').rstrip('.')} latency (ns)", mine[p],
                                     logged.percentiles_ns.get(p)))
    return found + _config_mismatches(record, logged) + _start_mismatch(record, started)


def _config_mismatches(record: RunRecord, logged: RunSummary) -> list[str]:
    """The test the record's configuration asked for against the one LoadGen ran."""
    config, found = record.config, []
    scenario = config.get("scenario")
    if scenario and logged.scenario and scenario != logged.scenario:
        found.append(f"its config asks for {scenario}, LoadGen ran {logged.scenario}")
    mode = MODES.get(str(config.get("mode")))
    if mode and logged.mode and not config.get("audit") and mode != logged.mode:
        found.append(f"its config asks for {config.get('mode')} mode, LoadGen ran "
                     f"{logged.mode}")
    return found


def _start_mismatch(record: RunRecord, started: float | None) -> list[str]:
    """The record's LoadGen start against LoadGen's: logs of another run beside it."""
    mine = record.times.get("loadgen_started_at")
    if started is None or not isinstance(mine, int | float) or isinstance(mine, bool):
        return []
    if -START_SLACK_S <= mine - started <= START_SLACK_S:
        return []
    return [f"its run started {_utc(mine)}, LoadGen's test {_utc(started)} (the logs of "
            "another run)"]


def _utc(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _same(mine: Any, theirs: Any) -> bool:
    """Equal, numbers to a part in a million (both are LoadGen's numbers, via JSON)."""
    numbers = (int, float)
    if isinstance(mine, numbers) and isinstance(theirs, numbers) \
            and not isinstance(mine, bool) and not isinstance(theirs, bool):
        return math.isclose(float(mine), float(theirs), rel_tol=1e-6, abs_tol=1e-9)
    return mine == theirs


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.7g}"
    return "nothing" if value is None else str(value)


def _phrase(label: str, mine: Any, theirs: Any) -> str:
    return f"{label} {_text(mine)}, LoadGen's {_text(theirs)}"
