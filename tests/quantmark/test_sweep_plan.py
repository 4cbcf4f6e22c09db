"""Sweep settings: flags and files, cell expansion and order, bad input as one line."""

from __future__ import annotations

import pytest

from quantmark.errors import UserError
from quantmark.sweep_plan import build_spec, cells, expand_suts, load_sweep_file


def test_cells_accuracy_first_single_stream_at_batch_one_repeats_round_the_sweep():
    spec = build_spec({"models": "resnet50", "suts": "ort-int8,ort-fp32",
                       "scenarios": "Offline,SingleStream", "batch_sizes": "32,1,8",
                       "repeats": 2})
    ids = [c.id for c in cells(spec)]
    # the framework's FP32 first, whatever order the user gave
    assert spec.suts == ["ort-fp32", "ort-int8"]
    assert ids[:5] == ["resnet50/ort-fp32/accuracy", "resnet50/ort-fp32/Offline-b1-r1",
                       "resnet50/ort-fp32/Offline-b8-r1", "resnet50/ort-fp32/Offline-b32-r1",
                       "resnet50/ort-fp32/SingleStream-b1-r1"]
    assert sum(i.endswith("/accuracy") for i in ids) == 2  # once per model x SUT, not per repeat
    assert not any("SingleStream-b8" in i or "SingleStream-b32" in i for i in ids)
    assert ids.index("resnet50/ort-int8/Offline-b8-r1") < ids.index(
        "resnet50/ort-fp32/Offline-b8-r2")  # repeat 2 starts after repeat 1 of every SUT
    assert len(ids) == len(set(ids)) == 2 + 2 * 2 * 4


def test_cpu_expands_to_every_cpu_sut_each_framework_fp32_first():
    names = expand_suts(["cpu"])
    assert "trt-fp16" not in names and "ov-int8" in names and "tf-xla" in names
    assert names.index("ov-fp32") < names.index("ov-int8")
    assert names[0] == "ort-fp32"
    assert expand_suts(["ort-int8", "cpu"]).count("ort-int8") == 1


def test_toml_and_yaml_files_and_flags_override(tmp_path):
    toml = tmp_path / "sweep.toml"
    toml.write_text('models = ["mobilenetv2"]\nsuts = ["ov-fp32", "ov-int8"]\n'
                    'batch-sizes = [1, 8]\nrepeats = 3\n')
    yaml = tmp_path / "sweep.yaml"
    yaml.write_text("models: [mobilenetv2]\nsuts: ov-fp32,ov-int8\nbatch_sizes: [1, 8]\n"
                    "repeats: 3\n")
    for path in (toml, yaml):
        spec = build_spec({**load_sweep_file(str(path)), "repeats": 1})
        assert spec.models == ["mobilenetv2"]
        assert spec.suts == ["ov-fp32", "ov-int8"]
        assert spec.batch_sizes == [1, 8]
        assert spec.repeats == 1


@pytest.mark.parametrize("settings, message", [
    ({"models": "resnet50"}, "needs --models and --suts"),
    ({"models": "resnet5", "suts": "ort-fp32"}, "unknown model 'resnet5'"),
    ({"models": "resnet50", "suts": "ort-fp33"}, "unknown SUT 'ort-fp33'"),
    ({"models": "resnet50", "suts": "ort-fp32", "scenarios": "Ofline"}, "unknown scenario"),
    ({"models": "resnet50", "suts": "ort-fp32", "batch_sizes": "0"}, "must be >= 1"),
    ({"models": "resnet50", "suts": "ort-fp32", "batch_sizes": "a"}, "a number was expected"),
])
def test_bad_settings_are_one_line_errors(settings, message):
    with pytest.raises(UserError, match=message) as info:
        build_spec(settings)
    assert "\n" not in str(info.value)


def test_bad_sweep_files(tmp_path):
    unknown = tmp_path / "a.toml"
    unknown.write_text('models = ["resnet50"]\nsuts = ["ort-fp32"]\nbatch = 8\n')
    with pytest.raises(UserError, match="unknown key batch; known keys: .*batch_sizes"):
        load_sweep_file(str(unknown))
    broken = tmp_path / "b.toml"
    broken.write_text("models = [\n")
    with pytest.raises(UserError, match="is not valid"):
        load_sweep_file(str(broken))
    other = tmp_path / "c.json"
    other.write_text("{}")
    with pytest.raises(UserError, match="name it .toml, .yaml or .yml"):
        load_sweep_file(str(other))
    with pytest.raises(UserError, match="does not exist"):
        load_sweep_file(str(tmp_path / "missing.toml"))
