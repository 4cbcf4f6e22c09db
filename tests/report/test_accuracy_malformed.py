"""`python -m quantmark.report.accuracy` on a malformed accuracy log: one line on stderr and
exit 2, never a traceback; a response that decodes to NaN is a wrong answer, not a crash."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from quantmark.report.accuracy import compute_accuracy
from tests.conftest import ROOT

GOOD = np.array([3.0], np.float32).tobytes().hex().upper()

MALFORMED = {
    "non-hex data": [{"seq_id": 0, "qsl_idx": 0, "data": "ZZ004040"}],
    "odd-length data": [{"seq_id": 0, "qsl_idx": 0, "data": GOOD[:-1]}],
    "numeric data": [{"seq_id": 0, "qsl_idx": 0, "data": 5}],
    "null data": [{"seq_id": 0, "qsl_idx": 0, "data": None}],
    "list data": [{"seq_id": 0, "qsl_idx": 0, "data": [GOOD]}],
    "malformed duplicate": [{"seq_id": 0, "qsl_idx": 0, "data": GOOD},
                            {"seq_id": 1, "qsl_idx": 0, "data": "xyz"}],
    "text qsl_idx": [{"seq_id": 0, "qsl_idx": "zero", "data": GOOD}],
    "negative qsl_idx": [{"seq_id": 0, "qsl_idx": -1, "data": GOOD}],
    "missing keys": [{"seq_id": 0, "qsl_idx": 0}],
    "missing qsl_idx": [{"seq_id": 0, "qsl_idx": 0, "data": GOOD}, {"seq_id": 1, "data": GOOD}],
    "entry not an object": [{"seq_id": 0, "qsl_idx": 0, "data": GOOD}, [1, GOOD]],
    "not a list": {"qsl_idx": 0, "data": GOOD},
    "not JSON": "[{\"qsl_idx\": 0, \"data\": ",
}

WHAT = {"non-hex data": "not hex bytes", "odd-length data": "not hex bytes",
        "numeric data": "not a hex string", "null data": "not a hex string",
        "list data": "not a hex string", "malformed duplicate": "not hex bytes",
        "text qsl_idx": "not a sample index", "negative qsl_idx": "not a sample index",
        "missing keys": "has no data", "missing qsl_idx": "has no qsl_idx",
        "entry not an object": "is list"}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_log_is_one_line_and_exit_2(case, tmp_path):
    log = tmp_path / "mlperf_log_accuracy.json"
    content = MALFORMED[case]
    log.write_text(content if isinstance(content, str) else json.dumps(content))
    val_map = tmp_path / "val_map.txt"
    val_map.write_text("img_0.JPEG 3\nimg_1.JPEG 1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "quantmark.report.accuracy", "--mlperf-accuracy-file", str(log),
         "--imagenet-val-file", str(val_map)], capture_output=True, text=True, cwd=ROOT,
        timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert str(log) in lines[0] and proc.stdout == ""
    if isinstance(content, list):  # the entry is named, and what is wrong with it
        assert f"entry {len(content) - 1}" in lines[0], lines[0]
        assert WHAT[case] in lines[0], lines[0]


def test_a_nan_or_infinite_class_is_wrong_not_a_crash(tmp_path):
    log = tmp_path / "mlperf_log_accuracy.json"
    entries = [{"seq_id": i, "qsl_idx": i, "data": np.array([v], np.float32).tobytes().hex()}
               for i, v in enumerate([np.nan, np.inf, 2.0])]
    log.write_text(json.dumps(entries))
    result = compute_accuracy(log, [0, 1, 2])
    assert (result.good, result.total) == (1, 3)
