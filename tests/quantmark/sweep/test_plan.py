"""Sweep settings: flags and files, cell expansion and order, bad input as one line."""

from __future__ import annotations

import pytest

from quantmark.ground.errors import UserError
from quantmark.sweep.plan import build_spec, cells, expand_suts, load_sweep_file


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
    ({"models": "resnet50", "suts": "ort-fp32", "batch_sizes": "0"},
     "--batch-sizes 0: must be whole numbers >= 1"),
    ({"models": "resnet50", "suts": "ort-fp32", "seconds": 0}, "--seconds 0: must be a number"),
    ({"models": "resnet50", "suts": "ort-fp32", "repeats": 0}, "--repeats 0: must be a whole"),
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
    broken.write_text('models = ["resnet50"]\nofficial = fals\n')
    with pytest.raises(UserError, match=r"b.toml:2 is not valid TOML \(Invalid value at column "
                                        r"12\); fix that line"):
        load_sweep_file(str(broken))
    other = tmp_path / "c.json"
    other.write_text("{}")
    with pytest.raises(UserError, match="name it .toml, .yaml or .yml"):
        load_sweep_file(str(other))
    with pytest.raises(UserError, match="does not exist"):
        load_sweep_file(str(tmp_path / "missing.toml"))


def test_sweep_file_keys_are_the_spec_fields():
    from dataclasses import fields

    from quantmark.sweep.plan import KEY_TYPES, SweepSpec

    assert set(KEY_TYPES) == {f.name for f in fields(SweepSpec)}


@pytest.mark.parametrize("line, key", [
    ('official = "false"', "official"),
    ('accuracy = "no"', "accuracy"),
    ('repeats = "3"', "repeats"),
    ("repeats = true", "repeats"),
    ("seconds = false", "seconds"),
    ('"batch-sizes" = [1, "8"]', "batch_sizes"),
    ("batch_sizes = 2.5", "batch_sizes"),
    ("scenarios = [1, 2]", "scenarios"),
    ("threads = 1.5", "threads"),
    ("dataset-path = 7", "dataset_path"),
    ("[output]\nfolder = 'x'", "output"),
])
def test_toml_values_of_the_wrong_type_name_key_and_line(tmp_path, line, key):
    """A string is not a boolean: official = "false" once ran official runs."""
    path = tmp_path / "sweep.toml"
    path.write_text(f'# my sweep\nmodels = ["resnet50"]\nsuts = "ort-fp32"\n{line}\n')
    with pytest.raises(UserError) as info:
        load_sweep_file(str(path))
    message = str(info.value)
    assert f"{path}:4: {key} " in message and f"{key} must be" in message, message
    assert "\n" not in message


