"""The GPU fingerprint: none here without a GPU; NVML read when it is there, never failing."""

from __future__ import annotations

import sys
import types

import pytest

from quantmark.ground import fingerprint
from quantmark.ground.fingerprint import gpu_present


def test_fingerprint_has_no_gpu_here():
    if gpu_present():
        pytest.skip("this machine has an NVIDIA GPU")
    assert fingerprint.machine()["gpu"] is None


def test_fingerprint_reads_nvml_and_never_fails(monkeypatch):
    handle = object()
    memory = types.SimpleNamespace(total=80 * 2**30)
    nvml = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: handle,
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3",
        nvmlDeviceGetMemoryInfo=lambda h: memory,
        nvmlDeviceGetCudaComputeCapability=lambda h: (9, 0),
        nvmlSystemGetDriverVersion=lambda: "550.54.15",
        nvmlSystemGetCudaDriverVersion=lambda: 12040)
    monkeypatch.setattr(fingerprint, "gpu_present", lambda: True)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    facts = fingerprint.gpu_facts()
    assert facts["source"] == "nvml" and facts["driver"] == "550.54.15"
    assert facts["cuda_driver_api"] == "12.4"
    assert facts["devices"] == [{"index": 0, "name": "NVIDIA H100 80GB HBM3",
                                 "memory_mb": 81920, "compute_capability": "sm_90"}]

    def broken():
        raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setitem(sys.modules, "pynvml", types.SimpleNamespace(nvmlInit=broken))
    facts = fingerprint.gpu_facts()  # torch: only if this process runs it with CUDA
    assert facts is None or facts["source"] == "torch.cuda"
