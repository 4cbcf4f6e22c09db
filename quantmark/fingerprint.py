"""What a result was measured on: software versions and the machine."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
from typing import Any

import quantmark


def cpu_model() -> str:
    """The CPU's marketing name (``/proc/cpuinfo`` on Linux, platform elsewhere)."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.lower().startswith(("model name", "hardware")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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
    }


def software(frameworks: tuple[str, ...] = ()) -> dict[str, Any]:
    versions = {"quantmark": quantmark.__version__,
                "mlcommons-loadgen": package_version("mlcommons-loadgen"),
                "numpy": package_version("numpy")}
    for name in frameworks:
        versions[name] = package_version(name)
    return versions
