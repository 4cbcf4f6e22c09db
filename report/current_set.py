"""Which performance runs belong together: the current repeat set of a performance folder.

``run.py --repeats N`` (and the default job) write repeat k of a test to ``performance/run_k``,
each run in a fresh process, and stamp every run's results.json with the set it belongs to
(``repeat.set``). A later set with fewer repeats, or one that was interrupted, can leave runs of
an older set beside it; only the newest set's runs are one measurement.
"""

from __future__ import annotations

import logging
from pathlib import Path

from quantmark.ground.records import RESULTS, RunRecord, UnreadableRecord, load_run

log = logging.getLogger(__name__)


def read_results(run: Path) -> RunRecord | None:
    """A run folder's record; None when it has none, or one that cannot be read (said once in
    the log). A record of a newer quantmark is refused (UserError), never skipped."""
    path = run / RESULTS
    if not path.is_file():
        return None
    try:
        return load_run(path)
    except UnreadableRecord as exc:
        log.warning("left out: %s", exc)
        return None


def repeat_of(results: RunRecord | None) -> tuple[str, int]:
    """(set id, index) of a run; runs written before repeat sets existed are a set of one."""
    repeat = (results.repeat if results else None) or {}
    return str(repeat.get("set") or ""), int(repeat.get("index") or 1)


def ended_at(results: RunRecord | None) -> float:
    return float((results.times if results else {}).get("loadgen_ended_at") or 0.0)


def current_set(runs: list[Path]) -> list[Path]:
    """The runs of one performance folder that belong to its newest repeat set, by index.

    The newest set is the one whose last run ended last. Runs with no set id (older quantmark)
    count as their own set each, so a lone old ``run_1`` stays what it was.
    """
    if not runs:
        return []
    records = {run: read_results(run) for run in runs}
    newest = max(runs, key=lambda run: ended_at(records[run]))
    set_id, _ = repeat_of(records[newest])
    if not set_id:
        return [newest]
    mine = [run for run in runs if repeat_of(records[run])[0] == set_id]
    return sorted(mine, key=lambda run: repeat_of(records[run])[1])
