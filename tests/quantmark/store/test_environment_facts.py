"""A record's environment as flat facts: what can change a figure, never a path or a time."""

from __future__ import annotations

import pytest

from quantmark.ground.records import DiagnosisRecord, RunRecord
from quantmark.store.environment_facts import (
    flatten,
    kernel,
    record_facts,
    run_facts,
    scalar,
    without_paths,
)
from tests.quantmark.store.run_folders import template


@pytest.mark.parametrize(("machine", "expected"), [
    ({"os": "Linux-6.8.0-45-generic-x86_64-with-glibc2.39", "arch": "x86_64"},
     "6.8.0-45-generic"),
    ({"os": "Linux-6.6.51+rpt-rpi-2712-aarch64-with-glibc2.36", "arch": "aarch64"},
     "6.6.51+rpt-rpi-2712"),
    ({"os": "Windows-10-10.0.19041-SP0", "arch": "AMD64"}, None),
    ({}, None),
])
def test_the_kernel_is_cut_from_the_platform_string(machine, expected):
    assert kernel(machine) == expected


def test_values_are_scalars_lists_joined_the_rest_json():
    assert scalar(["avx2", "avx512f"]) == "avx2,avx512f"
    assert scalar({"b": 1, "a": [1, {"x": 2}]}) == '{"a": [1, {"x": 2}], "b": 1}'
    assert scalar(3) == 3 and scalar(True) is True and scalar(None) is None
    assert flatten("m", {"a": {"b": {"c": 1}}, "d": None}, depth=2) == {"m.a.b": '{"c": 1}'}


def test_a_runs_facts_hold_what_changes_speed_and_nothing_that_only_moves():
    data = template()
    data["machine"]["board"] = {"governor": "performance", "model": None}
    facts = run_facts(RunRecord.of(data))
    assert facts["machine.governor"] == "performance"
    assert facts["machine.board.governor"] == "performance"
    assert facts["machine.kernel"] == "6.18.44-fc-v445"
    assert facts["software.mlcommons-loadgen"] == "6.0.17"
    assert facts["settings.mode"] == "quick" and facts["settings.quick_duration_ms"] == 10000
    assert facts["sut.executed_precision"] == "bf16" and facts["sut.threads"] == 2
    assert facts["fingerprint.artifact_key"] == "2c93d0c6abf34511"
    assert facts["fingerprint.source_hash"] == "cfdb09f8ab0b705a"
    assert not [key for key in facts if "thermal" in key or key.startswith("times")]
    assert not [key for key, value in facts.items() if "/tmp/" in str(value)], facts
    assert all(isinstance(value, str | int | float | bool) for value in facts.values())


def test_a_changed_thread_count_or_version_is_one_changed_fact():
    data = template()
    before = run_facts(RunRecord.of(data))
    data["config"]["threads"] = 1
    data["software"]["openvino"] = "2026.5.0"
    data["times"]["loadgen_started_at"] += 3600
    data["machine"]["thermal"] = {"before": {"max_c": 71}}
    after = run_facts(RunRecord.of(data))
    changed = {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}
    assert changed == {"settings.threads", "software.openvino"}


def test_a_diagnosis_keeps_its_machine_software_and_settings():
    record = DiagnosisRecord(model="resnet50", sut="ort-int8", against="ort-fp32", samples=8,
                             layers=[], worst=[], capture={}, config={"threads": 2},
                             machine={"cpu_model": "X"}, software={"onnxruntime": "1.22.0"})
    assert record_facts(record) == {"machine.cpu_model": "X", "software.onnxruntime": "1.22.0",
                                    "settings.threads": 2}


def test_a_backends_own_path_is_no_fact():
    data = template()
    data["sut"]["cache_dir"] = "/tmp/somewhere/model"
    facts = record_facts(RunRecord.of(data))
    assert "sut.cache_dir" not in facts and facts["sut.framework"] == "openvino"
    assert without_paths({"a": "/x/y", "b": "/", "c": "v/w", "d": 3}) == \
        {"b": "/", "c": "v/w", "d": 3}
