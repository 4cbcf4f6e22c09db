"""tests/conftest.py's guarantees, on small suites run in a child pytest.

No test run hangs: a blocked test fails at its limit (pytest-timeout, configured in
pyproject.toml), and one stuck in C code holding the GIL, where no Python-level timeout can
fire, ends the run through the watchdog with every thread's stack. And no test depends on the
cache another test exported."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

HANGS = '''
import ctypes
import threading

import pytest


@pytest.mark.timeout(2)
def test_blocked_in_python():
    threading.Event().wait()


@pytest.mark.timeout(2)
def test_stuck_in_c_holding_the_gil():
    """OpenVINO's deadlock in miniature: a native thread that must run a Python callback,
    joined by a caller that holds the GIL (a PyDLL call keeps it)."""
    callback = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(lambda _: None)
    libc = ctypes.PyDLL(None)
    thread = ctypes.c_ulong()
    assert libc.pthread_create(ctypes.byref(thread), None, callback, None) == 0
    libc.pthread_join(thread, None)
'''


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """This project's settings and conftest hooks, on a test file outside the suite."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-c",
               str(ROOT / "pyproject.toml"), "--rootdir", str(folder), "-p", "no:cacheprovider",
               "-n", "0", *args]
    env = {"PYTHONPATH": str(ROOT), "QUANTMARK_TEST_WATCHDOG_GRACE_S": "3",
           "PATH": "/usr/bin:/bin"}
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=folder,
                          env=env)


def test_a_blocked_test_fails_at_its_timeout_and_the_run_goes_on(tmp_path: Path) -> None:
    pytest.importorskip("pytest_timeout")
    (tmp_path / "test_hangs.py").write_text(HANGS)
    proc = _pytest(tmp_path, "test_hangs.py::test_blocked_in_python")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Timeout (>2.0s)" in proc.stdout + proc.stderr
    assert "1 failed" in proc.stdout


def test_a_test_stuck_holding_the_gil_ends_the_run_with_stacks(tmp_path: Path) -> None:
    pytest.importorskip("pytest_timeout")
    (tmp_path / "test_hangs.py").write_text(HANGS)
    started = time.monotonic()
    proc = _pytest(tmp_path, "test_hangs.py::test_stuck_in_c_holding_the_gil")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert time.monotonic() - started < 100  # the watchdog, not the subprocess timeout
    assert "Timeout (0:00:05)!" in proc.stderr
    assert "test_stuck_in_c_holding_the_gil" in proc.stderr  # the stack names the test


#: a folder with its own session cache, as tests/sut and tests/models have
FOLDER_CONFTEST = '''
import pytest


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("folder-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("QUANTMARK_CACHE", str(root))
        yield root
'''
#: a module of that folder: a module fixture and its tests must see the folder's cache
OWN = '''
import os

import pytest


@pytest.fixture(scope="module")
def built():
    return os.environ["QUANTMARK_CACHE"]


def test_1_shared_fixture_asked_for(quantmark_cache, private_cache):
    assert os.environ["QUANTMARK_CACHE"] == str(private_cache)


def test_2_folder_cache(built, private_cache):
    assert built == os.environ["QUANTMARK_CACHE"] == str(private_cache)
'''
#: a module elsewhere, on the shared cache
SHARED = '''
import os


def test_shared(quantmark_cache):
    assert os.environ["QUANTMARK_CACHE"] == str(quantmark_cache)
'''


def test_each_module_sees_its_folders_cache_whatever_ran_before(tmp_path: Path) -> None:
    """tensorrt's calibration-cache test once failed when run after a test that asked for the
    shared cache: that fixture exported it for the rest of the run, mid-module too."""
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "conftest.py").write_text(FOLDER_CONFTEST)
    (tmp_path / "own" / "test_a.py").write_text(OWN)
    (tmp_path / "own" / "test_c.py").write_text(OWN)
    (tmp_path / "test_b.py").write_text(SHARED)
    proc = _pytest(tmp_path, "-p", "no:randomly", "own/test_a.py", "test_b.py", "own/test_c.py")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "5 passed" in proc.stdout
