"""Errors meant for the user: run.py prints them as one line and exits with their code, never a
traceback; the Python API (``quantmark.run`` ...) raises them as they are."""

from __future__ import annotations


class QuantmarkError(Exception):
    """What quantmark reports to its user: a one-line message and the exit code ``run.py``
    gives it. The API raises its subclasses; catching this catches every one."""

    exit_code = 1


class UserError(QuantmarkError):
    """Bad input the user can fix. The message names the problem and the fix, on one line."""

    exit_code = 2


class SutError(QuantmarkError, RuntimeError):
    """A SUT failed while running (load, predict). Reported with the SUT's name; never hides."""

    exit_code = 3
