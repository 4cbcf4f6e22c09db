"""The system description: what the machine says, completed honestly, the user's word last."""

from __future__ import annotations

import json
import os

import pytest

from quantmark.ground.errors import UserError
from quantmark.submission.system import (
    NA,
    REQUIRED_KEYS,
    UNKNOWN,
    build_system_json,
    missing_user_fields,
    software_stack,
    write_system_json,
)
from tests.submission.conftest import build, detect, put


def test_real_machine_is_complete_and_plausible(tmp_path):
    system = build_system_json(submitter="Acme", division="closed", system_name="this box",
                               frameworks={"ONNX Runtime": "1.23.2"})
    assert list(system) == list(REQUIRED_KEYS)
    for key, value in system.items():
        assert value not in ("", None), key
        assert isinstance(value, int | str), key
    assert 1 <= system["host_processor_core_count"] <= os.cpu_count()
    assert system["host_processor_model_name"] != UNKNOWN
    assert system["host_memory_capacity"].endswith(("GiB", "MiB", "TiB"))
    json.dumps(system)


def test_software_stack():
    stack = software_stack({"ONNX Runtime": "1.23.2", "PyTorch": "2.9.0"})
    assert stack["framework"] == "ONNX Runtime 1.23.2, PyTorch 2.9.0"
    other = stack["other_software_stack"]
    assert other.startswith("Python 3.")
    assert "quantmark 0.1.0" in other and "ONNX Runtime 1.23.2" in other
    assert "numpy " in other
    assert "framework" not in software_stack({})


def test_user_file_wins(pi4, tmp_path):
    user = put(tmp_path, "sys.json", json.dumps({
        "cooling": "passive heatsink", "host_processor_core_count": "3",
        "host_processor_model_name": "BCM2711 rev C0", "status": "Preview",
        "system_type": "edge,datacenter", "division": "OPEN"}))
    system = build(detect(pi4, tmp_path), user_file=user)
    assert system["cooling"] == "passive heatsink"
    assert system["host_processor_core_count"] == 3
    assert system["host_processor_model_name"] == "BCM2711 rev C0"
    assert system["status"] == "preview"
    assert system["system_type"] == "datacenter,edge"
    assert system["division"] == "open"


@pytest.mark.parametrize(("content", "says"), [
    ("{not json", "not valid JSON"),
    ('["cooling", "air"]', "holds a JSON list"),
    ('{"colling": "air"}', "did you mean 'cooling'"),
    ('{"cooling": ""}', "cooling is empty"),
    ('{"cooling": null}', "must be a string or a number"),
    ('{"cooling": ["air"]}', "must be a string or a number"),
    ('{"host_processor_core_count": "many"}', "whole number"),
    ('{"host_processor_core_count": 2.5}', "whole number"),
    ('{"submitter": "Other Corp"}', "make them agree"),
    ('{"division": "closed"}', "make them agree"),
    (b"\xff\xfe{}", "not valid JSON"),
])
def test_bad_user_file(tmp_path, content, says):
    user = put(tmp_path, "my system.json", content)
    with pytest.raises(UserError) as caught:
        build({}, user_file=user)
    message = str(caught.value)
    assert says in message
    assert str(user) in message
    assert "\n" not in message


def test_missing_user_file(tmp_path):
    with pytest.raises(UserError, match="cannot read system file") as caught:
        build({}, user_file=tmp_path / "nope.json")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("bad", [{"division": "network"}, {"status": "onprem"},
                                 {"system_type": "cloud"}, {"submitter": " "},
                                 {"system_name": ""}])
def test_invalid_choices(bad):
    with pytest.raises(UserError) as caught:
        build({}, **bad)
    assert "\n" not in str(caught.value)
    assert next(iter(bad)) in str(caught.value)


def test_missing_user_fields_until_the_user_file_fills_them(pi4, tmp_path):
    system = build(detect(pi4, tmp_path))
    missing = missing_user_fields(system)
    assert {"cooling", "host_memory_configuration", "system_type_detail"} <= set(missing)
    assert "accelerator_model_name" not in missing  # N/A is a true answer, not a gap
    user = put(tmp_path, "sys.json", json.dumps(dict.fromkeys(missing, "filled in")))
    assert missing_user_fields(build(detect(pi4, tmp_path), user_file=user)) == []
    assert missing_user_fields({"cooling": "air"})[0] == "division"  # absent counts as missing


def test_user_declared_accelerator_clears_the_none_found_answers(pi4, tmp_path):
    user = put(tmp_path, "sys.json", json.dumps({"accelerators_per_node": 1,
                                                 "accelerator_model_name": "Hailo-8"}))
    system = build(detect(pi4, tmp_path), user_file=user)
    assert system["accelerator_model_name"] == "Hailo-8"
    assert system["accelerator_memory_capacity"] == UNKNOWN
    assert system["accelerator_interconnect"] == NA  # one accelerator: nothing to interconnect
    assert "accelerator_frequency" in missing_user_fields(system)


def test_no_accelerator_is_a_nonempty_zero():
    # The checker treats falsy values as empty answers; "0" is what CPU-only submissions write.
    assert build({"accelerators_per_node": 0})["accelerators_per_node"] == "0"
    assert build({"accelerators_per_node": 1})["accelerator_interconnect"] == NA


def test_write_is_atomic_and_round_trips(tmp_path, monkeypatch):
    system = build({"host_processor_model_name": "X"})
    path = tmp_path / "systems" / "acme_box.json"
    write_system_json(system, path)
    assert json.loads(path.read_text()) == system
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        write_system_json({**system, "cooling": "water"}, path)
    assert json.loads(path.read_text()) == system
    assert sorted(p.name for p in path.parent.iterdir()) == ["acme_box.json"]
