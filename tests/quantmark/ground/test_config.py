"""A run's, a diagnosis' and a profile's configurations share the workload's fields by
construction (one declaration, ``WorkloadFields``), and a RunConfig reads and writes as before."""

from __future__ import annotations

import json
from dataclasses import MISSING, Field, fields
from typing import Any

import pytest

from quantmark.diagnosis.profile_run import ProfileConfig
from quantmark.diagnosis.steps import DiagnoseConfig
from quantmark.ground.config import RunConfig, WorkloadFields

CONFIGS = (RunConfig, DiagnoseConfig, ProfileConfig)
SHARED = ("model_path", "task", "input_size", "num_classes", "preprocess", "dataset_path",
          "labels", "calibration_list", "seq_len", "padding", "tokenizer")


def _default(f: Field) -> Any:
    return f.default_factory() if f.default_factory is not MISSING else f.default


@pytest.mark.parametrize("config", CONFIGS)
def test_each_configuration_inherits_the_workload_fields_and_declares_none_again(config):
    assert issubclass(config, WorkloadFields)
    own = set(vars(config).get("__annotations__", {}))
    assert not own & set(SHARED), f"{config.__name__} declares {own & set(SHARED)} again"
    shared = {f.name: f for f in fields(WorkloadFields)}
    found = {f.name: f for f in fields(config)}
    for name in SHARED:
        assert found[name].type == shared[name].type
        assert _default(found[name]) == _default(shared[name])
    assert "model" in found  # each keeps the model's name as its own required field


def test_the_shared_fields_are_the_workload_ones():
    assert tuple(f.name for f in fields(WorkloadFields)) == SHARED


def test_positional_arguments_keep_their_places():
    assert RunConfig("SingleStream", "ort-fp32", "m").model == "m"
    config = DiagnoseConfig("m", "ort-int8", "ort-fp32", model_path="m.onnx")
    assert (config.model, config.sut, config.against, config.model_path) == \
        ("m", "ort-int8", "ort-fp32", "m.onnx")
    assert ProfileConfig("m", "ort-int8", "ort-fp32").against == "ort-fp32"


def test_a_run_config_round_trips_and_reads_what_earlier_versions_wrote():
    config = RunConfig(scenario="Offline", sut="ort-int8", model="mine", batch_size=8,
                       model_path="mine.onnx", input_size="96", num_classes=10,
                       preprocess={"preset": "cifar10"}, labels="labels.txt", task="")
    assert RunConfig.from_json(config.to_json()) == config
    # a config.json as quantmark wrote it before tasks (no "task"), with a key it no longer has
    older = {k: v for k, v in json.loads(config.to_json()).items() if k != "task"}
    older["retired_setting"] = 1
    assert RunConfig.from_json(json.dumps(older)) == config
    assert set(json.loads(config.to_json())) == {f.name for f in fields(RunConfig)}
