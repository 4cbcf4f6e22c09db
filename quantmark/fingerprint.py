"""What a result was measured on: software versions and the machine."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
from pathlib import Path
from typing import Any

import quantmark
from quantmark.board import board_facts


def cpu_model(root: Path = Path("/")) -> str:
    """The CPU's marketing name (``/proc/cpuinfo`` on Linux, platform elsewhere). An aarch64
    /proc/cpuinfo may name no model at all: then the board and core ("Raspberry Pi 5 Model B
    Rev 1.0 (Cortex-A76)") say more than "aarch64"."""
    try:
        with open(root / "proc/cpuinfo") as handle:
            for line in handle:
                if line.lower().startswith(("model name", "hardware")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    board = board_facts(root)
    if board["model"] and board["cpu_core"]:
        return f"{board['model']} ({board['cpu_core']})"
    return (board["model"] or board["cpu_core"] or platform.processor()
            or platform.machine())


def cpu_flags() -> list[str]:
    """Instruction-set features that decide which precisions run natively."""
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8",
              "avx512_fp16", "asimd", "fphp", "asimddp", "bf16", "i8mm")
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.lower().startswith(("flags", "features")):
                    present = set(line.split(":", 1)[1].split())
                    return [flag for flag in wanted if flag in present]
    except OSError:
        pass
    return []


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_flags": cpu_flags(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "arch": platform.machine(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "board": board_facts(),
    }


def software(frameworks: tuple[str, ...] = ()) -> dict[str, Any]:
    versions = {"quantmark": quantmark.__version__,
                "mlcommons-loadgen": package_version("mlcommons-loadgen"),
                "numpy": package_version("numpy")}
    for name in frameworks:
        versions[name] = package_version(name)
    return versions
