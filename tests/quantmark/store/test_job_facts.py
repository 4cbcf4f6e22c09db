"""Which job a record file belongs to, its figure and whether a figure may use it."""

from __future__ import annotations

import json
import shutil

import pytest

from quantmark.ground.errors import UserError
from quantmark.ground.records import RunRecord, UnreadableRecord
from quantmark.store.job_facts import (
    LATENCY,
    RATE,
    file_sha256,
    left_out,
    objective,
    read_job,
    sweep_cell_of,
)
from tests.quantmark.store.run_folders import EXAMPLE_SWEEP, make_run, template

PERCENTILES = {"50.00": 1_000_000, "90.00": 2_500_000, "99.00": 7_000_000}


@pytest.mark.parametrize(("scenario", "expected"), [
    ("SingleStream", 2.5), ("MultiStream", 7.0), ("Offline", 123.0), ("Server", 123.0)])
def test_the_figure_is_the_scenarios_objective(scenario, expected):
    summary = {"percentiles_ns": PERCENTILES, "samples_per_second": 123.0}
    assert objective(summary, scenario) == expected


def test_a_summary_without_the_objective_has_no_figure():
    assert objective({"percentiles_ns": {}}, "SingleStream") is None
    assert objective({}, "Offline") is None


@pytest.mark.parametrize(("summary", "why"), [
    ({"validity": "VALID", "metric_value": 3.0}, None),
    ({"validity": "INVALID", "metric_value": 3.0}, "INVALID"),
    ({"metric_value": 3.0}, "no validity recorded"),
    ({"validity": "VALID", "incomplete": "no summary"}, "incomplete: no summary"),
    ({"validity": "VALID", "metric_value": None}, "no official metric"),
])
def test_left_out_follows_the_validity_rule(summary, why):
    assert left_out(RunRecord(summary=summary)) == why


def test_a_plain_run_is_its_own_job_keyed_by_its_bytes(tmp_path):
    run = make_run(tmp_path, scenario="Offline", value=250.0)
    facts = read_job(run / "results.json")
    assert facts.kind == "run" and facts.job_key == facts.sha256
    assert facts.sha256 == file_sha256(run / "results.json") and len(facts.sha256) == 64
    assert (facts.series.metric, facts.value, facts.left_out) == (RATE, 250.0, None)
    assert facts.folder == str(run) and facts.machine == "vm" and facts.version == "0.1.0"


def test_runs_of_a_repeat_set_share_one_job_in_the_sets_folder(tmp_path):
    first = read_job(make_run(tmp_path, repeat=(1, 3, "abc")) / "results.json")
    second = read_job(make_run(tmp_path, repeat=(2, 3, "abc"), value=41.0) / "results.json")
    assert first.kind == second.kind == "repeat-set"
    assert first.job_key == second.job_key == "set:abc" and first.sha256 != second.sha256
    assert first.folder == second.folder == str(tmp_path / "vm-ov-bf16" / "resnet50" /
                                                "SingleStream" / "performance")
    assert (first.repeat_index, second.repeat_index, second.series.metric) == (1, 2, LATENCY)
    alone = read_job(make_run(tmp_path / "one", repeat=(1, 1, "xyz")) / "results.json")
    assert alone.kind == "run"  # a set of one is a run


def test_accuracy_and_audit_runs_are_jobs_without_a_figure(tmp_path):
    accuracy = tmp_path / "accuracy"
    shutil.copytree(EXAMPLE_SWEEP / "runs" / "resnet50" / "ov-bf16" / "accuracy" / "vm-ov-bf16"
                    / "resnet50" / "Offline" / "accuracy", accuracy)
    data = json.loads((accuracy / "results.json").read_text())
    data["accuracy"] = {"top1": 71.25}
    (accuracy / "results.json").write_text(json.dumps(data))
    facts = read_job(accuracy / "results.json")
    assert (facts.kind, facts.series, facts.detail) == ("accuracy", None, {"top1": 71.25})
    run = make_run(tmp_path / "audit")  # an audit's logs are a performance run's
    data = json.loads((run / "results.json").read_text())
    data["config"]["audit"] = "TEST04"
    (run / "results.json").write_text(json.dumps(data))
    facts = read_job(run / "results.json")
    assert (facts.kind, facts.series, facts.detail["test"]) == ("audit", None, "TEST04")


def test_a_run_of_a_sweep_is_the_cell_its_manifest_lists():
    run = (EXAMPLE_SWEEP / "runs" / "mobilenetv2" / "ort-fp16" / "Offline-b8-r2" /
           "vm-ort-fp16" / "mobilenetv2" / "Offline" / "performance" / "run_1")
    assert sweep_cell_of(run) == "mobilenetv2/ort-fp16/Offline-b8-r2"
    facts = read_job(run / "results.json")
    assert facts.kind == "sweep-cell" and facts.detail == {"cell": sweep_cell_of(run)}
    assert sweep_cell_of(EXAMPLE_SWEEP / "runs") is None


def test_a_manifest_or_sweep_kind_is_no_job_and_a_newer_record_is_refused(tmp_path):
    assert read_job(EXAMPLE_SWEEP / "sweep.json") is None
    data = template()
    data["schema"] = 99
    (tmp_path / "results.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match="schema 99, newer"):
        read_job(tmp_path / "results.json")
    (tmp_path / "results.json").write_text("{cut sho")
    with pytest.raises(UnreadableRecord):
        read_job(tmp_path / "results.json")
