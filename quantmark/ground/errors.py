"""Errors meant for the user: run.py prints them as one line and exits 2, never a traceback."""

from __future__ import annotations


class UserError(Exception):
    """Bad input the user can fix. The message names the problem and the fix, on one line."""


class SutError(RuntimeError):
    """A SUT failed while running (load, predict). Reported with the SUT's name; never hides."""
