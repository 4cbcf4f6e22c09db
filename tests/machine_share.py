"""Two test workers on one machine (pytest-xdist), and the tests that must have it alone.

Both tiers run in two workers (pyproject's addopts: ``-n 2 --dist loadfile``): most tests
wait on a child process, a file or one core, so one test at a time leaves half of the 2-core
machine idle (the quick tier used 1.09 cores on average, one test at a time).

Tests that measure the machine cannot share it: a run that must come out quiet, TEST01's 10%
band between two runs. They are marked ``alone``: such a test takes the machine exclusively
and every other test takes it shared, so an ``alone`` test waits for the tests running beside
it to end, and none starts beside it. The lock is a pair of ``flock``s: a gate taken first, so
that a waiting ``alone`` test is not starved by the other worker's stream of shared takers;
the kernel releases both if a worker dies. Only a real xdist worker takes them (a pytest that
a test starts in a child process inherits the worker's environment, not its role).

A test file runs whole on one worker (``--dist loadfile``: its module fixtures are built once).
A session fixture is built once per worker; the costly ones that are CLI runs (``run.py
--all-tests``, a small sweep) go through ``shared_run``: built once per test run, the other
worker reading the same result.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ALONE = "alone"
#: session fixtures that measure the machine as they are built (TEST01's band): the tests
#: using them run alone
ALONE_FIXTURES = ("quick_all_tests",)
_RUN_FOLDERS = pytest.StashKey[set[str]]()


def runs_alone(item: pytest.Item) -> bool:
    """Marked ``alone``, or using a fixture in ``ALONE_FIXTURES``."""
    return (item.get_closest_marker(ALONE) is not None
            or any(name in item.fixturenames for name in ALONE_FIXTURES))


def _folder_of_run(testrunuid: str) -> Path:
    return Path(tempfile.gettempdir()) / f"quantmark-tests-{testrunuid}"


def lock_folder(config: pytest.Config) -> Path | None:
    """The test run's lock folder, shared by its workers; None outside an xdist worker."""
    worker = getattr(config, "workerinput", None)
    if not worker:
        return None
    folder = _folder_of_run(worker["testrunuid"])
    folder.mkdir(exist_ok=True)
    return folder


def note_worker(config: pytest.Config, testrunuid: str) -> None:
    """On the xdist controller: remember the run's lock folder, to remove it at the end."""
    config.stash[_RUN_FOLDERS] = {*config.stash.get(_RUN_FOLDERS, set()), testrunuid}


def remove_lock_folders(config: pytest.Config) -> None:
    """On the xdist controller, once its workers are gone: the run's lock folder goes too
    (each run left one behind in the temp folder before)."""
    for testrunuid in config.stash.get(_RUN_FOLDERS, set()):
        shutil.rmtree(_folder_of_run(testrunuid), ignore_errors=True)


@contextlib.contextmanager
def _flock(folder: Path, name: str, mode: int) -> Iterator[int]:
    """``flock(mode)`` on the file ``name`` in ``folder``, held until the block ends (the
    descriptor's close releases it, also when the worker dies)."""
    fd = os.open(folder / name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, mode)
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def machine_share(config: pytest.Config, alone: bool) -> Iterator[None]:
    """Holds the machine exclusively (``alone``) or shared for one test's protocol."""
    folder = lock_folder(config)
    if folder is None:
        yield
        return
    mode = fcntl.LOCK_EX if alone else fcntl.LOCK_SH
    with _flock(folder, "gate", mode) as gate, _flock(folder, "machine", mode):
        fcntl.flock(gate, fcntl.LOCK_UN)
        yield


@contextlib.contextmanager
def _held(config: pytest.Config, name: str) -> Iterator[None]:
    """An exclusive lock named ``name`` across this run's workers (none outside xdist)."""
    folder = lock_folder(config)
    if folder is None:
        yield
        return
    with _flock(folder, f"{name}.lock", fcntl.LOCK_EX):
        yield


def shared_folder(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory, name: str,
                  fill: Callable[[Path], None]) -> Path:
    """A folder ``fill`` wrote once per test run, whichever worker asked first (a session
    fixture is built once per worker; this one is built once for both)."""
    if lock_folder(config) is None:
        out = tmp_path_factory.mktemp(name)
        fill(out)
        return out
    out = tmp_path_factory.getbasetemp().parent / f"shared-{name}"
    done = out.parent / f"shared-{name}.done"
    with _held(config, name):
        if not done.exists():
            out.mkdir(exist_ok=True)
            fill(out)
            done.touch()
    return out


def shared_run(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory, name: str,
               make: Callable[[Path], subprocess.CompletedProcess]
               ) -> tuple[subprocess.CompletedProcess, Path]:
    """``make(out)``, a CLI run writing into ``out``, once per test run (``shared_folder``):
    both workers get its process result and folder."""
    def fill(out: Path) -> None:
        proc = make(out)
        fields = {"args": [str(arg) for arg in proc.args], "returncode": proc.returncode,
                  "stdout": proc.stdout, "stderr": proc.stderr}
        (out.parent / f"{out.name}.proc.json").write_text(json.dumps(fields))

    out = shared_folder(config, tmp_path_factory, name, fill)
    saved = json.loads((out.parent / f"{out.name}.proc.json").read_text())
    return subprocess.CompletedProcess(**saved), out
