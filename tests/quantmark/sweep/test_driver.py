"""``run.py sweep`` end to end: cells in their own processes, explained rows, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, SMALL_SWEEP, run_cli, sigint_as_at_a_terminal

pytestmark = pytest.mark.slow


def manifest(folder: Path) -> dict:
    return json.loads((folder / "sweep.json").read_text())["cells"]


def test_small_sweep_runs_every_cell_and_explains_the_rest(small_sweep):
    proc, out = small_sweep
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    cells = manifest(out)
    ok = {k for k, v in cells.items() if v["status"] == "ok"}
    assert ok == {f"efficientnet-lite0/{sut}/{run}" for sut in ("ort-fp32", "ort-int8")
                  for run in ("accuracy", "Offline-b1-r1", "Offline-b8-r1",
                              "SingleStream-b1-r1")}
    for cell_id in ok:
        entry = cells[cell_id]
        run_dir = out / entry["run_dir"]
        assert (run_dir / "mlperf_log_detail.txt").is_file()
        assert run_dir.is_relative_to(out / "runs" / cell_id)
        assert (out / entry["log"]).is_file()  # the cell's console output is kept
        assert entry["peak_rss_mb"] > 100  # kernel-accounted, of the test process
        assert "energy" in entry["trackers"] and entry["trackers"]["energy_note"]
    unavailable = {k: v for k, v in cells.items() if v["status"] == "unavailable"}
    assert set(unavailable) == {f"efficientnet-lite0/trt-fp16/{run}" for run in
                                ("accuracy", "Offline-b1-r1", "Offline-b8-r1",
                                 "SingleStream-b1-r1")}
    assert all("needs an NVIDIA GPU" in v["message"] for v in unavailable.values())
    # the progress lines (no terminal here: one line per cell with an ETA) and the report
    assert proc.stdout.count("ETA") == len(cells)
    assert "unavailable efficientnet-lite0/trt-fp16/accuracy" in proc.stdout
    for name in ("report.md", "report.csv", "runs.csv", "report.html"):
        assert (out / name).is_file()


def test_sweep_refuses_other_settings_in_the_same_folder(small_sweep):
    _, out = small_sweep
    before = (out / "sweep.json").read_text()
    proc = run_cli("sweep", *SMALL_SWEEP[:-1], "3", "--output", str(out))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "other settings (seconds)" in proc.stderr
    assert (out / "sweep.json").read_text() == before


def test_sweep_bad_input_is_one_line(tmp_path):
    for args, message in ((("--models", "resnet50"), "needs --models and --suts"),
                          (("--models", "resnet50", "--suts", "ort-fp99"), "unknown SUT"),
                          (("--models", "resnet50", "--suts", "ort-fp32", "--repeats", "x"),
                           "invalid int value")):
        proc = run_cli("sweep", *args, "--output", str(tmp_path / "s"))
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and "Traceback" not in proc.stderr
        assert proc.stderr.strip().count("\n") == 0


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "run.py"), "sweep", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, preexec_fn=sigint_as_at_a_terminal)


def _wait_for(condition, process: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "sweep did not get there in time"
        time.sleep(0.2)


def _finished(out: Path) -> dict:
    try:
        return {k: v for k, v in manifest(out).items() if v["status"] == "ok"}
    except (OSError, ValueError):
        return {}


def _running(out: Path, cell_id: str) -> bool:
    """The cell's test process is in LoadGen (its run folder exists, not yet finished)."""
    return any(p.name.startswith(".run_1.tmp-") for p in (out / "runs" / cell_id).rglob("*"))