def test_official_string_says_how_to_write_it(tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text('models = "resnet50"\nsuts = "ort-fp32"\n  official   = "false"\n')
    with pytest.raises(UserError, match=r":3: official = 'false' is a string; official must "
                                        r"be true or false \(write true or false without "
                                        r"quotes\)"):
        load_sweep_file(str(path))
    with pytest.raises(UserError, match="official = 'false': must be true or false"):
        build_spec({"models": "resnet50", "suts": "ort-fp32", "official": "false"})


def test_yaml_values_of_the_wrong_type_name_key_and_line(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text("models: [resnet50]\nsuts: ort-fp32\n\nofficial: 'false'\n")
    with pytest.raises(UserError, match=rf"{path}:4: official = 'false' is a string"):
        load_sweep_file(str(path))
    path.write_text("models: [resnet50]\nsuts: ort-fp32\nofficial: false\nrepeats: 2\n"
                    "batch-sizes: 4\nseconds: 2\n")
    spec = build_spec(load_sweep_file(str(path)))
    assert (spec.official, spec.repeats, spec.batch_sizes, spec.seconds) == (False, 2, [4], 2.0)


@pytest.mark.parametrize("text, line", [
    ("models: [resnet50\nsuts: ort-fp32\n", 2),
    ("models: resnet50\n  suts: ort-fp32\n", 2),
    ("models: resnet50\nsuts: ort-fp32\nscenarios: [Offline]]\n", 3),
])
def test_broken_yaml_names_its_line(tmp_path, text, line):
    path = tmp_path / "sweep.yml"
    path.write_text(text)
    with pytest.raises(UserError) as info:
        load_sweep_file(str(path))
    assert f"sweep file {path}:{line} is not valid YAML" in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


def test_bad_sweep_file_through_run_py(tmp_path):
    from tests.conftest import run_cli

    toml = tmp_path / "sweep.toml"
    toml.write_text('models = ["resnet50"]\nsuts = ["ort-fp32"]\nofficial = "false"\n')
    yaml = tmp_path / "sweep.yaml"
    yaml.write_text("models: [resnet50]\nsuts: [ort-fp32\n")
    for path, needle in ((toml, f"{toml}:3: official = 'false'"), (yaml, f"{yaml}:")):
        proc = run_cli("sweep", str(path), "--output", str(tmp_path / "out"))
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1 and needle in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


def test_single_stream_cells_run_batch_one_only_without_extra_cells():
    spec = build_spec({"models": "resnet50", "suts": "ort-fp32", "scenarios": "SingleStream",
                       "batch_sizes": "1,8,32", "accuracy": False})
    assert [(c.scenario, c.batch_size) for c in cells(spec)] == [("SingleStream", 1)]


def test_batch_sizes_checked_against_samples_before_any_cell():
    with pytest.raises(UserError, match="--batch-sizes 100000 is more than the 1536 images"):
        build_spec({"models": "resnet50", "suts": "ort-fp32", "batch_sizes": "8,100000"})


def test_ensembles_sweep_with_their_members_alone_and_each_mode() -> None:
    spec = build_spec({"models": "efficientnet-lite0", "suts": "ort-fp32",
                       "ensembles": ["efficientnet-lite0@ort-fp32, efficientnet-lite0@ort-int8"],
                       "scenarios": "Offline", "repeats": 2})
    assert spec.ensembles == ["efficientnet-lite0@ort-fp32,efficientnet-lite0@ort-int8"]
    ids = [c.id for c in cells(spec)]
    name = "efficientnet-lite0@ort-fp32+efficientnet-lite0@ort-int8"
    assert ids == [
        "efficientnet-lite0/ort-fp32/accuracy", "efficientnet-lite0/ort-fp32/Offline-b8-r1",
        # ort-fp32 is in the product already; ort-int8 is added as the baseline
        "efficientnet-lite0/ort-int8/accuracy", "efficientnet-lite0/ort-int8/Offline-b8-r1",
        f"{name}/ensemble-sequential/accuracy", f"{name}/ensemble-sequential/Offline-b8-r1",
        f"{name}/ensemble-concurrent/Offline-b8-r1",
        "efficientnet-lite0/ort-fp32/Offline-b8-r2", "efficientnet-lite0/ort-int8/Offline-b8-r2",
        f"{name}/ensemble-sequential/Offline-b8-r2", f"{name}/ensemble-concurrent/Offline-b8-r2"]
    ensemble = [c for c in cells(spec) if c.ensemble]
    assert {c.ensemble_mode for c in ensemble} == {"sequential", "concurrent"}
    assert all(c.ensemble == spec.ensembles[0] for c in ensemble)


@pytest.mark.parametrize(("settings", "named"), [
    ({"ensembles": "efficientnet-lite0@ort-fp32"}, "at least two"),
    ({"ensembles": "resnet50@ort-fp32,resnet50@ort-int8", "ensemble_modes": "parallel"},
     "unknown ensemble mode 'parallel'"),
    ({"scenarios": "Offline"}, "--ensemble"),
])
def test_bad_ensemble_settings_are_one_line(settings: dict, named: str) -> None:
    with pytest.raises(UserError, match=named):
        build_spec(settings)


def test_a_sweep_file_lists_ensembles(tmp_path) -> None:
    file = tmp_path / "sweep.toml"
    file.write_text('ensembles = ["efficientnet-lite0@ort-fp32,efficientnet-lite0@ort-int8"]\n'
                    'ensemble_modes = "concurrent"\nscenarios = ["SingleStream"]\n')
    spec = build_spec(load_sweep_file(str(file)))
    assert spec.ensemble_modes == ["concurrent"] and spec.models == [] and spec.suts == []
    assert [c.sut for c in cells(spec) if c.ensemble] == ["ensemble-concurrent"] * 2


def test_cluster_and_placement_settings() -> None:
    spec = build_spec({"models": "resnet50", "suts": "ort-fp32", "cluster": "auto",
                       "placement": "tflite-*:arch=aarch64,isa=dotprod"})
    assert spec.cluster == "auto" and spec.placement == ["tflite-*:arch=aarch64,isa=dotprod"]
    spec = build_spec({"models": "resnet50", "suts": "ort-fp32",
                       "cluster": "ray://head.lab:10001",
                       "placement": ["ort-*:node=box", "ort-*:node=box"]})
    assert spec.placement == ["ort-*:node=box"]
    assert build_spec({"models": "resnet50", "suts": "ort-fp32"}).cluster == ""


@pytest.mark.parametrize("settings, named", [
    ({"placement": "ort-*:node=box"}, "add --cluster auto"),
    ({"cluster": "auto", "placement": "ort-*:cpu=fast"}, "unknown requirement 'cpu=fast'"),
    ({"cluster": "head.lab"}, "--cluster head.lab: use auto"),
    ({"cluster": "http://head.lab:8265"}, "use auto"),
])
def test_bad_cluster_settings_are_one_line(settings: dict, named: str) -> None:
    with pytest.raises(UserError) as error:
        build_spec({"models": "resnet50", "suts": "ort-fp32", **settings})
    assert named in str(error.value) and "\n" not in str(error.value)


def test_a_sweep_file_names_its_cluster_and_rules(tmp_path) -> None:
    file = tmp_path / "fleet.toml"
    file.write_text('models = "resnet50"\nsuts = "ort-fp32"\ncluster = "auto"\n'
                    'placement = ["ort-*:arch=x86_64", "tflite-*:board=raspberry-pi-5"]\n')
    spec = build_spec(load_sweep_file(str(file)))
    assert spec.placement == ["ort-*:arch=x86_64", "tflite-*:board=raspberry-pi-5"]


@pytest.mark.parametrize("suffix, line, needle", [
    (".toml", "seconds = 0", "seconds = 0 is out of range; seconds must be a number > 0"),
    (".toml", "seconds = nan", "seconds = nan is out of range"),
    (".toml", "timeout = -1.5", "timeout = -1.5 is out of range"),
    (".toml", "batch-sizes = [8, 0]", "batch_sizes = 0 is out of range"),
    (".toml", "repeats = 0", "repeats = 0 is out of range; repeats must be a whole number >= 1"),
    (".yaml", "seconds: 0", "seconds = 0 is out of range"),
    (".yaml", "threads: -1", "threads = -1 is out of range"),
])
def test_values_out_of_range_name_file_key_and_line(tmp_path, suffix, line, needle):
    path = tmp_path / f"sweep{suffix}"
    head = ('models = ["resnet50"]\nsuts = "ort-fp32"\n' if suffix == ".toml"
            else "models: [resnet50]\nsuts: ort-fp32\n")
    path.write_text(f"# my sweep\n{head}{line}\n")
    with pytest.raises(UserError) as info:
        load_sweep_file(str(path))
    message = str(info.value)
    assert f"sweep file {path}:4: " in message and needle in message, message
    assert "\n" not in message
