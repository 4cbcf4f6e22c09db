"""The typed, versioned records: round trips, the previous main's records, refusals in one
line, and a run's interference read from the file its record names."""

from __future__ import annotations

import json
import shutil
from dataclasses import fields

import pytest

from quantmark.ground.errors import UserError
from quantmark.ground.records import (
    INTERFERENCE,
    RESULTS,
    SCHEMA_VERSION,
    DiagnosisRecord,
    InterferenceRecord,
    JobRecord,
    ProfileRecord,
    RunRecord,
    SweepManifest,
    TrainBenchRecord,
    UnreadableRecord,
    load_manifest,
    load_record,
    load_run,
    write_record,
)
from tests.conftest import ROOT, run_cli

PREVIOUS_MAIN = ROOT / "tests" / "report" / "data" / "previous_main"
PREVIOUS_RUN = PREVIOUS_MAIN / "vm-ort-fp32" / "mobilenetv2" / "Offline" / "performance" / "run_1"


def _one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text, text
    return text


def _run(**fields) -> RunRecord:
    return RunRecord(config={"sut": "ort-int8", "model": "mobilenetv2", "batch_size": 1},
                     system_id="host-ort-int8", summary={"validity": "VALID", "metric_value": 9.5},
                     times={"loadgen_started_at": 1000.0, "loadgen_ended_at": 1006.0},
                     repeat={"index": 2, "of": 3, "set": "s1"}, **fields)


def test_a_run_record_round_trips_with_its_kind_and_schema(tmp_path):
    record = _run(calibration={"hash": "abc", "count": 64}, interference_file=INTERFERENCE)
    write_record(tmp_path / RESULTS, record)
    on_disk = json.loads((tmp_path / RESULTS).read_text())
    assert on_disk["kind"] == "run" and on_disk["schema"] == SCHEMA_VERSION == 2
    assert "accuracy" not in on_disk and "ensemble" not in on_disk  # sections it lacks
    loaded = load_run(tmp_path / RESULTS)
    assert loaded == record and loaded.source == tmp_path / RESULTS
    assert (loaded.kind, loaded.validity, loaded.repeat_index) == ("run", "VALID", 2)


def test_every_kind_round_trips(tmp_path):
    records = {
        "diagnosis.json": DiagnosisRecord(model="m", sut="ort-int8", against="ort-fp32",
                                          samples=8, layers=[], worst=[], capture={"test": {}}),
        "train.json": TrainBenchRecord(
            framework="torch", model="m", precision="amp", device="cpu", batch_size=4,
            image_size=64, steps=3, warmup_steps=1, executed_precision="bf16 autocast",
            times={}, step_time_s={"median": 0.1}, images_per_s=40.0, memory={}, amp={},
            loss_first=7.0, loss_last=6.5, loss_finite=True, extra={"losses": [7.0, 6.5]}),
        "sweep.json": SweepManifest(settings={"quick": True}, cells={"a": {"status": "ok"}}),
        INTERFERENCE: InterferenceRecord(loadgen_started_at=None, summary={"disturbed": None}),
    }
    for name, record in records.items():
        write_record(tmp_path / name, record)
        assert load_record(tmp_path / name) == record, name
        assert load_record(tmp_path / name, record.kind).kind == record.kind


def test_the_previous_mains_record_loads_as_schema_2_and_keeps_what_it_held(tmp_path):
    """The committed fixture is a results.json the previous main wrote (no kind, no schema,
    the interference inline); it loads typed, and writes back the same fields."""
    raw = json.loads((PREVIOUS_RUN / RESULTS).read_text())
    assert "kind" not in raw and "schema" not in raw
    record = load_run(PREVIOUS_RUN / RESULTS)
    assert (record.kind, record.schema) == ("run", 2)
    assert record.config["sut"] == "ort-fp32" and record.system_id == "vm-ort-fp32"
    assert record.interference["disturbed"] is True and record.validity == "VALID"
    assert record.calibration is None and record.accuracy is None and record.extra == {}
    write_record(tmp_path / RESULTS, record)
    again = json.loads((tmp_path / RESULTS).read_text())
    assert {k: v for k, v in again.items() if k not in ("kind", "schema")} == {
        k: v for k, v in raw.items() if v is not None}


