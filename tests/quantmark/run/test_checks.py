"""The parent's checks before a child runs: every bad input is one line and exit code 2, named
as what it is (a directory, a symlink loop, a file where a folder goes), never a traceback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from quantmark.ground.errors import UserError
from quantmark.ground.paths import component_problem, path_problem
from quantmark.run.checks import available_memory, check_batch_fits, check_model_path
from tests.conftest import run_cli

RUN = ("--scenario", "Offline", "--sut", "ort-fp32")


def one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit code 2, one error line holding every needle, no traceback. Progress logged before
    the check (``[quantmark.qsl] generating the built-in dataset``, when this test is the first
    to need it) is not the error."""
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("[quantmark.")]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, proc.stderr)
    return lines[0] + "\n"


@pytest.fixture
def loop(tmp_path: Path) -> Path:
    """``a`` -> ``b`` -> ``a``."""
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    return tmp_path / "a"


def test_batch_larger_than_the_samples(tmp_path):
    one_line_error(run_cli(*RUN, "--batch-size", "100000", "--output", str(tmp_path)),
                   "--batch-size 100000", "1536 images", "1024 performance samples",
                   "--batch-size 1536 or less")
    assert not list(tmp_path.iterdir())  # refused before anything ran


def test_batch_larger_than_the_memory(tmp_path):
    """Within the samples (a 50,000-image folder) but not within MemAvailable."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:  2000000 kB\nMemAvailable:  1048576 kB\n")  # 1 GiB
    dataset = tmp_path / "imagenet"
    dataset.mkdir()
    (dataset / "val_map.txt").write_text("".join(f"i{n}.jpg 0\n" for n in range(50000)))
    check_batch_fits(256, "resnet50", str(dataset), meminfo)  # 0.6 GB of inputs: fits
    with pytest.raises(UserError, match=r"--batch-size 2048 needs at least 4\.6 GiB .* 1\.0 "
                                        r"GiB of memory available") as caught:
        check_batch_fits(2048, "resnet50", str(dataset), meminfo)
    assert "\n" not in str(caught.value)
    assert available_memory(tmp_path / "no-meminfo") is None  # not Linux: no memory check


def test_single_stream_takes_batch_one_only(tmp_path):
    one_line_error(run_cli("--scenario", "SingleStream", "--sut", "ort-fp32", "--batch-size",
                           "8", "--output", str(tmp_path)),
                   "--batch-size 8 with SingleStream", "batch 1 only")


def test_directory_where_a_file_goes(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    one_line_error(run_cli(*RUN, "--model-path", str(folder)), f"--model-path {folder}",
                   "is a directory", "tf-* and tflite-*")
    one_line_error(run_cli(*RUN, "--calibration-list", str(folder)),
                   f"--calibration-list {folder} is a directory")
    one_line_error(run_cli(*RUN, "--user-conf", str(folder)),
                   f"--user-conf {folder} is a directory")


def test_directory_that_is_not_a_saved_model(tmp_path):
    one_line_error(run_cli("--scenario", "Offline", "--sut", "tflite-fp32", "--model-path",
                           str(tmp_path)), "is a directory without saved_model.pb",
                   "SavedModel directory")


def test_saved_model_directory_passes_the_parent_check(tmp_path):
    (tmp_path / "saved_model.pb").write_bytes(b"")
    for sut in ("tf-fp32", "tf-xla", "tf-amp", "tflite-int8"):
        check_model_path(str(tmp_path), "resnet50", sut)
    with pytest.raises(UserError, match="is a directory .*; pass a model file"):
        check_model_path(str(tmp_path), "resnet50", "ov-fp32")


def test_symlink_loop(loop, tmp_path):
    one_line_error(run_cli(*RUN, "--model-path", str(loop)), "is a symlink loop")
    one_line_error(run_cli(*RUN, "--user-conf", str(loop)), "is a symlink loop")
    one_line_error(run_cli(*RUN, "--calibration-list", str(loop)), "is a symlink loop")


def test_missing_paths_say_so(tmp_path):
    for flag in ("--model-path", "--calibration-list", "--user-conf"):
        one_line_error(run_cli(*RUN, flag, str(tmp_path / "nope")),
                       f"{flag} {tmp_path / 'nope'} does not exist")


def test_output_that_is_a_file(tmp_path):
    existing = tmp_path / "results.txt"
    existing.write_text("mine")
    one_line_error(run_cli(*RUN, "--output", str(existing)), f"--output {existing} is a file")
    assert existing.read_text() == "mine"


def test_user_conf_checks_reach_the_command_line(tmp_path):
    binary = tmp_path / "model.onnx"
    binary.write_bytes(b"\x08\x07\x12\x00\x89PNG\xff\xfe")
    one_line_error(run_cli(*RUN, "--user-conf", str(binary)), "NUL byte", "binary")
    for value in ("0", "-5"):
        conf = tmp_path / f"qps{value}.conf"
        conf.write_text(f"*.Offline.target_qps = {value}\n")
        one_line_error(run_cli(*RUN, "--user-conf", str(conf)), f"{conf}:1",
                       f"target_qps = {value} is out of range", "a number > 0")
    conf = tmp_path / "latency.conf"
    conf.write_text("# SingleStream\n*.SingleStream.target_latency = -10\n")
    one_line_error(run_cli("--scenario", "SingleStream", "--sut", "ort-fp32", "--user-conf",
                           str(conf)), f"{conf}:2", "target_latency = -10 is out of range")


def test_user_conf_lines_loadgen_refuses_are_exit_2_before_running(tmp_path):
    """LoadGen refuses a comment after a value with a bare status -22, after the SUT was
    built; min_duration = 0 it takes, and measures nothing."""
    for text, needle in (("*.Offline.target_qps = 60 # my note\n", "a comment after the value"),
                         ("*.*.min_duration = 0\n", "min_duration = 0 is out of range")):
        conf = tmp_path / "user.conf"
        conf.write_text(f"# tuned\n{text}")
        one_line_error(run_cli(*RUN, "--user-conf", str(conf)), f"{conf}:2", needle)


def test_path_problem_words(tmp_path, loop):
    (tmp_path / "file").write_text("x")
    os.symlink(tmp_path / "gone", tmp_path / "dangling")
    os.mkfifo(tmp_path / "fifo")
    assert path_problem(tmp_path / "file") is None
    assert path_problem(tmp_path) == "is a directory"
    assert path_problem(tmp_path, "folder") is None
    assert path_problem(tmp_path / "file", "folder") == "is a file"
    assert path_problem(loop) == path_problem(loop, "folder") == "is a symlink loop"
    assert path_problem(tmp_path / "nope") == "does not exist"
    assert path_problem(tmp_path / "file" / "below") == "does not exist"
    assert "broken symlink" in path_problem(tmp_path / "dangling")
    assert "not a regular file" in path_problem(tmp_path / "fifo")


@pytest.mark.parametrize("name, problem", [
    ("Acme", None), ("Acme Inc.", None), ("my_lab-2", None),
    ("../../x", "path separator"), ("..", "relative"), (".", "relative"), ("a/b", "separator"),
    ("a\\b", "separator"), ("", "empty"), (".hidden", "hidden"), ("x\n", "control"),
    (" x", "blank"), ("x" * 256, "255 bytes"),
])
def test_names_that_become_one_folder(name, problem):
    found = component_problem(name)
    assert (found is None) if problem is None else (problem in found), found
