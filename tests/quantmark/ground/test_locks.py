"""Folder locks: held means a live holder, whatever the init process does with the dead."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from quantmark.ground.locks import FileLock, LockHeld

PR_SET_CHILD_SUBREAPER = 36


def _holder(path: Path) -> subprocess.Popen:
    """A process that takes the lock, says so, and sleeps."""
    code = ("import sys, time\nfrom quantmark.ground.locks import FileLock\n"
            f"FileLock({str(path)!r}).acquire()\nprint('held', flush=True)\ntime.sleep(600)\n")
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_live_holder_keeps_the_lock_and_is_named(tmp_path):
    path = tmp_path / ".lock"
    holder = _holder(path)
    try:
        with pytest.raises(LockHeld) as raised:
            FileLock(path).acquire()
        assert raised.value.owner == str(holder.pid)
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_holder_frees_the_lock_while_still_a_zombie(tmp_path):
    """The old liveness test, kill(pid, 0), says a zombie is alive; the lock knows better."""
    path = tmp_path / ".lock"
    holder = _holder(path)
    holder.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _state(holder.pid) != "Z":  # dead, not reaped: we have not waited for it
        assert time.monotonic() < deadline, "the killed holder never became a zombie"
        time.sleep(0.01)
    os.kill(holder.pid, 0)  # what pid_alive asked: a zombie still answers
    with FileLock(path):
        assert path.read_text() == str(os.getpid())
    assert not path.exists()  # released and removed
    holder.wait()


def test_an_orphan_killed_and_never_reaped_frees_the_lock(tmp_path):
    """The grandchild case: its parent is killed too, and nobody reaps it until we choose to
    (we act as the subreaper an init would be, and reap late)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        pytest.fail(f"prctl(PR_SET_CHILD_SUBREAPER) failed: errno {ctypes.get_errno()}")
    try:
        path = tmp_path / ".lock"
        code = ("import subprocess, sys, time\n"
                f"child = subprocess.Popen([sys.executable, '-c', {_grandchild(path)!r}], "
                "stdout=subprocess.PIPE, text=True)\n"
                "print(child.stdout.readline().strip(), child.pid, flush=True)\n"
                "time.sleep(600)\n")
        parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                  text=True, start_new_session=True,
                                  env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
        said, pid = parent.stdout.readline().split()
        assert said == "held"
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while _state(int(pid)) != "Z":
            assert time.monotonic() < deadline, "the orphan never became a zombie"
            time.sleep(0.01)
        with FileLock(path):
            pass
        os.waitpid(int(pid), 0)
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def test_a_holder_whose_file_was_replaced_starts_over(tmp_path):
    """A process that opened the file just before its holder removed it must not think it
    holds the new one: it locks the file now at the path."""
    path = tmp_path / "sub" / ".lock"
    first = FileLock(path).acquire()
    stale = os.open(path, os.O_RDWR)  # what a racing process opened before the release
    first.release()
    with FileLock(path):
        assert path.exists()
        with pytest.raises(LockHeld):
            FileLock(path).acquire()
    os.close(stale)


def _grandchild(path: Path) -> str:
    return ("import time\nfrom quantmark.ground.locks import FileLock\n"
            f"FileLock({str(path)!r}).acquire()\nprint('held', flush=True)\ntime.sleep(600)\n")


def _state(pid: int) -> str:
    """The process state letter from /proc (R, S, Z ...), or '' once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return ""
    return stat.rsplit(")", 1)[1].split()[0]


def test_a_second_writer_of_a_folder_is_one_line_naming_the_holder(tmp_path) -> None:
    from quantmark.ground.errors import UserError
    from quantmark.ground.locks import sole_writer

    with sole_writer(tmp_path, ".sweep.lock", "sweep"):
        with pytest.raises(UserError, match=rf"another sweep \(pid {os.getpid()}\) is writing"):
            with sole_writer(tmp_path, ".sweep.lock", "sweep"):
                pass
    with sole_writer(tmp_path, ".sweep.lock", "sweep"):  # released: free again
        pass
