"""Run ONE LoadGen test in a fresh process.

LoadGen reads mlperf.conf only on the first ``FromConfig`` call of a process, so every test
(performance, accuracy, audit, sweep cell) gets its own interpreter. The child writes a small
status file; the parent turns it into a result or a one-line error. Used by run.py, and later by
audit and sweep alike.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from quantmark.config import RunConfig
from quantmark.errors import SutError, UserError

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class LaunchResult:
    """What the child reported: where its logs are and what it measured."""

    status: str  # "ok" | "failed" | "user_error" | "crashed" | "timeout"
    run_dir: str | None
    results: dict[str, Any]
    message: str = ""


def child_env() -> dict[str, str]:
    """The child must import quantmark's packages whatever its working directory."""
    env = dict(os.environ)
    paths = [str(PROJECT_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def absolute_paths(config: RunConfig) -> RunConfig:
    """The same config with every path absolute, for a child in another working directory."""
    changes = {name: str(Path(value).expanduser().resolve())
               for name in ("output", "model_path", "dataset_path", "calibration_list",
                            "user_conf")
               if (value := getattr(config, name))}
    return replace(config, **changes)


def launch(config: RunConfig, *, cwd: str | None = None, timeout_s: float | None = None,
           quiet: bool = False) -> LaunchResult:
    """Run ``config`` in a child process and wait for it."""
    with tempfile.TemporaryDirectory(prefix="quantmark-launch-") as tmp:
        config_path = Path(tmp) / "config.json"
        status_path = Path(tmp) / "status.json"
        if config.audit or cwd is not None:
            config = absolute_paths(config)
        if config.audit:  # LoadGen reads audit.config from the test's working directory
            from audit.configs import audit_config_path

            cwd = str(Path(tmp) / config.audit)
            Path(cwd).mkdir()
            shutil.copyfile(audit_config_path(config.audit), Path(cwd) / "audit.config")
        config_path.write_text(config.to_json())
        command = [sys.executable, "-m", "quantmark.runner", str(config_path), str(status_path)]
        output = subprocess.DEVNULL if quiet else None
        try:
            process = subprocess.run(command, cwd=cwd, env=child_env(), timeout=timeout_s,
                                     stdout=output, check=False)
        except subprocess.TimeoutExpired:
            return LaunchResult("timeout", None, {},
                                f"test did not finish within {timeout_s:.0f} s")
        if status_path.is_file():
            status = json.loads(status_path.read_text())
            return LaunchResult(status["status"], status.get("run_dir"),
                                status.get("results", {}), status.get("message", ""))
        return LaunchResult("crashed", None, {},
                            f"test process exited with code {process.returncode} and no status")


def launch_or_raise(config: RunConfig, **kwargs: Any) -> LaunchResult:
    """``launch`` that turns a user error into UserError and a SUT failure into SutError."""
    result = launch(config, **kwargs)
    if result.status == "user_error":
        raise UserError(result.message)
    if result.status != "ok":
        raise SutError(f"{config.sut} {config.scenario} {config.mode}: {result.message}")
    return result
