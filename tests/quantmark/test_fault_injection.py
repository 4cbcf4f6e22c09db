"""Faults a run meets outside the SUT: a full disk while LoadGen logs, a file in the way, a
second run into the same folder, a run killed outright. None may lose the last good run or
end with exit code 0, and each is named in one line."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, run_cli

pytestmark = pytest.mark.slow

PR_SET_CHILD_SUBREAPER = 36
SUT, SCENARIO = "ort-fp32", "SingleStream"


@pytest.fixture(scope="module")
def short_conf(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("conf") / "short.conf"
    path.write_text("*.SingleStream.min_duration = 2000\n")
    return path


def _args(out: Path, conf: Path) -> list[str]:
    return ["--scenario", SCENARIO, "--sut", SUT, "--user-conf", str(conf), "--output", str(out)]


def _run_1(out: Path) -> Path:
    return next(out.glob(f"*/*/{SCENARIO}/performance/run_1"))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr, stderr[-3000:]
    return lines[-1]


def _userns_tmpfs_works() -> bool:
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-Urm", "sh", "-c",
                            "d=$(mktemp -d) && mount -t tmpfs -o size=1m tmpfs $d && umount $d"],
                           capture_output=True)
    return probe.returncode == 0


FILL_SCRIPT = """
set -u
mount -t tmpfs -o size=4m tmpfs "$OUT"
"$PY" "$RUN" "$@" > "$REPORT/first.out" 2> "$REPORT/first.err"; echo $? > "$REPORT/first.rc"
run1=$(ls -d "$OUT"/*/*/SingleStream/performance/run_1)
sha256sum "$run1/results.json" | cut -d' ' -f1 > "$REPORT/before.sha"
dd if=/dev/zero of="$OUT/fill" bs=4096 2>/dev/null   # until the disk is full
truncate -s -12k "$OUT/fill"                            # leave three pages: LoadGen starts
"$PY" "$RUN" "$@" > "$REPORT/second.out" 2> "$REPORT/second.err"; echo $? > "$REPORT/second.rc"
sha256sum "$run1/results.json" | cut -d' ' -f1 > "$REPORT/after.sha"
ls -a "$(dirname "$run1")" > "$REPORT/listing"
"""


def test_a_full_disk_while_loadgen_logs_keeps_the_last_good_run(tmp_path, quantmark_cache,
                                                                short_conf):
    """On a small tmpfs (in a user and mount namespace of its own), filled up between a good
    run and the next: the next run's logs come out truncated. It must say the disk is full
    (exit 2), keep its logs as run_1.failed, and leave the good run_1 as it was. Where no
    namespace can be made, the same fault is injected with a file-size limit (ulimit -f)."""
    out, report = tmp_path / "out", tmp_path / "report"
    out.mkdir()
    report.mkdir()
    if _userns_tmpfs_works():
        env = {**os.environ, "OUT": str(out), "REPORT": str(report), "PY": sys.executable,
               "RUN": str(ROOT / "run.py")}
        subprocess.run(["unshare", "-Urm", "bash", "-c", FILL_SCRIPT, "fill",
                        *_args(out, short_conf)], env=env, timeout=900, check=True)
        read = (lambda name: (report / name).read_text())  # noqa: E731
        assert read("first.rc").strip() == "0", read("first.err")[-3000:]
        rc, stderr = int(read("second.rc")), read("second.err")
        before, after, listing = read("before.sha"), read("after.sha"), read("listing").split()
        expected = "no space left on the disk"
    else:
        first = run_cli(*_args(out, short_conf))
        assert first.returncode == 0, first.stderr[-3000:]
        before = _digest(_run_1(out) / "results.json")
        second = _run_with_file_size_limit(_args(out, short_conf), limit_bytes=16 * 1024)
        rc, stderr = second.returncode, second.stderr
        after = _digest(_run_1(out) / "results.json")
        listing = os.listdir(_run_1(out).parent)
        expected = "file size limit reached"
    assert rc == 2, stderr[-3000:]
    line = _one_line(stderr)
    assert expected in line and "incomplete" in line and "earlier run is untouched" in line
    assert before == after  # the good run_1 is the same file, byte for byte
    assert "run_1.failed" in listing and not any(".tmp-" in name for name in listing)


def _run_with_file_size_limit(args: list[str], limit_bytes: int) -> subprocess.CompletedProcess:
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run([sys.executable, str(ROOT / "run.py"), *args], capture_output=True,
                          text=True, timeout=900, preexec_fn=limit)


def test_a_file_in_the_way_inside_the_results_tree_is_named(tmp_path, quantmark_cache):
    from quantmark.ground.layout import scenario_dir, system_id

    out = tmp_path / "out"
    blocked = scenario_dir(out, system_id(SUT), "efficientnet-lite0", SCENARIO)
    blocked.parent.mkdir(parents=True)
    blocked.write_text("not a folder")
    proc = run_cli("--scenario", SCENARIO, "--sut", SUT, "--output", str(out))
    line = _one_line(proc.stderr)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "a file is in the way" in line and f"at {blocked} (" in line
    assert blocked.read_text() == "not a folder"


def test_a_second_run_into_the_same_folder_is_refused_while_the_first_runs(
        tmp_path, quantmark_cache, short_conf):
    out = tmp_path / "out"
    first = subprocess.Popen([sys.executable, str(ROOT / "run.py"), *_args(out, short_conf)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_until(lambda: any(out.glob(f"*/*/{SCENARIO}/performance/.run_1.lock")), first)
    second = run_cli(*_args(out, short_conf))
    stdout, stderr = first.communicate(timeout=600)
    assert first.returncode == 0, stderr[-3000:]
    assert second.returncode == 2, second.stderr[-2000:]
    assert "another quantmark run (pid" in _one_line(second.stderr)
    results = json.loads((_run_1(out) / "results.json").read_text())
    assert results["summary"]["validity"] == "VALID"  # the first run's, whole


def test_a_killed_run_loses_nothing_and_its_leftovers_go_even_before_it_is_reaped(
        tmp_path, quantmark_cache, short_conf):
    """Kill the launcher and its test process outright during LoadGen. We stand in for an init
    that reaps late: the killed test process stays a zombie while the next run starts, and
    that run must still see its temp folder as abandoned and clear it."""
    out = tmp_path / "out"
    good = run_cli(*_args(out, short_conf))
    assert good.returncode == 0, good.stderr[-3000:]
    before = _digest(_run_1(out) / "results.json")
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    try:
        killed = subprocess.Popen([sys.executable, str(ROOT / "run.py"),
                                   *_args(out, short_conf)], start_new_session=True,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        folder = _run_1(out).parent
        _wait_until(lambda: any(folder.glob(".run_1.tmp-*")), killed)
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait()
        assert _digest(_run_1(out) / "results.json") == before
        again = run_cli(*_args(out, short_conf))
        assert again.returncode == 0, again.stderr[-3000:]
        assert not any(folder.glob(".run_1.tmp-*"))
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        _reap_orphans()


def _wait_until(condition, process: subprocess.Popen, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the run did not get there in time"
        time.sleep(0.05)


def _reap_orphans() -> None:
    """Reap the zombies we adopted as subreaper (the killed test process)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _zero_middle(path: Path, count: int = 1 << 20) -> None:
    """Overwrite ``count`` bytes in the middle of ``path`` with zeros: same size, other data."""
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.seek(size // 2 - min(count, size // 4) // 2)
        handle.write(bytes(min(count, size // 4)))


def test_corrupted_caches_are_rebuilt_and_results_carry_what_was_verified(
        tmp_path, monkeypatch, short_conf):
    """A cached ONNX and the preprocessed images, each zeroed in the middle at the same size:
    the next run says so, rebuilds them, and results.json records the hashes it verified on
    that run, which are those of the rebuilt files, not the corrupted ones. The cache is this
    test's own: in the session's shared cache, another worker's run could find and rebuild the
    corrupted files first (CI once saw that), and the others would meet the corruption."""
    monkeypatch.setenv("QUANTMARK_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    first = run_cli(*_args(out, short_conf))
    assert first.returncode == 0, first.stderr[-3000:]
    results = json.loads((_run_1(out) / "results.json").read_text())
    artifact = Path(results["model"]["artifact"])
    images = Path(next(iter(results["dataset"]["verified_caches"])))
    _zero_middle(artifact)
    _zero_middle(images)
    corrupted = _digest(artifact)

    second = run_cli(*_args(out, short_conf))
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"cached artifact {artifact.parent}" in second.stderr or str(artifact) in second.stderr
    assert f"preprocessed cache {images}" in second.stderr
    assert second.stderr.count("rebuilding it") >= 2
    again = json.loads((_run_1(out) / "results.json").read_text())
    assert again["model"]["meta"]["verified_sha256"] == _digest(artifact) != corrupted
    assert again["summary"]["validity"] == "VALID"


def test_an_image_changed_at_the_same_size_changes_the_fingerprint_and_the_cache(
        tmp_path, quantmark_cache, short_conf):
    from PIL import Image

    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    for i in range(16):
        Image.fromarray(rng.integers(0, 256, (240, 240, 3), dtype="uint8")).save(
            data / f"img_{i}.bmp")
    (data / "val_map.txt").write_text("".join(f"img_{i}.bmp {i}\n" for i in range(15)))
    calibration = tmp_path / "cal.txt"
    calibration.write_text("img_15.bmp\n")  # nothing held out of 15 images
    out = tmp_path / "out"
    args = [*_args(out, short_conf), "--dataset-path", str(data), "--calibration-list",
            str(calibration)]
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr[-3000:]
    before = json.loads((_run_1(out) / "results.json").read_text())["dataset"]
    image = data / "img_5.bmp"
    size = image.stat().st_size
    Image.fromarray(rng.integers(0, 256, (240, 240, 3), dtype="uint8")).save(image)
    assert image.stat().st_size == size
    second = run_cli(*args)
    assert second.returncode == 0, second.stderr[-3000:]
    after = json.loads((_run_1(out) / "results.json").read_text())["dataset"]
    assert after["fingerprint"] != before["fingerprint"]
    assert set(after["verified_caches"]) != set(before["verified_caches"])  # another cache