def test_interrupt_and_crash_lose_nothing_and_resume_reruns_nothing_finished(tmp_path,
                                                                             quantmark_cache):
    out = tmp_path / "sweep"
    args = ["--models", "efficientnet-lite0", "--suts", "ort-fp32", "--scenarios",
            "Offline,SingleStream", "--batch-sizes", "1,8", "--seconds", "2", "--no-accuracy",
            "--output", str(out)]
    env = dict(os.environ)
    first, second, third = ("efficientnet-lite0/ort-fp32/Offline-b1-r1",
                            "efficientnet-lite0/ort-fp32/Offline-b8-r1",
                            "efficientnet-lite0/ort-fp32/SingleStream-b1-r1")

    # 1. Ctrl-C (SIGINT to the whole foreground group) while the second cell runs
    process = _start(args, env)
    _wait_for(lambda: first in _finished(out) and _running(out, second), process)
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert list(_finished(out)) == [first]
    kept = _finished(out)[first]
    first_results = out / kept["run_dir"] / "results.json"
    first_mtime = first_results.stat().st_mtime_ns
    assert not (out / ".sweep.lock").exists()

    # 2. a crash: the sweep and its test process killed outright during a later cell
    process = _start(args, env)
    _wait_for(lambda: second in _finished(out) and _running(out, third), process)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert set(_finished(out)) == {first, second}
    second_finished_at = _finished(out)[second]["finished_at"]

    # 3. the same command again: only the killed cell runs
    proc = run_cli("sweep", *args)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "resuming" in proc.stdout and "2 of 3 cells already finished" in proc.stdout
    done = _finished(out)
    assert set(done) == {first, second, third}
    assert done[first]["finished_at"] == kept["finished_at"]
    assert done[second]["finished_at"] == second_finished_at
    assert first_results.stat().st_mtime_ns == first_mtime  # its run folder untouched
    assert f"ok {third}" in proc.stdout and f"ok {first}" not in proc.stdout
    # the killed cell's half-written folder was cleaned up by the rerun
    assert not any(p.name.startswith(".run_1.tmp-") for p in (out / "runs").rglob("*"))


def test_a_local_sweep_runs_an_ensemble_and_explains_one_it_cannot(trivial_plugin_path,
                                                                  quantmark_cache, tmp_path):
    """An ensemble cell's SUT (``ensemble-sequential``) is no registry SUT: its availability is
    its members'."""
    env = {"PYTHONPATH": os.pathsep.join([str(trivial_plugin_path),
                                          os.environ.get("PYTHONPATH", "")]),
           "QUANTMARK_CACHE": str(quantmark_cache)}
    out = tmp_path / "sweep"
    proc = run_cli("sweep", "--ensemble", "mobilenetv2@trivial-fp32,efficientnet-lite0@"
                   "trivial-faulty", "--ensemble", "mobilenetv2@trivial-fp32,resnet50@trt-fp16",
                   "--ensemble-modes", "sequential", "--scenarios", "Offline", "--no-accuracy",
                   "--seconds", "1", "--output", str(out), env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    cells = manifest(out)
    ensemble = cells["mobilenetv2@trivial-fp32+efficientnet-lite0@trivial-faulty/"
                     "ensemble-sequential/Offline-b8-r1"]
    assert ensemble["status"] == "ok", ensemble
    explained = cells["mobilenetv2@trivial-fp32+resnet50@trt-fp16/ensemble-sequential/"
                      "Offline-b8-r1"]
    if explained["status"] == "unavailable":  # no GPU here (on a GPU box with TensorRT it runs)
        assert explained["message"].startswith("resnet50@trt-fp16: needs an NVIDIA GPU")


def test_a_sut_option_is_a_sweep_dimension_recorded_by_each_cell(tmp_path, quantmark_cache):
    """``run.py sweep ... --sut-option ov_api=sync,async``: two cells, each run with its value
    (results.json config.sut_options), two rows of the report."""
    import csv

    out = tmp_path / "sweep"
    proc = run_cli("sweep", "--models", "mobilenetv2", "--suts", "ov-int8", "--sut-option",
                   "ov_api=sync,async", "--scenarios", "SingleStream", "--seconds", "1",
                   "--no-accuracy", "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = manifest(out)
    assert sorted(entry["status"] for entry in cells.values()) == ["ok", "ok"], cells
    for api in ("sync", "async"):
        entry = cells[f"mobilenetv2/ov-int8+ov_api={api}/SingleStream-b1-r1"]
        assert entry["sut_options"] == {"ov_api": api}
        results = json.loads((out / entry["run_dir"] / "results.json").read_text())
        assert results["config"]["sut_options"] == {"ov_api": api}
    rows = list(csv.DictReader((out / "report.csv").open()))
    assert sorted(r["sut"] for r in rows) == ["ov-int8 ov_api=async", "ov-int8 ov_api=sync"]
