"""The MLPerf results layout quantmark writes.

``<output>/<system_id>/<model>/<scenario>/performance/run_1/`` for performance runs and
``<output>/<system_id>/<model>/<scenario>/accuracy/`` for accuracy runs, and
``<output>/<system_id>/<model>/<scenario>/TEST01/performance/run_1/`` for a compliance test's run
(its verify_*.txt beside ``performance/``), each holding LoadGen's ``mlperf_log_*`` files and
quantmark's ``results.json`` beside them: the layout of the MLPerf results tree.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path


def system_id(sut: str, host: str | None = None) -> str:
    """``<host>-<sut>``: names both the machine and the SUT, safe as a folder name."""
    name = host or socket.gethostname().split(".")[0] or "host"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{name}-{sut}")


def scenario_dir(output: str | Path, system: str, model: str, scenario: str) -> Path:
    """Where every test of one SUT, model and scenario lives."""
    return Path(output) / system / model / scenario


def run_dir(output: str | Path, system: str, model: str, scenario: str, mode: str,
            audit: str = "", repeat: int = 1) -> Path:
    """Final folder of one run's logs: repeat k of a performance run is ``run_k``."""
    base = scenario_dir(output, system, model, scenario)
    if audit:
        return base / audit / "performance" / "run_1"
    return base / "accuracy" if mode == "accuracy" else base / "performance" / f"run_{repeat}"
