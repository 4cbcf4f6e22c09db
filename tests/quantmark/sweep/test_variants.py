"""SUT options as a sweep dimension: flags and files, one cell per value, one-line refusals."""

from __future__ import annotations

import json
from argparse import Namespace

import pytest

from quantmark.ground.errors import UserError
from quantmark.sweep.plan import Cell, build_spec, cells, load_sweep_file, spec_from_args
from quantmark.sweep.variants import from_table, parse_flags


def _args(**given: object) -> Namespace:
    """The sweep verb's namespace: a flag not given is None (its file's value stands)."""
    names = ("file", "models", "suts", "ensembles", "scenarios", "batch_sizes", "repeats",
             "output", "seconds", "official", "accuracy", "timeout", "threads", "workers",
             "model_path", "sut_option", "dataset_path", "calibration_list", "user_conf",
             "cluster", "placement")
    return Namespace(**{**{name: None for name in names}, **given}, retry_failed=False,
                     verb="sweep")


def test_flag_values_split_on_commas_and_a_repeated_key_gathers_them():
    assert parse_flags(["ov_api=sync,async"]) == {"ov_api": ["sync", "async"]}
    assert parse_flags(["ov_api=sync", " ov_api = async ,sync"]) == {"ov_api": ["sync", "async"]}
    for bad in ("ov_api", "=sync", "ov_api=", "ov_api= , "):
        with pytest.raises(UserError, match="write KEY=VALUE or KEY=V1,V2") as info:
            parse_flags([bad])
        assert "\n" not in str(info.value)


def test_each_value_is_its_own_cell_for_the_suts_that_read_the_key():
    spec = spec_from_args(_args(models="mobilenetv2", suts="ov-int8,ort-int8",
                                sut_option=["ov_api=sync,async"], scenarios="SingleStream"), {})
    assert spec.sut_options == {"ov_api": ["sync", "async"]}
    plan = cells(spec)
    assert [c.id for c in plan] == [
        "mobilenetv2/ov-int8+ov_api=sync/accuracy",
        "mobilenetv2/ov-int8+ov_api=sync/SingleStream-b1-r1",
        "mobilenetv2/ov-int8+ov_api=async/accuracy",
        "mobilenetv2/ov-int8+ov_api=async/SingleStream-b1-r1",
        "mobilenetv2/ort-int8/accuracy", "mobilenetv2/ort-int8/SingleStream-b1-r1"]
    assert {c.sut_options for c in plan if c.sut == "ov-int8"} == {
        (("ov_api", "sync"),), (("ov_api", "async"),)}
    assert all(c.sut_options == () for c in plan if c.sut == "ort-int8")


def test_two_keys_give_every_combination():
    spec = build_spec({"models": "mobilenetv2", "suts": "tflite-int8", "accuracy": False,
                       "scenarios": "SingleStream",
                       "sut_options": {"tflite_invoke": ["batched", "per-sample"],
                                       "tflite_quantize": "at-load,per-call"}})
    ids = [c.id for c in cells(spec)]
    assert len(ids) == len(set(ids)) == 4
    assert ("mobilenetv2/tflite-int8+tflite_invoke=per-sample+tflite_quantize=at-load/"
            "SingleStream-b1-r1") in ids


def test_a_cell_round_trips_through_a_manifest_entry_with_its_options():
    spec = build_spec({"models": "mobilenetv2", "suts": "ov-int8", "scenarios": "Offline",
                       "sut_option": ["ov_api=async"]})
    for cell in cells(spec):
        back = Cell.from_dict(json.loads(json.dumps({**cell.to_dict(), "status": "ok"})))
        assert back == cell and back.id == cell.id
        assert cell.to_dict()["sut_options"] == {"ov_api": "async"}
    old = {"model": "m", "sut": "ov-int8", "scenario": "Offline", "batch_size": 8}
    assert Cell.from_dict(old).sut_options == ()  # an entry written before options


@pytest.mark.parametrize("settings, needles", [
    ({"suts": "ort-int8,ort-fp32", "sut_option": ["ov_api=async"]},
     ["sut option ov_api: no SUT of the sweep (ort-fp32, ort-int8) reads it; their options: "
      "none"]),
    ({"suts": "ov-int8,ort-int8", "sut_option": ["ov_apii=async"]},
     ["sut option ov_apii:", "(ov-int8, ort-int8)", "their options: ov_api (sync, async)"]),
    ({"suts": "ov-fp32,ov-int8", "sut_option": ["ov_api=sync,fast"]},
     ["sut option ov_api=fast: ov-fp32, ov-int8 take ov_api = sync or async"]),
    ({"suts": "ov-int8", "sut_options": {"ensemble_member_timeout_s": 5}},
     ["no SUT of the sweep (ov-int8) reads it"]),
    ({"suts": "ov-int8", "sut_options": {"repeats": 2}},
     ["repeats is a sweep setting: in a TOML file put [sut_options] after the other keys"]),
])
def test_an_option_no_sut_reads_or_a_refused_value_is_one_line(settings, needles):
    with pytest.raises(UserError) as info:
        build_spec({"models": "mobilenetv2", **settings})
    message = str(info.value)
    assert all(needle in message for needle in needles), message
    assert "\n" not in message


