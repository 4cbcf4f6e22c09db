"""The interference monitor: /proc readers on a fake tree, the window's figures and verdict on
synthetic series, and real quick runs beside busy processes (disturbed) and without (not)."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from quantmark.ground.config import RunConfig
from quantmark.ground.locks import FileLock
from quantmark.ground.proc_counters import (
    descendants,
    freq_files,
    parse_cpu_stat,
    parse_pressure,
    read_cpu_stat,
    read_pressure,
    read_process_cpu_s,
)
from quantmark.ground.records import INTERFERENCE, RESULTS, RunRecord, load_run, write_record
from quantmark.run.interference import (
    OTHER_SHARE_MAX,
    Monitor,
    Samples,
    attach,
    describe,
    summarize,
)
from quantmark.run.launch import launch
from tests.conftest import run_cli
from tests.quantmark.test_cli import tiny_onnx

TICKS = os.sysconf("SC_CLK_TCK")
STAT = """cpu  {u} 10 {s} {i} 40 0 6 {st} 100 0
cpu0 {u} 10 {s} {i} 40 0 6 {st} 100 0
cpu1 500 0 500 1000 0 0 0 0 0 0
intr 1 2 3
procs_running 3
procs_blocked 1
"""
PRESSURE_CPU = ("some avg10=1.00 avg60=0.50 avg300=0.10 total=2500000\n"
                "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")


def _proc_stat(pid: int, ppid: int, utime: int, stime: int, cutime: int = 0) -> str:
    # a name with spaces and parentheses: fields are counted after the last ")"
    return (f"{pid} (py (x) y) R {ppid} {pid} {pid} 0 -1 4194560 10 0 0 0 {utime} {stime} "
            f"{cutime} 0 20 0 5 0 100 1000 50\n")


def fake_tree(root: Path, user: int = 1000, system: int = 200, idle: int = 3000,
              steal: int = 30) -> Path:
    """/proc and /sys as the monitor reads them: two CPUs, PSI, a test process (100) with a
    child (101), another process (200), one cpufreq file."""
    (root / "proc/pressure").mkdir(parents=True, exist_ok=True)
    (root / "proc/stat").write_text(STAT.format(u=user, s=system, i=idle, st=steal))
    (root / "proc/pressure/cpu").write_text(PRESSURE_CPU)
    (root / "proc/pressure/memory").write_text("some avg10=0 avg60=0 avg300=0 total=100\n"
                                               "full avg10=0 avg60=0 avg300=0 total=50\n")
    for pid, ppid, utime in ((100, 1, 300), (101, 100, 40), (200, 1, 7)):
        (root / f"proc/{pid}").mkdir(parents=True, exist_ok=True)
        (root / f"proc/{pid}/stat").write_text(_proc_stat(pid, ppid, utime, 20, cutime=5))
    freq = root / "sys/devices/system/cpu/cpu0/cpufreq"
    freq.mkdir(parents=True, exist_ok=True)
    (freq / "scaling_cur_freq").write_text("1800000\n")
    return root


# readers on fake files

def test_parse_cpu_stat_sums_the_allowed_cpus_in_seconds_and_reads_the_run_queue():
    text = STAT.format(u=1000, s=200, i=3000, st=30)
    both = parse_cpu_stat(text, 100)
    assert both["cpus"] == 2
    assert both["busy"] == pytest.approx((1000 + 10 + 200 + 6 + 500 + 500) / 100)  # no guest
    assert both["total"] == pytest.approx(both["busy"] + (3000 + 40 + 30 + 1000) / 100)
    assert (both["iowait"], both["steal"]) == (pytest.approx(0.4), pytest.approx(0.3))
    assert (both["procs_running"], both["procs_blocked"]) == (3, 1)
    second = parse_cpu_stat(text, 100, allowed={1, 7})  # the cores the test may use
    assert second["cpus"] == 1 and second["busy"] == pytest.approx(10.0)
    assert parse_cpu_stat("intr 1\n", 100) is None


def test_parse_pressure_reads_the_totals():
    assert parse_pressure(PRESSURE_CPU) == {"some": 2_500_000, "full": 0}
    assert parse_pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=7\n") == {"some": 7}


def test_readers_read_a_fake_tree(tmp_path):
    root = fake_tree(tmp_path)
    assert read_cpu_stat(root, allowed=None)["busy"] == pytest.approx(22.16 * 100 / TICKS)
    # the cpu line's "full" is left out: system-wide it is always 0; io is absent here
    assert read_pressure(root) == {"cpu_some": 2.5, "memory_some": 1e-4, "memory_full": 5e-5}
    assert read_process_cpu_s(100, root) == pytest.approx((300 + 20 + 5) / TICKS)
    assert sorted(descendants(1, root)) == [100, 101, 200]
    assert descendants(100, root) == [101]
    assert [f.parts[-3] for f in freq_files(root)] == ["cpu0"]


def test_readers_return_nothing_where_files_are_missing(tmp_path):
    assert read_cpu_stat(tmp_path) is None
    assert read_pressure(tmp_path) == {}
    assert read_process_cpu_s(100, tmp_path) is None
    assert descendants(100, tmp_path) == []
    assert freq_files(tmp_path) == []
    monitor = Monitor(root=tmp_path)  # no /proc/stat: no thread, no samples, no verdict
    with monitor:
        pass
    summary = monitor.summary(1.0, 2.0)
    assert summary["disturbed"] is None and summary["samples"] == 0


def test_a_monitor_sample_counts_the_watched_process_and_its_children(tmp_path):
    root = fake_tree(tmp_path)
    monitor = Monitor(root=root, allowed=None)
    monitor.sample()
    assert monitor.samples.counters["test"][-1] == 0.0  # nothing watched yet
    monitor.watch(100)
    monitor.sample()
    sample = {name: values[-1] for name, values in monitor.samples.counters.items()}
    assert sample["test"] == pytest.approx((300 + 20 + 5 + 40 + 20 + 5) / TICKS)
    assert sample["cpu_some"] == 2.5 and "io_some" not in sample
    assert monitor.samples.gauges["run_queue"][-1] == 2  # procs_running minus the sampler
    assert monitor.samples.gauges["freq_mean"][-1] == 1800.0
    assert monitor.samples.cpus == 2
    (root / "proc/100/stat").unlink()  # the test process is gone: its time stays counted
    monitor.sample()
    assert monitor.samples.counters["test"][-1] == sample["test"]


# the window's figures and verdict on synthetic series

def series(other: float, *, cpus: int = 2, test: float = 1.0, steal: float = 0.0,
           memory_pct: float = 0.0, cpu_pct: float = 0.0, io_pct: float = 0.0,
           burst: float = 0.0) -> Samples:
    """Samples every 0.5 s over [0, 10]: ``other`` cores of other work (``burst`` more before
    t=2), ``test`` cores of the test, 0.05 of quantmark, steal as a share of all CPU time,
    pressure in % of the time."""
    samples = Samples(cpus=cpus)
    for i in range(21):
        t = i / 2
        busy = (other + test + 0.05) * t + burst * min(t, 2.0)
        samples.add(1000 + t, {
            "busy": busy, "total": cpus * t, "steal": steal * cpus * t, "iowait": 0.0,
            "test": test * t, "parent": 0.05 * t, "memory_some": memory_pct / 100 * t,
            "cpu_some": cpu_pct / 100 * t, "io_full": io_pct / 100 * t},
            {"run_queue": 2 + i % 2, "blocked": 0})
    return samples


def test_the_window_interpolates_between_samples():
    samples = series(0.5)
    assert samples.delta("test", 1002.25, 1007.75) == pytest.approx(5.5)
    assert samples.covers(1000, 1010) and not samples.covers(999, 1005)
    assert samples.window("run_queue", 1002.2, 1003.8) == [3, 2, 3]
    assert samples.count(1002.2, 1003.8) == 3


def test_other_processes_past_the_threshold_disturb_the_run():
    summary = summarize(series(0.94), 1002.5, 1007.5)
    assert summary["disturbed"] is True
    assert summary["other_cpu_cores"] == pytest.approx(0.94)
    assert summary["other_cpu_share"] == pytest.approx(0.47)
    assert summary["test_cpu_cores"] == pytest.approx(1.0)
    assert summary["why"] == ["other processes used 0.94 of 2 cores (47.0% of the machine; "
                              "over 1.5% moves latency figures beyond their interval)"]
    assert summary["window_s"] == 5.0 and summary["samples"] == 11
    assert summary["run_queue_max"] == 3 and summary["thresholds"]["other_cpu_share"] == 0.015
    assert describe(summary).startswith("DISTURBED: other processes used 0.94 of 2 cores (47.0%")


def test_a_quiet_window_is_not_disturbed_whatever_came_before_it_or_the_cpu_pressure():
    quiet = summarize(series(0.01, burst=1.5, cpu_pct=90.0), 1002.5, 1007.5)
    assert quiet["other_cpu_cores"] == pytest.approx(0.01)
    assert quiet["pressure"]["cpu_some_pct"] == pytest.approx(90.0)  # measured, not judged
    assert quiet["disturbed"] is False and quiet["why"] == []
    assert describe(quiet) is None and describe(None) is None
    below = OTHER_SHARE_MAX * 2 * 0.9
    assert summarize(series(below), 1001, 1009)["disturbed"] is False
    assert summarize(series(OTHER_SHARE_MAX * 2 * 1.1), 1001, 1009)["disturbed"] is True


def burst_series(burst_s: float, *, burst_cores: float = 1.0, quiet: float = 0.005,
                 seconds: int = 600) -> Samples:
    """Samples every 0.1 s over ``seconds``: ``quiet`` cores of other work throughout, and
    ``burst_cores`` more for ``burst_s`` seconds in the middle; the test takes one core."""
    samples = Samples(cpus=2)
    middle = seconds / 2
    for i in range(seconds * 10 + 1):
        t = i / 10
        burst = burst_cores * min(max(t - middle, 0.0), burst_s)
        samples.add(1000 + t, {"busy": (quiet + 1.0 + 0.05) * t + burst, "total": 2 * t,
                               "steal": 0.0, "iowait": 0.0, "test": 1.0 * t,
                               "parent": 0.05 * t}, {})
    return samples


def test_a_short_burst_that_reaches_p99_disturbs_a_long_run_under_the_average_threshold():
    # the case: 10 s on one core in a 600 s run is 0.8% of the machine on average
    summary = summarize(burst_series(10.0), 1000, 1600)
    assert summary["other_cpu_share"] < OTHER_SHARE_MAX
    assert summary["burst_s"] == pytest.approx(10.0)
    assert summary["disturbed"] is True
    assert summary["why"] == ["other processes took 0.25 of a core or more for 10 s (1.7% of "
                              "the run: enough to move p99)"]


def test_a_burst_shorter_than_the_slowest_percent_of_the_run_or_too_light_is_not_one():
    assert summarize(burst_series(3.0), 1000, 1600)["disturbed"] is False  # 0.5% of the run
    light = summarize(burst_series(60.0, burst_cores=0.1), 1000, 1600)  # a tenth of a core
    assert light["burst_s"] == 0 and light["disturbed"] is False


def test_steal_and_memory_and_io_pressure_disturb_the_run():
    summary = summarize(series(0.0, steal=0.06, memory_pct=8.0, io_pct=12.0), 1001, 1009)
    assert summary["steal_share"] == pytest.approx(0.06)
    assert summary["why"] == ["steal 6% (the hypervisor ran other guests on these cores)",
                              "memory pressure: some task (the test's own included) waited "
                              "for memory 8% of the run",
                              "IO pressure: every running task (the test's own included) "
                              "waited on IO 12% of the run"]
    assert describe(summary).startswith("DISTURBED: steal 6% (")
    assert summarize(series(0.0, steal=0.02, memory_pct=1.0, io_pct=1.0),
                     1001, 1009)["disturbed"] is False


def test_a_board_that_throttled_is_disturbed_and_uncovered_windows_have_no_verdict():
    thermal = {"throttled": True, "why": ["soft temperature limit during the run"]}
    summary = summarize(series(0.0), 1001, 1009, thermal)
    assert summary["why"] == ["board throttled: soft temperature limit during the run"]
    assert summary["disturbed"] is True
    assert summarize(series(0.0), 999, 1005, thermal)["disturbed"] is True
    uncovered = summarize(series(0.93), 999, 1005)
    assert uncovered["disturbed"] is None and uncovered["other_cpu_cores"] is None
    assert summarize(series(0.93), None, None)["disturbed"] is None


def _run_folder(tmp_path: Path, started_at: float) -> Path:
    final = tmp_path / "sys" / "m" / "Offline" / "performance" / "run_1"
    final.mkdir(parents=True)
    write_record(final / RESULTS, RunRecord(times={
        "loadgen_started_at": started_at, "loadgen_ended_at": started_at + 6},
        interference_file=INTERFERENCE))
    return final


def test_attach_writes_the_file_the_record_names_under_the_folder_lock(tmp_path):
    """results.json is the child's, written once; the parent's figures go beside it."""
    monitor = Monitor(root=tmp_path)
    monitor.samples = series(0.93)
    final = _run_folder(tmp_path, 1002.0)
    results = load_run(final / RESULTS).to_dict()
    written = (final / RESULTS).read_bytes()
    attach(monitor, final, results)
    assert (final / RESULTS).read_bytes() == written
    assert results["interference"]["disturbed"] is True
    assert load_run(final / RESULTS).interference == results["interference"]
    assert not (final.parent / ".run_1.lock").exists()  # released
    # a run that holds the folder now, or a results.json of another run: left alone
    (final / INTERFERENCE).unlink()
    with FileLock(final.parent / ".run_1.lock"):
        attach(monitor, final, dict(results))
        assert not (final / INTERFERENCE).exists()
    attach(monitor, final, {"times": {"loadgen_started_at": 1001.0,
                                      "loadgen_ended_at": 1007.0}})
    assert not (final / INTERFERENCE).exists()
    assert load_run(final / RESULTS).interference is None


# real quick runs through the launcher and the CLI

def _spin(ready: Any) -> None:
    ready.set()
    while True:
        pass


@contextlib.contextmanager
def busy_processes() -> Iterator[int]:
    """One process spinning on each core this test may use, until the block ends."""
    context = multiprocessing.get_context("spawn")
    count = len(os.sched_getaffinity(0))
    events = [context.Event() for _ in range(count)]
    hogs = [context.Process(target=_spin, args=(event,), daemon=True) for event in events]
    for hog in hogs:
        hog.start()
    try:
        assert all(event.wait(60) for event in events), "the busy processes did not start"
        yield count
    finally:
        for hog in hogs:
            hog.terminate()
        for hog in hogs:
            hog.join(10)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return tiny_onnx(tmp_path_factory.mktemp("model") / "tiny.onnx")


def _quick(tiny: Path, out: Path) -> RunConfig:
    # one intra-op thread: a SUT using every core would crawl beside many busy processes
    return RunConfig(scenario="SingleStream", sut="ort-fp32", model="efficientnet-lite0",
                     model_path=str(tiny), output=str(out), threads=1,
                     quick_duration_ms=2000)


def _launched(config: RunConfig) -> dict:
    result = launch(config, quiet=True)
    assert result.status == "ok", result.message
    on_disk = load_run(Path(result.run_dir) / RESULTS)
    assert on_disk.interference == result.results["interference"]
    assert "interference" not in json.loads((Path(result.run_dir) / RESULTS).read_text())
    return on_disk.interference


@pytest.mark.slow
@pytest.mark.alone  # its busy processes would disturb the other worker's tests
def test_a_run_beside_busy_processes_is_disturbed(tiny, tmp_path, quantmark_cache):
    with busy_processes():
        interference = _launched(_quick(tiny, tmp_path))
    assert interference["disturbed"] is True, interference
    assert interference["other_cpu_cores"] > 0.5, interference  # the busy processes, seen
    assert interference["why"][0].startswith("other processes used"), interference
    assert describe(interference).startswith("DISTURBED: other processes used")


@pytest.mark.alone  # the other worker's test would disturb it
def test_a_quiet_run_is_not_disturbed(tiny, tmp_path, quantmark_cache):
    with Monitor() as before:  # a machine already busy cannot give a quiet run: say so
        start = time.time()
        time.sleep(1.0)
        end = time.time()
    background = before.summary(start, end)["other_cpu_share"]
    if background is not None and background > OTHER_SHARE_MAX / 2:
        pytest.skip(f"other processes already use {background:.0%} of this machine")
    # A machine may get busy for a moment during the run (the flag is right then): three
    # tries. A monitor that counted the test's own work as other processes' fails all three.
    for attempt in range(3):
        interference = _launched(_quick(tiny, tmp_path / f"try{attempt}"))
        if interference["disturbed"] is False:
            break
    assert interference["disturbed"] is False, interference
    assert interference["samples"] > 10 and interference["test_cpu_cores"] > 0.3


@pytest.mark.slow
@pytest.mark.alone
def test_the_cli_says_disturbed_beside_busy_processes(tiny, tmp_path, quantmark_cache):
    conf = tmp_path / "user.conf"
    conf.write_text("*.SingleStream.min_duration = 2000\n")
    with busy_processes():
        proc = run_cli("--scenario", "SingleStream", "--sut", "ort-fp32", "--model-path",
                       str(tiny), "--threads", "1", "--user-conf", str(conf), "--output",
                       str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "DISTURBED: other processes used" in " ".join(proc.stdout.split()), proc.stdout
