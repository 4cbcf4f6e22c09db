"""Finding the record files under a results folder, a run folder or a sweep."""

from __future__ import annotations

import json
import shutil

import pytest

from quantmark.ground.errors import UserError
from quantmark.store.record_walk import record_files
from tests.quantmark.store.run_folders import EXAMPLE_SWEEP, make_run


def test_a_results_folder_gives_its_runs_not_those_in_progress_or_failed(tmp_path):
    kept = make_run(tmp_path, sut="ort-fp32")
    for hidden in (".run_2.tmp-123", "run_3.failed"):
        shutil.copytree(kept, kept.parent / hidden)
    (tmp_path / "diag" / "diagnose-ort-fp32").mkdir(parents=True)
    (tmp_path / "diag" / "diagnose-ort-fp32" / "results.json").write_text("{}")
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "recommendation.json").write_text("{}")
    assert record_files(tmp_path) == [
        (tmp_path / "diag" / "diagnose-ort-fp32" / "results.json", None),
        (tmp_path / "rec" / "recommendation.json", None),
        (kept / "results.json", None)]
    assert record_files(kept) == [(kept / "results.json", None)]
    assert record_files(kept / "results.json") == [(kept / "results.json", None)]


def test_a_sweep_gives_every_run_with_its_cell():
    found = record_files(EXAMPLE_SWEEP)
    manifest = json.loads((EXAMPLE_SWEEP / "sweep.json").read_text())
    assert len(found) == len(manifest["cells"]) == 200
    assert sorted(cell for _, cell in found) == sorted(manifest["cells"])
    assert record_files(EXAMPLE_SWEEP / "sweep.json") == found


@pytest.mark.parametrize(("make", "problem"), [
    (lambda p: p / "nowhere", "does not exist"),
    (lambda p: p, "holds no quantmark record"),
])
def test_a_folder_that_is_no_results_folder_is_one_line(tmp_path, make, problem):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(UserError, match=problem) as refused:
        record_files(make(tmp_path))
    assert "pass a results folder, a run folder or a sweep folder" in str(refused.value)
