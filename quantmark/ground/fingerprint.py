"""What a result was measured on: software versions and the machine. Each fact is looked up
once per process (the GPU probed once, each distribution's version read once)."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import socket
import sys
from pathlib import Path
from typing import Any

from quantmark.ground.board import board_facts
from quantmark.ground.version import VERSION


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


@functools.cache
def package_version(name: str) -> str | None:
    """An installed distribution's version from its metadata, without importing the package
    (a cache lookup must not pay a framework's import); None when it is not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def dist_version(name: str, missing: str = "absent") -> str:
    """``package_version`` with a word for "not installed", for cache keys and records."""
    return package_version(name) or missing


@functools.cache
def gpu_present() -> bool:
    """An NVIDIA GPU is visible (driver device node); cheap and import-free."""
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/nvidia0")


def machine() -> dict[str, Any]:
    facts = {
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_flags": cpu_flags(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "arch": platform.machine(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "board": board_facts(),
        "gpu": gpu_facts(),
    }
    node = os.environ.get("QUANTMARK_NODE")
    if node:  # measured on a fleet node (quantmark.sweep.fleet): reports tell machines by it
        facts["node"] = node
    return facts


def system_name(machine: dict[str, Any]) -> str:
    """Which machine a record is from: its fleet node name, else its host name."""
    return str(machine.get("node") or machine.get("hostname") or "unknown")


def gpu_facts() -> dict[str, Any] | None:
    """The NVIDIA GPUs (model, memory, compute capability), driver and CUDA versions, or None
    when there is none. From NVML (nvidia-ml-py) when importable, else from torch when this
    process already runs torch with CUDA; never imports a framework, never fails."""
    if not gpu_present():
        return None
    try:
        facts = _nvml_facts()
    except Exception:  # noqa: BLE001 - no nvidia-ml-py, no driver, an old GPU: try torch
        facts = None
    if facts is None:
        try:
            facts = _torch_facts()
        except Exception:  # noqa: BLE001 - a fingerprint never fails a run
            facts = None
    return facts


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_facts() -> dict[str, Any] | None:
    import pynvml

    pynvml.nvmlInit()
    try:
        devices = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            device: dict[str, Any] = {
                "index": index, "name": _text(pynvml.nvmlDeviceGetName(handle)),
                "memory_mb": round(pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**20)}
            try:
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
                device["compute_capability"] = f"sm_{major}{minor}"
            except Exception:  # noqa: BLE001 - older NVML
                pass
            devices.append(device)
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()  # e.g. 12040 -> "12.4"
        return {"source": "nvml", "driver": _text(pynvml.nvmlSystemGetDriverVersion()),
                "cuda_driver_api": f"{cuda // 1000}.{cuda % 1000 // 10}",
                "cuda_runtime_torch": _torch_cuda_runtime(), "devices": devices}
    finally:
        pynvml.nvmlShutdown()


def _torch_cuda_runtime() -> str | None:
    torch = sys.modules.get("torch")
    return getattr(getattr(torch, "version", None), "cuda", None) if torch else None


def _torch_facts() -> dict[str, Any] | None:
    """torch's view, only when this process already imported torch (importing it here would
    load a second CUDA stack beside another framework's)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    devices = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        devices.append({"index": index, "name": props.name,
                        "memory_mb": round(props.total_memory / 2**20),
                        "compute_capability": f"sm_{props.major}{props.minor}"})
    return {"source": "torch.cuda", "driver": None, "cuda_driver_api": None,
            "cuda_runtime_torch": torch.version.cuda, "devices": devices}


def software(distributions: tuple[str, ...] = ()) -> dict[str, Any]:
    """quantmark's, LoadGen's and numpy's versions, and those of ``distributions`` that are
    installed: the pip names a framework declares (``FrameworkInfo.distributions``), so a GPU
    build under its own name (onnxruntime-gpu) or a companion (torchao) is recorded where it
    is there and nothing is guessed here."""
    versions = {"quantmark": VERSION,
                "mlcommons-loadgen": package_version("mlcommons-loadgen"),
                "numpy": package_version("numpy")}
    for name in distributions:
        version = package_version(name)
        if version:
            versions[name] = version
    return versions
