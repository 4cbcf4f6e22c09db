"""Run ONE LoadGen test in a fresh process.

LoadGen reads mlperf.conf only on the first ``FromConfig`` call of a process, so every test
(performance, accuracy, audit, sweep cell) gets its own interpreter. The child writes a small
status file; the parent turns it into a result or a one-line error. Used by run.py, and later by
audit and sweep alike.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from quantmark.ground.config import RunConfig
from quantmark.ground.errors import SutError, UserError
from quantmark.ground.lifetime import PARENT_ENV
from quantmark.run.interference import Monitor, attach
from quantmark.run.rerun import rerun_config

log = logging.getLogger(__name__)


@dataclass
class LaunchResult:
    """What the child reported: where its logs are and what it measured."""

    status: str  # "ok" | "failed" | "user_error" | "crashed" | "timeout"
    run_dir: str | None
    results: dict[str, Any]
    message: str = ""
    peak_rss_mb: float | None = None  # the test process's peak resident memory (wait4)


def child_env() -> dict[str, str]:
    """The child's environment: the parent's, output unbuffered. quantmark's parts are all
    ``quantmark.<part>``, so the child's working directory (``-m`` puts it first on sys.path)
    cannot shadow them with a folder of its own."""
    return {**os.environ, "PYTHONUNBUFFERED": os.environ.get("PYTHONUNBUFFERED", "1"),
            PARENT_ENV: str(os.getpid())}  # the child dies with us (ground.lifetime)


def absolute_paths(config: RunConfig) -> RunConfig:
    """The same config with every path absolute, for a child in another working directory."""
    changes = {name: str(Path(value).expanduser().resolve())
               for name in ("output", "model_path", "dataset_path", "calibration_list",
                            "user_conf")
               if (value := getattr(config, name))}
    return replace(config, **changes)


def launch(config: RunConfig, *, cwd: str | None = None, timeout_s: float | None = None,
           quiet: bool = False, log_path: str | Path | None = None) -> LaunchResult:
    """Run ``config`` in a child process and wait for it.

    ``quiet`` discards the child's output; ``log_path`` keeps it (stdout and stderr) in a file.
    The child's peak RSS comes from the kernel's accounting of that one process (``wait4``).
    A finished run's results get ``interference``: what other processes took from the machine
    during LoadGen's window (quantmark.run.interference), which the parent writes as the run
    folder's interference.json, the file its results.json names (results.json is the child's).
    A quick run that came out INVALID because the machine ran faster than its warm-up is run
    once more, sized by the rate it met (``quantmark.run.rerun``); the rerun's result is returned.
    """
    result = _launch_once(config, cwd, timeout_s, quiet, log_path, append=False)
    again = rerun_config(config, result.status, result.results)
    if again is None:
        return result
    log.info("%s %s: %s", config.sut, config.scenario, again.rerun["why"])
    return _launch_once(again, cwd, timeout_s, quiet, log_path, append=True)


def _launch_once(config: RunConfig, cwd: str | None, timeout_s: float | None, quiet: bool,
                 log_path: str | Path | None, append: bool) -> LaunchResult:
    """One child process, one test (see ``launch``); ``append`` adds to ``log_path``."""
    with tempfile.TemporaryDirectory(prefix="quantmark-launch-") as tmp:
        config_path = Path(tmp) / "config.json"
        status_path = Path(tmp) / "status.json"
        if config.audit or cwd is not None:
            config = absolute_paths(config)
        if config.audit:  # LoadGen reads audit.config from the test's working directory
            from quantmark.audit.configs import audit_config_path

            cwd = str(Path(tmp) / config.audit)
            Path(cwd).mkdir()
            shutil.copyfile(audit_config_path(config.audit), Path(cwd) / "audit.config")
        config_path.write_text(config.to_json())
        command = [sys.executable, "-m", "quantmark.run.test_process", str(config_path),
                   str(status_path)]
        with contextlib.ExitStack() as stack:
            output: Any = subprocess.DEVNULL if quiet else None
            if log_path is not None:
                Path(log_path).parent.mkdir(parents=True, exist_ok=True)
                output = stack.enter_context(open(log_path, "ab" if append else "wb"))
            # watches the machine from here, before the child exists until it is reaped
            monitor = stack.enter_context(Monitor())
            process = subprocess.Popen(command, cwd=cwd, env=child_env(), stdout=output,
                                       stderr=subprocess.STDOUT if log_path else None)
            monitor.watch(process.pid)
            returncode, peak_rss_mb = _wait(process, timeout_s)
        if returncode is None:
            return LaunchResult("timeout", None, {},
                                f"test did not finish within {timeout_s:.0f} s", peak_rss_mb)
        if status_path.is_file():
            status = json.loads(status_path.read_text())
            result = LaunchResult(status["status"], status.get("run_dir"),
                                  status.get("results", {}), status.get("message", ""),
                                  peak_rss_mb)
            if result.status == "ok" and result.run_dir:  # was the machine quiet meanwhile?
                attach(monitor, result.run_dir, result.results)
            return result
        return LaunchResult("crashed", None, {},
                            f"test process exited with code {returncode} and no status",
                            peak_rss_mb)


def _wait(process: subprocess.Popen, timeout_s: float | None) -> tuple[int | None, float | None]:
    """Reap the child with ``wait4`` (its own peak RSS, in KiB on Linux); kill it past the
    timeout. Returns (exit code or None on timeout, peak RSS in MiB)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    timed_out = False
    try:
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                process.returncode = os.waitstatus_to_exitcode(status)
                code = None if timed_out else process.returncode
                return code, usage.ru_maxrss / 1024
            if deadline is not None and time.monotonic() > deadline and not timed_out:
                process.kill()
                timed_out = True
            time.sleep(0.05)
    except BaseException:  # Ctrl-C or an error in the parent: never leave the child running
        if process.returncode is None:
            process.kill()
            process.wait()
        raise


def launch_or_raise(config: RunConfig, **kwargs: Any) -> LaunchResult:
    """``launch`` that turns a user error into UserError and a SUT failure into SutError."""
    result = launch(config, **kwargs)
    if result.status == "user_error":
        raise UserError(result.message)
    if result.status != "ok":
        raise SutError(f"{config.sut} {config.scenario} {config.mode}: {result.message}")
    return result
