"""The accuracy tool on hand-made LoadGen accuracy logs: duplicates, missing indices, the
official first line, the hash line and the command line."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from quantmark.ground.errors import UserError
from quantmark.report.accuracy import accuracy_text, compute_accuracy, read_val_map_labels
from tests.conftest import ROOT


def hexf(value: float) -> str:
    return np.array([value], np.float32).tobytes().hex().upper()


def write_log(path: Path, pairs: list[tuple[int, float]]) -> Path:
    entries = [{"seq_id": n, "qsl_idx": i, "data": hexf(v)} for n, (i, v) in enumerate(pairs)]
    path.write_text(json.dumps(entries))
    return path


def write_val_map(path: Path, labels: list[int]) -> Path:
    path.write_text("".join(f"img_{i:05d}.JPEG {label}\n" for i, label in enumerate(labels)))
    return path


def test_duplicates_count_once_first_response_wins(tmp_path):
    log = write_log(tmp_path / "acc.json", [(0, 5), (1, 2), (0, 9), (2, 0), (1, 1)])
    result = compute_accuracy(log, [5, 1, 0])
    assert (result.good, result.total, result.duplicates) == (2, 3, 2)
    assert result.line() == "accuracy=66.667%, good=2, total=3"


def test_missing_indices_are_counted_against_the_expected_size(tmp_path):
    log = write_log(tmp_path / "acc.json", [(0, 5), (3, 7)])
    result = compute_accuracy(log, [5, 1, 0, 7, 4], expected_count=5)
    assert (result.good, result.total, result.missing) == (2, 2, 3)


def test_index_beyond_the_labels_is_wrong_not_a_crash(tmp_path):
    log = write_log(tmp_path / "acc.json", [(0, 5), (10, 5)])
    assert compute_accuracy(log, [5]).good == 1


def test_hash_line_is_sha256_of_the_full_log(tmp_path):
    log = write_log(tmp_path / "acc.json", [(0, 5)])
    text = accuracy_text(compute_accuracy(log, [5]), log)
    first, second = text.splitlines()
    assert first == "accuracy=100.000%, good=1, total=1"
    assert second == "hash=" + hashlib.sha256(log.read_bytes()).hexdigest()


def test_val_map_is_read_in_line_order(tmp_path):
    assert read_val_map_labels(write_val_map(tmp_path / "val_map.txt", [3, 999, 0])) == \
        [3, 999, 0]


def test_bad_logs_are_one_line_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match="cannot read accuracy log"):
        compute_accuracy(bad, [0])
    bad.write_text(json.dumps({"qsl_idx": 0}))
    with pytest.raises(UserError, match="not a LoadGen accuracy log"):
        compute_accuracy(bad, [0])


def test_command_line_writes_accuracy_txt_and_flags_missing(tmp_path):
    log = write_log(tmp_path / "acc.json", [(0, 5), (1, 1), (1, 1)])
    val_map = write_val_map(tmp_path / "val_map.txt", [5, 2, 0])
    out = tmp_path / "accuracy.txt"
    command = [sys.executable, "-m", "quantmark.report.accuracy", "--mlperf-accuracy-file",
               str(log), "--imagenet-val-file", str(val_map), "--output", str(out)]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().splitlines()[0] == "accuracy=50.000%, good=1, total=2"
    assert "1 duplicate" in proc.stderr
    proc = subprocess.run([*command, "--expected-count", "3"], capture_output=True, text=True,
                          cwd=ROOT)
    assert proc.returncode == 1
    assert "1 of 3 samples have no response" in proc.stderr