def test_keys_this_version_does_not_know_are_kept(tmp_path):
    path = tmp_path / RESULTS
    path.write_text(json.dumps({"kind": "run", "schema": 2, "config": {"sut": "x"},
                                "future_section": {"a": 1}}))
    record = load_run(path)
    assert record.extra == {"future_section": {"a": 1}}
    write_record(tmp_path / "again.json", record)
    assert json.loads((tmp_path / "again.json").read_text())["future_section"] == {"a": 1}


@pytest.mark.parametrize("content, needles", [
    ({"kind": "run", "schema": 3}, ["schema 3", "upgrade quantmark"]),
    ({"kind": "benchmark-of-the-future", "schema": 2}, ["'benchmark-of-the-future'",
                                                        "upgrade quantmark"]),
])
def test_a_newer_schema_or_an_unknown_kind_is_refused_in_one_line(tmp_path, content, needles):
    path = tmp_path / RESULTS
    path.write_text(json.dumps(content))
    with pytest.raises(UserError) as info:
        load_record(path)
    assert not isinstance(info.value, UnreadableRecord)  # never skipped by a reader
    text = _one_line(info.value)
    assert str(path) in text and all(needle in text for needle in needles), text


def test_another_kind_than_asked_is_refused_in_one_line(tmp_path):
    path = tmp_path / RESULTS
    write_record(path, SweepManifest())
    with pytest.raises(UserError) as info:
        load_record(path, kind="run")
    text = _one_line(info.value)
    assert str(path) in text and "sweep-manifest record" in text and "run record" in text


@pytest.mark.parametrize("content, needle", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "a JSON list"),
    (json.dumps({"schema": "two"}), "not a version number"),
    (json.dumps({"kind": "run", "schema": 2, "summary": "VALID"}), "field 'summary' is a str"),
    (json.dumps({"kind": "diagnosis", "schema": 2, "model": "m"}), "without sut, against"),
])
def test_an_unreadable_record_says_why_in_one_line(tmp_path, content, needle):
    path = tmp_path / RESULTS
    path.write_text(content)
    with pytest.raises(UnreadableRecord) as info:
        load_record(path)
    text = _one_line(info.value)
    assert str(path) in text and needle in text, text


def test_null_means_not_recorded(tmp_path):
    (tmp_path / RESULTS).write_text(json.dumps({"config": None, "calibration": None}))
    record = load_run(tmp_path / RESULTS)
    assert record.config == {} and record.calibration is None


def test_a_run_reads_the_interference_file_its_record_names(tmp_path):
    write_record(tmp_path / RESULTS, _run(interference_file=INTERFERENCE))
    assert load_run(tmp_path / RESULTS).interference is None  # the parent has not written it
    summary = {"disturbed": True, "why": ["other processes used 1.00 of 2 cores"]}
    write_record(tmp_path / INTERFERENCE, InterferenceRecord(loadgen_started_at=1000.0,
                                                             summary=summary))
    assert load_run(tmp_path / RESULTS).interference == summary
    # another run's figures (another LoadGen start) are not this run's
    write_record(tmp_path / INTERFERENCE, InterferenceRecord(loadgen_started_at=5.0,
                                                             summary=summary))
    assert load_run(tmp_path / RESULTS).interference is None
    # a broken file beside it: the interference is unknown, the run still loads
    (tmp_path / INTERFERENCE).write_text("{")
    assert load_run(tmp_path / RESULTS).interference is None


def test_a_dict_from_the_launcher_becomes_a_typed_record():
    found = RunRecord.of({"summary": {"validity": "INVALID"}, "run_dir": "/x/run_1"})
    assert found.validity == "INVALID" and found.extra == {"run_dir": "/x/run_1"}
    assert RunRecord.of(found) is found


def test_a_sweep_manifest_of_schema_1_names_no_kind_and_loads(tmp_path):
    assert load_manifest(tmp_path) is None
    (tmp_path / "sweep.json").write_text(json.dumps({"schema": 1, "settings": {"quick": True},
                                                     "cells": {}}))
    manifest = load_manifest(tmp_path)
    assert isinstance(manifest, SweepManifest) and manifest.settings == {"quick": True}


