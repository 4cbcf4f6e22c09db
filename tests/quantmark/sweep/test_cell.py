"""A cell's run is the RunConfig a single run of the same settings is, here and on a node."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path

import pytest

from quantmark.ground.config import RunConfig
from quantmark.ground.errors import UserError
from quantmark.sweep.cell import NOT_SWEPT, cell_config
from quantmark.sweep.plan import Cell, SweepSpec, build_spec, cells


def _spec(tmp_path: Path) -> SweepSpec:
    model = tmp_path / "mine.onnx"
    model.write_bytes(b"onnx")
    labels = tmp_path / "labels.txt"
    labels.write_text("cat\ndog\n")
    return build_spec({"models": "mobilenetv2", "suts": "ov-int8", "scenarios": "Offline",
                       "batch_sizes": "4", "official": True, "threads": 3, "workers": 2,
                       "model_path": str(model), "sut_option": ["ov_api=async"],
                       "user_conf": "u.conf", "calibration_list": "c.txt",
                       "dataset_path": None, "seconds": 2.5, "num_classes": 2,
                       "preprocess": "cifar10", "mean": "0.5", "labels": str(labels)})


def test_the_cell_runs_with_the_sweeps_run_settings_and_its_options(tmp_path):
    spec = _spec(tmp_path)
    cell = next(c for c in cells(spec) if c.mode == "performance")
    config = cell_config(tmp_path, spec, cell)
    assert config.sut_options == {"ov_api": "async"}
    assert (config.workers, config.threads, config.model_path) == (2, 3, spec.model_path)
    assert (config.quick, config.quick_duration_ms, config.batch_size) == (False, 2500, 4)
    assert config.output == str(tmp_path / "runs" / "mobilenetv2" / "ov-int8+ov_api=async" /
                                "Offline-b4-r1")


def test_every_run_setting_reaches_a_cell_unless_a_sweep_never_sets_it(tmp_path):
    """A field added to RunConfig must be given by the sweep (a flag, a file key) or named in
    NOT_SWEPT with its reason: never silently left at its default for every cell."""
    # a text model's settings (build_spec refuses them for this image model)
    spec = replace(_spec(tmp_path), padding="dynamic", tokenizer=str(tmp_path / "tok.json"))
    cell = Cell("mobilenetv2", "ov-int8", "SingleStream", 4, repeat=2, mode="accuracy",
                ensemble="x@ov-int8,y@ov-int8", ensemble_mode="concurrent",
                sut_options=(("ov_api", "async"),), input_size="96", dataset=str(tmp_path),
                seq_len=32)
    config = cell_config(tmp_path, spec, cell)
    default = RunConfig(scenario="", sut="", model="")
    unset = [f.name for f in fields(RunConfig) if f.name not in NOT_SWEPT
             and getattr(config, f.name) == getattr(default, f.name)]
    assert unset == []
    assert (config.input_size, config.dataset_path, config.num_classes) == \
        ("96", str(tmp_path), 2)
    assert config.preprocess == {"preset": "cifar10", "mean": "0.5"}
    assert config.labels == spec.labels
    assert (config.seq_len, config.padding, config.tokenizer) == \
        (32, "dynamic", str(tmp_path / "tok.json"))
    assert set(NOT_SWEPT) <= {f.name for f in fields(RunConfig)}


def test_a_fleet_node_builds_the_same_run_from_the_plain_dicts_it_is_sent(tmp_path):
    """``dispatch`` sends ``vars(spec)`` and ``cell.to_dict()``; ``task.run_on_node`` turns
    them back into a SweepSpec and a Cell."""
    spec = _spec(tmp_path)
    for cell in cells(spec):
        sent_spec = json.loads(json.dumps(vars(spec)))
        sent_cell = json.loads(json.dumps(cell.to_dict()))
        assert cell_config(tmp_path, SweepSpec(**sent_spec), Cell.from_dict(sent_cell)) == \
            cell_config(tmp_path, spec, cell)


@pytest.mark.parametrize("settings, needle", [
    ({"models": "mobilenetv2,resnet50"}, "--model-path is one model's file, but --models "
                                         "names 2 (mobilenetv2, resnet50)"),
    ({"ensembles": "mobilenetv2@ov-int8,resnet50@ov-int8"}, "drop --model-path or --ensemble"),
    ({"models": "mobilenetv2", "model_path": "missing.onnx"}, "--model-path missing.onnx does "
                                                              "not exist"),
    ({"models": "mobilenetv2", "workers": -1}, "--workers -1: must be a whole number >= 0"),
])
def test_bad_run_settings_of_a_sweep_are_one_line(tmp_path, settings, needle):
    model = tmp_path / "mine.onnx"
    model.write_bytes(b"onnx")
    with pytest.raises(UserError) as info:
        build_spec({"suts": "ov-int8", "model_path": str(model), **settings})
    assert needle in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_resume_reads_an_older_manifest_without_the_new_settings(tmp_path):
    """A sweep folder written before workers and model_path were settings resumes when they
    are left at their defaults, and is refused when they change."""
    from quantmark.sweep.driver import MANIFEST, _open_manifest

    spec = build_spec({"models": "mobilenetv2", "suts": "ov-int8", "output": str(tmp_path)})
    old = {k: v for k, v in spec.measuring_settings().items()
           if k not in ("workers", "model_path")}
    (tmp_path / MANIFEST).write_text(json.dumps({"schema": 1, "settings": old,
                                                 "cells": {}}))
    assert _open_manifest(tmp_path, spec).settings == spec.measuring_settings()
    spec.workers = 2
    with pytest.raises(UserError, match=r"other settings \(workers\)"):
        _open_manifest(tmp_path, spec)
