"""What the jobs record as they promote their results, end to end through ``run.py``: a run
with repeats is one job with its interval, ``history`` lists each job of the series, and
``regress`` judges the newest against the rest, naming the noise it used."""

from __future__ import annotations

import json
import re

import pytest

from quantmark import cli
from quantmark.store import recording
from quantmark.store.results_store import open_store
from tests.quantmark.test_cli import tiny_onnx

pytestmark = pytest.mark.slow


def test_run_py_records_each_job_and_history_and_regress_read_them(tmp_path, monkeypatch,
                                                                     capsys):
    store = f"sqlite:///{tmp_path / 'results.sqlite'}"
    monkeypatch.setenv("QUANTMARK_STORE", store)
    model = tiny_onnx(tmp_path / "tiny.onnx")
    args = ["--scenario", "Offline", "--sut", "ort-fp32", "--model-path", str(model),
            "--output", str(tmp_path / "results"), "--repeats", "2", "--threads", "1"]
    try:
        for _ in range(2):
            assert cli.main(args) == 0
    finally:
        recording._close_all()
    with open_store(store) as opened:
        points = opened.points()
    assert len(points) == 2 and len({p.job_id for p in points}) == 2
    assert all(len(p.runs) + p.invalid_runs == 2 for p in points)
    assert all(p.environment["settings.threads"] == 1 for p in points)
    capsys.readouterr()
    assert cli.main(["history", "--store", store, "--sut", "ort-fp32"]) == 0
    listed = capsys.readouterr().out
    rows = [line for line in listed.splitlines() if re.match(r"^│ \d{4}-\d\d-\d\d ", line)]
    assert len(rows) == 2, listed  # each job, VALID or not, with its interval
    verdicts = tmp_path / "verdicts.json"
    code = cli.main(["regress", "--store", store, "--json", str(verdicts)])
    [verdict] = json.loads(verdicts.read_text())["verdicts"]
    assert code == (1 if verdict["verdict"] == "regressed" else 0)
    # the earlier job is the history, unless the interference monitor flagged it disturbed
    assert set(verdict["history_jobs"]) <= {points[0].job_id}
    # judged (the noise it used is named), or why not (a disturbed job is said, not judged)
    assert (verdict["noise"] or {}).get("text") or verdict["reason"]
