"""Folder locks whose owner's death the kernel reports, whatever the init process does.

A PID written in a file is a weak liveness test: ``kill(pid, 0)`` succeeds for a zombie (a killed
orphan stays one until PID 1 reaps it, which some inits do late) and for a reused PID. An
``flock`` is released by the kernel when the last descriptor of the holder closes, which
happens as the process exits, before it is a zombie. So "can I take the lock?" answers "is its
holder alive?" exactly, and a holder that is killed outright frees it.

The lock file is removed on release. Another process may have opened the old file just before;
after taking the lock each holder checks that its descriptor is still the file at that path, and
starts over if not, so two holders can never both believe they own it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from quantmark.ground.errors import UserError


class LockHeld(Exception):
    """Another live process holds the lock. ``owner`` is the PID it wrote, if readable."""

    def __init__(self, path: Path, owner: str) -> None:
        super().__init__(f"{path} is held by pid {owner or '?'}")
        self.path = path
        self.owner = owner


class FileLock:
    """An exclusive, non-blocking lock on ``path``; the holder's PID is written for messages."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    def acquire(self) -> FileLock:
        """Take the lock or raise LockHeld at once (never waits)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = os.pread(fd, 32, 0).decode(errors="replace").strip()
                os.close(fd)
                raise LockHeld(self.path, owner) from None
            if _same_file(fd, self.path):
                break
            os.close(fd)  # the holder before us removed the file: lock the new one
        with contextlib.suppress(OSError):  # the PID is for messages only: a full disk is no
            os.ftruncate(fd, 0)             # reason to refuse the lock
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> FileLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _same_file(fd: int, path: Path) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)


@contextlib.contextmanager
def sole_writer(folder: Path, lock_name: str, what: str) -> Iterator[FileLock]:
    """Hold ``folder``'s lock while ``what`` (a sweep, a search) writes it: two writers would
    each overwrite the other's work. A live holder is one line naming its pid."""
    try:
        lock = FileLock(folder / lock_name).acquire()
    except LockHeld as held:
        raise UserError(f"another {what} (pid {held.owner or '?'}) is writing {folder}; wait "
                        "for it or use another --output") from None
    try:
        yield lock
    finally:
        lock.release()
