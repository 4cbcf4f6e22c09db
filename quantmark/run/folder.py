"""Where one run writes, and when its logs may replace the last good run.

A run writes into ``.<name>.tmp-<pid>`` beside its final folder (``run_1`` or ``accuracy``)
while it holds ``.<name>.lock``. Only a complete run, whose LoadGen logs hold their results and
agree with each other, is swapped in; anything else goes to ``<name>.failed`` and the last good
run stays. The lock keeps two runs out of one folder, and because the kernel frees it when its
holder dies, whoever holds it knows every other temp folder there is abandoned.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from quantmark.ground.errors import SutError, UserError
from quantmark.ground.faults import environment_fault
from quantmark.ground.hashing import atomic_write_text
from quantmark.ground.locks import FileLock, LockHeld

DISK_PROBE_BYTES = 64 * 1024  # what the logs of a short run need, about


class RunFolder:
    """The temp folder, lock and promotion of one run's ``final`` folder."""

    def __init__(self, final: Path) -> None:
        self.final = final
        self.work = final.parent / f".{final.name}.tmp-{os.getpid()}"
        self.failed = final.with_name(final.name + ".failed")
        self._lock = FileLock(final.parent / f".{final.name}.lock")

    def open(self) -> RunFolder:
        """Take the folder's lock and clear what dead runs left: before the SUT is built, so a
        second run into the same folder stops at once. Anything but a folder where the run
        goes (a file named ``run_1``) is not a run: it is named, never replaced."""
        if os.path.lexists(self.final) and not self.final.is_dir():
            raise UserError(f"{self.final} is a file, not a run folder, and a run would replace "
                            "it; move it away or pass another --output")
        try:
            self._lock.acquire()
        except LockHeld as held:
            raise UserError(f"another quantmark run (pid {held.owner or '?'}) is writing "
                            f"{self.final}; wait for it to finish or pass another --output"
                            ) from None
        for pattern in (f".{self.final.name}.tmp-*", f".{self.final.name}.old-*"):
            for leftover in self.final.parent.glob(pattern):
                shutil.rmtree(leftover, ignore_errors=True)
        return self

    def start(self) -> Path:
        """Make the temp folder LoadGen writes into (it silently runs nothing without one)."""
        self.work.mkdir()
        return self.work

    def close(self) -> None:
        """Keep a run that failed after it started as ``.failed``; release the lock."""
        try:
            if self.work.is_dir():
                if any(self.work.iterdir()):
                    self.keep_failed(None)
                else:
                    self.work.rmdir()
        finally:
            self._lock.release()

    def __enter__(self) -> RunFolder:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def keep_failed(self, traceback_text: str | None) -> Path:
        """Move the temp folder (and predict's traceback) to ``<final>.failed``; the last good
        run stays untouched."""
        if traceback_text:
            atomic_write_text(self.work / "predict_error.txt", traceback_text)
        shutil.rmtree(self.failed, ignore_errors=True)
        self.work.rename(self.failed)
        return self.failed

    def check_logs(self) -> None:
        """Raise unless LoadGen's logs in the temp folder are complete and agree.

        Incomplete logs on a full disk are the disk's fault (UserError, exit 2); otherwise the
        run failed (SutError, exit 3). Either way the run is kept as ``.failed``.
        """
        from quantmark.report.loadgen_log import check_complete

        problems = check_complete(self.work)
        if not problems:
            return
        fault = _disk_fault(self.work)
        failed = self.keep_failed(None)
        what = f"LoadGen's logs are incomplete ({'; '.join(problems)})"
        if fault:
            raise UserError(f"{fault}; {what}, kept in {failed}; the earlier run is untouched")
        raise SutError(f"{what}; kept in {failed}; the earlier run is untouched")

    def promote(self) -> Path:
        """Swap the finished run in; the old one is removed only after the new one is in."""
        old = self.final.parent / f".{self.final.name}.old-{os.getpid()}"
        if self.final.exists():
            self.final.rename(old)
        self.work.rename(self.final)
        shutil.rmtree(old, ignore_errors=True)
        return self.final


def _disk_fault(folder: Path) -> str | None:
    """Why nothing more can be written in ``folder`` (disk full, size limit), or None."""
    probe = folder / ".quantmark-disk-probe"
    try:
        with open(probe, "wb") as handle:
            handle.write(b"\0" * DISK_PROBE_BYTES)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        if exc.filename is None:  # a failed write names no file: the folder is what is full
            exc.filename = str(folder.parent)
        return environment_fault(exc) or f"cannot write in {folder} ({exc.strerror})"
    finally:
        probe.unlink(missing_ok=True)
    return None
