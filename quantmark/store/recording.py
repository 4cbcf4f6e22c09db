"""``record(path)``: what a job calls once its result is promoted, to put it in the store.

A store that cannot be written (a server down, a full disk, a newer schema) must never lose or
fail the run, whose folder is already on disk: it costs one warning line naming the store and
the fix, and ``run.py store import`` records the folder later. A folder the store refuses (its
results.json disagrees with LoadGen's logs, or it is a changed copy of a stored set) costs one
warning line naming what differs; nothing of it is recorded. ``$QUANTMARK_STORE=off``
records nothing. The store stays open for the process (a sweep records cell after cell).
SQLAlchemy is imported on the first record, not when a caller imports this module: every
``run.py`` start imports the verbs that call it.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from quantmark.store.store_settings import STORE_VARIABLE, store_off

log = logging.getLogger(__name__)

_open: dict[str, Any] = {}  # URL -> Store


def record(path: str | Path | None) -> int:
    """Record the run folder, repeat set folder, sweep or record file ``path`` into the store
    (``$QUANTMARK_STORE``, else the default); the jobs added. Never raises for the store;
    None (a job that left no folder) records nothing."""
    if path is None or store_off():
        return 0
    place = "?"
    try:
        from quantmark.store.results_store import Store, store_url, where

        url = store_url()
        place = where(url)
        key = url.render_as_string(hide_password=False)
        if key not in _open:
            _open[key] = Store(url)
        added = _open[key].record(path)
        log.debug("results store %s: %d job(s) added from %s", place, added, path)
        return added
    except Exception as exc:  # noqa: BLE001 - the store never fails the run it records
        if _refused(exc):  # the store is fine: the folder is not what LoadGen measured
            log.warning("results store %s: %s", place, exc)
            return 0
        _close_all()
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        log.warning("results store %s: %s not recorded (%s); fix the store or set "
                    "%s to another one (or off), then run.py store import %s", place, path,
                    reason, STORE_VARIABLE, path)
        return 0


def _refused(exc: Exception) -> bool:
    """The store refused the folder, in one line naming what differs (its results.json
    disagrees with LoadGen's logs, or it is a changed copy of a stored set)."""
    from quantmark.report.logged_run import LogMismatch

    conflicts = sys.modules.get("quantmark.store.job_conflicts")  # loaded with the store
    return isinstance(exc, LogMismatch) or (
        conflicts is not None and isinstance(exc, conflicts.StoreConflict))


def _close_all() -> None:
    """Forget the open stores: the next record opens afresh (a server back up)."""
    for store in _open.values():
        store.close()
    _open.clear()
