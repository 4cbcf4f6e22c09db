"""The characterization's pure helpers: SUT name parts, FP32 baselines, setup fingerprints."""

from __future__ import annotations

import copy

from quantmark.ground.records import RunRecord
from quantmark.report.characterize import baseline, family, fingerprint_id, is_fp32, variant

H100 = {"source": "nvml", "driver": "550.54", "cuda_driver_api": "12.4",
        "cuda_runtime_torch": "12.4", "devices": [{"index": 0, "name": "NVIDIA H100",
                                                   "memory_mb": 81559,
                                                   "compute_capability": "sm_90"}]}


def test_names_split_into_framework_on_a_device_and_precision():
    assert (family("ort-int8"), variant("ort-int8")) == ("ort", "int8")
    assert (family("ort-cuda-fp16"), variant("ort-cuda-fp16")) == ("ort-cuda", "fp16")
    assert (family("torch-cuda-compile"), variant("torch-cuda-compile")) == ("torch-cuda",
                                                                           "compile")
    assert is_fp32("ort-cuda-fp32") and is_fp32("trt-fp32") and not is_fp32("ort-trt-fp16")


def test_baseline_is_what_the_run_recorded_else_the_family_fp32():
    assert baseline(RunRecord.of({"sut": {"name": "ort-trt-int8",
                                          "fp32_baseline": "ort-cuda-fp32"}})) == "ort-cuda-fp32"
    # results from before issue 7
    assert baseline(RunRecord.of({"sut": {"name": "ov-int8"}})) == "ov-fp32"
    # a known SUT: its framework's FP32 on the same device, not "<family>-fp32"
    assert baseline(RunRecord.of({"sut": {"name": "ort-trt-int8"}})) == "ort-cuda-fp32"
    # a name the registry does not know (older results): the family's FP32
    assert baseline(RunRecord.of({"sut": {"name": "gone-cuda-int8"}})) == "gone-cuda-fp32"


def test_known_names_are_decoded_by_what_their_framework_declares(monkeypatch):
    """A framework may name a variant with a dash in it; splitting is for unknown names only."""
    from quantmark.sut import registry
    from quantmark.sut.info import SutInfo

    awq = SutInfo("mylib-int4-awq", "mylib", "int4 AWQ", "cpu", "mylib", (), None,
                  variant="int4-awq")
    monkeypatch.setitem(registry.SUTS, awq.name, awq)
    assert (family("mylib-int4-awq"), variant("mylib-int4-awq")) == ("mylib", "int4-awq")
    assert not is_fp32("mylib-int4-awq")
    assert (family("old-sut-int4-awq"), variant("old-sut-int4-awq")) == ("old-sut-int4", "awq")


def test_the_gpu_is_part_of_the_setup_fingerprint():
    cpu_only = {"machine": {"cpu_model": "x", "gpu": None}, "software": {"numpy": "2"}}
    with_gpu = copy.deepcopy(cpu_only)
    with_gpu["machine"]["gpu"] = H100
    other_driver = copy.deepcopy(with_gpu)
    other_driver["machine"]["gpu"]["driver"] = "560.28"
    memory_reading_differs = copy.deepcopy(with_gpu)
    memory_reading_differs["machine"]["gpu"]["devices"][0]["memory_mb"] = 80000
    ids = {fingerprint_id(RunRecord.of(r)) for r in (cpu_only, with_gpu, other_driver)}
    assert len(ids) == 3
    assert fingerprint_id(RunRecord.of(memory_reading_differs)) == fingerprint_id(
        RunRecord.of(with_gpu))
    no_key = {"machine": {"cpu_model": "x"}, "software": {"numpy": "2"}}
    assert fingerprint_id(RunRecord.of(no_key)) == fingerprint_id(  # older results keep their id
        RunRecord.of(cpu_only))
