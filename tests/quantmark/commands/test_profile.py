"""``run.py profile`` as a user runs it: its folder, its typed record, its tables, a framework
without a profiler said in one line, and bad requests refused in one line."""

from __future__ import annotations

from pathlib import Path

from quantmark.ground.records import load_record
from tests.conftest import run_cli
from tests.quantmark.run.test_checks import one_line_error

QUICK = ("--model", "digits-cnn", "--iterations", "5", "--warmup", "1")


def test_a_profile_is_written_like_a_run(tmp_path: Path) -> None:
    proc = run_cli("profile", "--sut", "ort-int8", *QUICK, "--output", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = next(tmp_path.glob("*-ort-int8/digits-cnn/profile-ort-int8-vs-ort-fp32"))
    for name in ("results.json", "layers.csv", "profile.png"):
        assert (folder / name).is_file(), name
    record = load_record(folder / "results.json", kind="profile")
    assert record.against == "ort-fp32" and record.iterations == 5
    assert record.test["shares"]["int8_compute_share"] > 0
    assert record.reference["shares"]["int8_compute_share"] == 0
    convs = [row for row in record.layers if row["test"] and "Conv" in row["test"]["op_type"]]
    assert convs and all(row["reference"] for row in convs)  # every conv paired with FP32's
    assert "ort-int8: INT8 compute" in proc.stdout and "layers sum to" in proc.stdout


def test_a_framework_without_a_profiler_is_one_line_and_the_other_side_reports(tmp_path):
    proc = run_cli("profile", "--sut", "tf-fp32", "--against", "ort-fp32", *QUICK,
                   "--output", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "tf-fp32: not profiled: tensorflow (tf-fp32) has no per-layer profiler" in \
        proc.stdout
    assert "ort-fp32: INT8 compute 0%" in proc.stdout


def test_bad_requests_are_one_line(tmp_path: Path) -> None:
    out = ("--output", str(tmp_path))
    one_line_error(run_cli("profile", "--sut", "ort-fp32", *QUICK, *out), "against itself")
    one_line_error(run_cli("profile", "--sut", "ort-int8", "--model", "digits-cnn",
                           "--iterations", "1", *out), "--iterations must be at least 3")
    one_line_error(run_cli("profile", "--sut", "nope", *QUICK, *out), "nope")
