"""A report refused for having nothing to show (exit 2) writes no file of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quantmark.ground.errors import UserError
from tests.report.loadgen_runs import loadgen_run


def _accuracy_only(root: Path) -> Path:
    folder = loadgen_run(root / "box-ort-fp32" / "m" / "Offline" / "accuracy", "Offline",
                         mode="AccuracyOnly")
    (folder / "results.json").write_text(json.dumps({
        "config": {"sut": "ort-fp32", "model": "m", "scenario": "Offline", "mode": "accuracy",
                   "batch_size": 8},
        "accuracy": {"top1": 71.0, "good": 71, "total": 100},
        "machine": {"hostname": "box"}, "settings": {"mode": "quick"}}))
    return root


def test_report_output_of_accuracy_runs_only_is_refused_before_writing(tmp_path: Path) -> None:
    root = _accuracy_only(tmp_path / "results")
    out = tmp_path / "report"
    from quantmark.commands.report import report

    with pytest.raises(UserError) as raised:  # run.py: one line, exit 2
        report([str(root)], str(out))
    message = str(raised.value)
    assert "only 1 accuracy run(s)" in message and "no report was written" in message
    assert not [path for path in out.rglob("*") if path.is_file()]