def test_run_py_report_refuses_a_newer_record_with_exit_2(tmp_path):
    folder = tmp_path / "results"
    shutil.copytree(PREVIOUS_MAIN, folder)
    record = next(folder.rglob(RESULTS))
    record.write_text(json.dumps({**json.loads(record.read_text()), "kind": "run",
                                  "schema": SCHEMA_VERSION + 1}))
    proc = run_cli("report", str(folder), timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"schema {SCHEMA_VERSION + 1}" in lines[0] and "upgrade quantmark" in lines[0]


def test_run_py_report_prints_the_table_of_a_folder_the_previous_main_made(tmp_path):
    folder = tmp_path / "results"
    shutil.copytree(PREVIOUS_MAIN, folder)
    proc = run_cli("report", str(folder), timeout=300, env={"COLUMNS": "250"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row = next(line for line in proc.stdout.splitlines() if "ort-fp32" in line)
    cells = [cell.strip() for cell in row.strip("│ ").split("│")]
    assert cells[:7] == ["ort-fp32", "fp32", "mobilenetv2", "Offline", "performance",
                         "quick", "VALID"], cells
    assert "62.33 samples/s" in cells and cells[-1] == "yes", cells  # disturbed, as it was
    assert "other processes disturbed this run" in proc.stdout
    csv = (folder / "report.csv").read_text().splitlines()
    assert len(csv) == 2 and ",ort-fp32,fp32,mobilenetv2,Offline,performance,quick,VALID" in csv[1]


TAIL = ("config", "system_id", "machine", "software", "times", "figure")
# every field a diagnosis and a profile wrote before their tail was declared once
DIAGNOSIS_FIELDS = ("model", "sut", "against", "samples", "layers", "worst", "capture", "damage",
                    "matched", "unmatched", "first_jump", "jump_rule", "exclusion", "describe",
                    "recovery", "recovery_failed", *TAIL)
PROFILE_FIELDS = ("model", "sut", "against", "batch_size", "iterations", "warmup",
                  "unsupported", "test", "reference", "layers", "slower", "references",
                  "against_model_path", "onnx_model", "vocabulary", "others", "side_by_side",
                  *TAIL)


@pytest.mark.parametrize("kind", [DiagnosisRecord, ProfileRecord])
def test_a_diagnosis_and_a_profile_inherit_one_tail(kind):
    assert issubclass(kind, JobRecord)
    own = set(vars(kind).get("__annotations__", {}))
    assert not own & set(TAIL), f"{kind.__name__} declares {own & set(TAIL)} again"
    # ``task``: added with tasks (None in the earlier files above, which load as before)
    assert (*TAIL, "task") == tuple(f.name for f in fields(JobRecord)
                                    if f.name not in ("schema", "extra", "source"))


@pytest.mark.parametrize("kind, names", [(DiagnosisRecord, DIAGNOSIS_FIELDS),
                                         (ProfileRecord, PROFILE_FIELDS)])
def test_records_an_earlier_version_wrote_load_typed_and_write_back_the_same(tmp_path, kind,
                                                                              names):
    """A file with every field an earlier quantmark wrote: each is a typed field (none lands
    in ``extra``), and writing it back changes nothing."""
    values = {"samples": 8, "batch_size": 4, "iterations": 20, "warmup": 5, "layers": [],
              "worst": [], "slower": [], "references": ["ort-fp32"], "damage": [],
              "side_by_side": [], "system_id": "host-ort-int8", "figure": "f.png",
              "first_jump": "conv1", "recovery_failed": "no", "exclusion": "nodes",
              "against_model_path": "ref.onnx", "onnx_model": "m.onnx", "vocabulary": "onnx"}
    data = {"kind": kind.KIND, "schema": SCHEMA_VERSION,
            **{name: values.get(name, {"from": name} if name not in ("model", "sut", "against")
                                else name) for name in names}}
    (tmp_path / RESULTS).write_text(json.dumps(data))
    record = load_record(tmp_path / RESULTS, kind.KIND)
    assert isinstance(record, kind) and record.extra == {}
    assert record.config == {"from": "config"} and record.times == {"from": "times"}
    write_record(tmp_path / "again.json", record)
    assert json.loads((tmp_path / "again.json").read_text()) == data
