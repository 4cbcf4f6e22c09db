"""The results store (issue 33): every job's figures, intervals, validity and environment over
time, in SQLite or PostgreSQL. ``open_store`` and ``Store`` live in ``results_store`` (a
module named ``store`` would share the package's name) and are importable from here."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """``quantmark.store.open_store`` / ``Store`` without importing SQLAlchemy for a reader
    of ``quantmark.store.points`` alone."""
    if name in ("open_store", "Store"):
        from quantmark.store import results_store

        return getattr(results_store, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
