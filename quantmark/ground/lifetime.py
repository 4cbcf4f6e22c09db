"""A test process never outlives the process that launched it.

When a sweep's driver, or a fleet node's Ray worker, is killed (Ctrl-C twice, a node lost,
``kill -9``), its child would otherwise go on measuring with nobody to read the result, and
disturb every later run on the machine. Linux delivers a signal to a child whose parent dies
(``PR_SET_PDEATHSIG``); elsewhere this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys

PARENT_ENV = "QUANTMARK_PARENT_PID"
PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel to kill this process when its parent exits. The launcher names itself in
    ``QUANTMARK_PARENT_PID``; a parent already gone by now (the race the kernel cannot see)
    ends this process at once."""
    expected = os.environ.get(PARENT_ENV)
    if not sys.platform.startswith("linux") or not expected:
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no libc to ask (a static or odd runtime): go on
        return
    if str(os.getppid()) != expected:
        os._exit(1)