def test_an_ensemble_variant_runs_with_its_members_options_and_its_own_timeout():
    spec = build_spec({"ensembles": "mobilenetv2@ov-int8,resnet50@ort-int8",
                       "ensemble_modes": "sequential", "scenarios": "Offline",
                       "accuracy": False,
                       "sut_options": {"ov_api": "sync,async", "ensemble_member_timeout_s": 30}})
    by_sut = {}
    for cell in cells(spec):
        by_sut.setdefault(cell.sut, []).append(dict(cell.sut_options))
    assert by_sut["ov-int8"] == [{"ov_api": "sync"}, {"ov_api": "async"}]  # a member alone
    assert by_sut["ort-int8"] == [{}]
    assert by_sut["ensemble-sequential"] == [
        {"ensemble_member_timeout_s": "30", "ov_api": "sync"},
        {"ensemble_member_timeout_s": "30", "ov_api": "async"}]
    with pytest.raises(UserError, match="ensemble_member_timeout_s=-1: give seconds > 0"):
        build_spec({"ensembles": "mobilenetv2@ov-int8,resnet50@ort-int8",
                    "sut_option": ["ensemble_member_timeout_s=-1"]})


@pytest.mark.parametrize("name, text", [
    ("sweep.toml", 'models = "mobilenetv2"\nsuts = ["ov-int8"]\nworkers = 2\n'
                   '[sut_options]\nov_api = ["sync", "async"]\n'),
    ("inline.toml", 'models = "mobilenetv2"\nsuts = ["ov-int8"]\nworkers = 2\n'
                    'sut_options = {ov_api = "sync,async"}\n'),
    ("sweep.yaml", "models: mobilenetv2\nsuts: [ov-int8]\nworkers: 2\n"
                   "sut_options: {ov_api: [sync, async]}\n"),
    ("block.yml", "models: mobilenetv2\nsuts: [ov-int8]\nworkers: 2\nsut-options:\n"
                  "  ov_api:\n    - sync\n    - async\n"),
])
def test_a_sweep_file_sets_the_options_and_a_flag_replaces_its_key(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    settings = load_sweep_file(str(path))
    spec = spec_from_args(_args(), settings)
    assert spec.sut_options == {"ov_api": ["sync", "async"]} and spec.workers == 2
    spec = spec_from_args(_args(sut_option=["ov_api=async"], workers=0), settings)
    assert spec.sut_options == {"ov_api": ["async"]} and spec.workers == 0


@pytest.mark.parametrize("text, line, needle", [
    ('sut_options = "ov_api=async"', 4, "sut_options = 'ov_api=async' is a string; "
                                        "sut_options must be a table of OPTION = a value or "
                                        "a list of values"),
    ("[sut_options]\nov_api = true", 4, "sut_options.ov_api = True is a boolean"),
    ("[sut_options]\nov_api = []", 4, "sut_options.ov_api = [] is a list"),
    ("workers = -1", 4, "workers = -1 is out of range; workers must be a whole number >= 0"),
    ('workers = "2"', 4, "workers = '2' is a string; workers must be a whole number"),
    ("model_path = 3", 4, "model_path = 3 is a whole number; model_path must be a string"),
])
def test_bad_option_settings_in_a_file_name_the_key_and_its_line(tmp_path, text, line, needle):
    path = tmp_path / "sweep.toml"
    path.write_text(f'# options\nmodels = ["mobilenetv2"]\nsuts = "ov-int8"\n{text}\n')
    with pytest.raises(UserError) as info:
        load_sweep_file(str(path))
    message = str(info.value)
    assert f"sweep file {path}:{line}: {needle}" in message, message
    assert "\n" not in message


def test_a_layer_kept_in_float_is_a_variant_of_the_suts_that_can_and_a_safe_folder():
    """``keep_float`` takes any layer name, for the INT8 SUTs whose framework re-quantizes
    with layers excluded; a name with "/" (OpenVINO's) is a short hash in the folder."""
    spec = spec_from_args(_args(models="mobilenetv2", suts="ov-int8,ort-fp32",
                                sut_option=["keep_float=node_conv2d/WithoutBiases"],
                                scenarios="SingleStream"), {})
    plan = cells(spec)
    mixed = [c for c in plan if c.sut == "ov-int8"]
    assert {c.sut_options for c in mixed} == {(("keep_float", "node_conv2d/WithoutBiases"),)}
    assert all(c.sut_options == () for c in plan if c.sut == "ort-fp32")
    folder = mixed[0].id.split("/")[1]
    prefix = "ov-int8+keep_float="
    assert folder.startswith(prefix + "h") and len(folder) == len(prefix) + 13
    with pytest.raises(UserError, match="no SUT of the sweep .ort-fp32. can keep layers"):
        cells(spec_from_args(_args(models="mobilenetv2", suts="ort-fp32",
                                   sut_option=["keep_float=conv1"]), {}))


def test_keep_float_is_one_point_per_flag_or_list_item_as_run_py_reads_it():
    """``keep_float=a,b`` keeps both layers in float in one point (as ``run.py`` does); more
    points are more flags, or items of a file's list."""
    flags = parse_flags(["keep_float=conv1, conv2", "keep_float=conv3", "ov_api=sync,async"])
    assert flags == {"keep_float": ["conv1,conv2", "conv3"], "ov_api": ["sync", "async"]}
    assert from_table({"keep_float": ["conv1,conv2", "conv3"]}) == {
        "keep_float": ["conv1,conv2", "conv3"]}
    spec = spec_from_args(_args(models="mobilenetv2", suts="ov-int8",
                                sut_option=["keep_float=conv1,conv2", "keep_float=conv3"],
                                scenarios="SingleStream"), {})
    assert {c.sut_options for c in cells(spec)} == {(("keep_float", "conv1,conv2"),),
                                                    (("keep_float", "conv3"),)}
