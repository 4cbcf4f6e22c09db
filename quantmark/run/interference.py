"""Was the machine quiet while LoadGen ran? A monitor outside the test process says.

A benchmark on a busy machine prints noisy numbers as facts. So the launcher samples the
machine's counters in a thread of the parent while the child runs: the kernel's CPU time
(/proc/stat), the test process's own CPU time, quantmark's own, pressure stall information
(/proc/pressure) and the clock. Cut to LoadGen's window, what the machine spent beyond the test
and quantmark is what other processes took; past the thresholds below the run is *disturbed*,
with the reasons in words. Every reader takes ``root`` (a fake tree in the tests) and returns
None for what it cannot read: a machine without PSI or cpufreq is still watched.
"""

from __future__ import annotations

import bisect
import logging
import math
import os
import resource
import threading
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.ground.locks import FileLock, LockHeld
from quantmark.ground.proc_counters import (
    PRESSURE,
    descendants,
    freq_files,
    read_cpu_stat,
    read_freq_mhz,
    read_pressure,
    read_process_cpu_s,
)
from quantmark.ground.records import (
    INTERFERENCE,
    RESULTS,
    InterferenceRecord,
    load_run,
    write_record,
)
from quantmark.run.trackers import _interpolate

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 0.1  # measured: 0.6-0.75% of one core in all, counted as quantmark's
DESCENDANT_REFRESH_S = 1.0  # how often the test's child processes are looked up again
# The thresholds, from quick runs on a 2-vCPU VM. Quiet, other processes took 0.3-0.5% of the
# machine and steal was 0.1-0.9%. Beside one busy process per core they took 52% and a tiny
# model's SingleStream p90 went from 0.72 to 5.2 ms (Offline ort-int8: 625 -> 195 samples/s).
# Two processes busy 2/3/5/10% of the time each took 2.6/4.0/5.3/10% of the machine and moved
# that p90 +25/+37/+63/+130%, where a quiet run's interval over repeats is a few percent wide:
# every load measurably above the quiet floor moves a latency figure by more than its interval.
# So the threshold sits just above the floor: 1.5% is 3x the quietest runs' worst, under 2.6%.
OTHER_SHARE_MAX = 0.015
# Bursts: other work that comes and goes. A 10 s burst on one core in a 600 s run is 0.8% of the
# machine on average, under OTHER_SHARE_MAX, yet it slows the queries of those 10 s: the slowest
# 1.7%, which is where p99 lies. So the window is also cut in BURST_SPAN_S pieces; a piece in
# which other processes took BURST_OTHER_CORES or more is a burst, and bursts covering
# BURST_TIME_MAX of the window (the slowest 1% of queries, beyond p99) disturb the run. A quiet
# machine's other work (0.3-0.5% of 2 cores, 0.01 cores) is 25x under a burst's level.
BURST_SPAN_S = 1.0
BURST_OTHER_CORES = 0.25
BURST_TIME_MAX = 0.01
# Steal: time the hypervisor gave these vCPUs to other guests, lost to the test. Quiet runs
# showed 0.0-0.9%, and up to 2.5% with every core kept busy by this VM itself: 5% is past both.
STEAL_SHARE_MAX = 0.05
# Memory "some": the share of the window in which some task waited for memory (reclaim,
# swap-in). 0.00% in every quiet run: with the model and the QSL in RAM, 5% is a real stall.
MEMORY_SOME_MAX_PCT = 5.0
# IO "full": every non-idle task stalled on IO at once, 0.00-0.04% quiet. The test reads no
# file in the window (the QSL is in RAM), so 5% means it waited behind someone's IO.
IO_FULL_MAX_PCT = 5.0
# Not judged: CPU pressure (quiet ort-int8 Offline with 4 workers on 2 cores: cpu some 81% and
# a run queue of 4.2, as high as beside the busy processes, 89% and 3.8: the SUT's own threads
# queue for the cores), the run queue (it counts the SUT's threads), and iowait (idle time a
# task spends waiting on IO: it takes no CPU from the test; IO full pressure is what counts).
THRESHOLDS = {"other_cpu_share": OTHER_SHARE_MAX, "burst_share": BURST_TIME_MAX,
              "burst_other_cores": BURST_OTHER_CORES, "steal_share": STEAL_SHARE_MAX,
              "memory_some_pct": MEMORY_SOME_MAX_PCT, "io_full_pct": IO_FULL_MAX_PCT}
NOTE = ("Sampled outside the test process every ~0.1 s, cut to LoadGen's window. "
        "other_cpu_cores: busy CPU time minus the test's (with its children) and quantmark's; "
        "shares are of the cores the test may use. burst_s: seconds of the window, in 1 s "
        "pieces, in which other processes took a quarter of a core or more. pressure: % of "
        "the window stalled (PSI), system-wide: the test's own stalls count too; "
        "CPU pressure and the run queue are not judged: the SUT's own threads queue for the "
        "cores on a quiet machine. disturbed None: the samples do not cover the window.")


@dataclass
class Samples:
    """Time series of one monitored test: cumulative counters (seconds) and gauges (NaN where
    a gauge could not be read). A counter that cannot be read keeps its last value."""

    cpus: int = 0
    times: array = field(default_factory=lambda: array("d"))
    counters: dict[str, array] = field(default_factory=dict)
    gauges: dict[str, array] = field(default_factory=dict)

    def add(self, at: float, counters: dict[str, float], gauges: dict[str, float]) -> None:
        if not self.times:
            self.counters = {name: array("d") for name in counters}
            self.gauges = {name: array("d") for name in gauges}
        for name, values in self.counters.items():
            values.append(counters.get(name, values[-1] if values else 0.0))
        for name, values in self.gauges.items():
            values.append(gauges.get(name, math.nan))
        self.times.append(at)

    def covers(self, start: float, end: float) -> bool:
        return len(self.times) >= 2 and self.times[0] <= start < end <= self.times[-1]

    def delta(self, name: str, start: float, end: float) -> float | None:
        """How much counter ``name`` grew over [start, end], interpolated between samples."""
        values = self.counters.get(name)
        return None if values is None else (_interpolate(self.times, values, end) -
                                            _interpolate(self.times, values, start))

    def count(self, start: float, end: float) -> int:
        return bisect.bisect_right(self.times, end) - bisect.bisect_left(self.times, start)

    def window(self, name: str, start: float, end: float) -> list[float]:
        """Gauge ``name``'s readable samples taken inside [start, end]."""
        first = bisect.bisect_left(self.times, start)
        last = bisect.bisect_right(self.times, end)
        return [v for v in self.gauges.get(name, array("d"))[first:last] if not math.isnan(v)]


class Monitor:
    """Samples the machine until stopped: ``with Monitor() as m: ...; m.watch(pid)``.

    Started before the test process exists (its pid comes from Popen), stopped after it is
    reaped, so the samples cover LoadGen's window on both sides.
    """

    def __init__(self, root: Path = Path("/"), interval_s: float = SAMPLE_INTERVAL_S,
                 allowed: set[int] | None = None) -> None:
        self.root = root
        self.interval_s = interval_s
        # the cores the test may use (it inherits this affinity): work elsewhere does not
        # compete with it, and a container's cpuset is its machine
        self.allowed = (set(os.sched_getaffinity(0))
                        if allowed is None and hasattr(os, "sched_getaffinity") else allowed)
        self.samples = Samples()
        self._pid: int | None = None
        self._tree: list[int] = []
        self._tree_at, self._test_s = 0.0, 0.0
        self._freq = freq_files(root)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="quantmark-interference",
                                        daemon=True)

    def __enter__(self) -> Monitor:
        self.sample()
        if self.samples.times:  # no /proc/stat (not Linux): nothing to watch
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
            self.sample()

    def watch(self, pid: int) -> None:
        """Count ``pid`` (and what it starts) as the test, not as other processes."""
        self._pid = pid
        self._tree_at = 0.0

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def _test_cpu_s(self, now: float) -> float:
        """The test's CPU seconds so far; never decreasing (a child that exited unreaped
        vanishes for a moment before its time lands in the test's cutime)."""
        if self._pid is None:
            return 0.0
        if now - self._tree_at >= DESCENDANT_REFRESH_S:
            self._tree, self._tree_at = descendants(self._pid, self.root), now
        seconds = [read_process_cpu_s(pid, self.root) for pid in (self._pid, *self._tree)]
        if seconds[0] is not None:
            self._test_s = max(self._test_s, sum(s for s in seconds if s is not None))
        return self._test_s

    def sample(self) -> None:
        now = time.time()
        stat = read_cpu_stat(self.root, self.allowed)
        if stat is None:
            return
        usage = resource.getrusage(resource.RUSAGE_SELF)
        counters = {**{k: stat[k] for k in ("busy", "total", "iowait", "steal")},
                    "test": self._test_cpu_s(now), "parent": usage.ru_utime + usage.ru_stime,
                    **read_pressure(self.root)}
        # procs_running counts this thread, reading /proc/stat
        gauges = {"run_queue": (max(stat["procs_running"] - 1, 0) if "procs_running" in stat
                                else math.nan),
                  "blocked": stat.get("procs_blocked", math.nan)}
        if self._freq:
            mhz = read_freq_mhz(self._freq) or [math.nan]
            gauges.update(freq_mean=sum(mhz) / len(mhz), freq_min=min(mhz), freq_max=max(mhz))
        self.samples.cpus = self.samples.cpus or int(stat["cpus"])
        self.samples.add(now, counters, gauges)

    def summary(self, start: float | None, end: float | None,
                thermal: dict[str, Any] | None = None) -> dict[str, Any]:
        return summarize(self.samples, start, end, thermal)


def _figures(samples: Samples, start: float, end: float) -> dict[str, Any]:
    """The window's figures, from counter growth over [start, end]."""
    seconds = end - start
    cpus = samples.cpus

    def grew(name: str) -> float:
        return samples.delta(name, start, end) or 0.0

    total = grew("total") or seconds * cpus
    other = max(0.0, grew("busy") - grew("test") - grew("parent")) / seconds
    pressure = None
    if any(name in samples.counters for name in PRESSURE):
        pressure = {f"{name}_pct": (round(100 * grew(name) / seconds, 2)
                                    if name in samples.counters else None)
                    for name in PRESSURE}
    burst_s = _burst_seconds(samples, start, end)
    queue, blocked = (samples.window(name, start, end) for name in ("run_queue", "blocked"))
    means = samples.window("freq_mean", start, end)
    return {
        "other_cpu_cores": round(other, 3), "other_cpu_share": round(other / cpus, 4),
        "test_cpu_cores": round(grew("test") / seconds, 3),
        "burst_s": round(burst_s, 2), "burst_share": round(burst_s / seconds, 4),
        "steal_share": round(grew("steal") / total, 4),
        "iowait_share": round(grew("iowait") / total, 4),
        "run_queue_mean": round(sum(queue) / len(queue), 2) if queue else None,
        "run_queue_max": int(max(queue)) if queue else None,
        "blocked_mean": round(sum(blocked) / len(blocked), 2) if blocked else None,
        "pressure": pressure,
        "freq_mhz": ({"mean": round(sum(means) / len(means)),
                      "min": round(min(samples.window("freq_min", start, end))),
                      "max": round(max(samples.window("freq_max", start, end)))}
                     if means else None),
    }


def _burst_seconds(samples: Samples, start: float, end: float) -> float:
    """Seconds of [start, end], cut in BURST_SPAN_S pieces (the last one shorter), in which
    other processes took BURST_OTHER_CORES or more."""
    total, at = 0.0, start
    while at < end - 1e-9:
        stop = min(at + BURST_SPAN_S, end)
        busy, test, parent = (samples.delta(name, at, stop) or 0.0
                              for name in ("busy", "test", "parent"))
        if (busy - test - parent) / (stop - at) >= BURST_OTHER_CORES:
            total += stop - at
        at = stop
    return total


def verdict(figures: dict[str, Any], cpus: int) -> list[str]:
    """Why the window counts as disturbed, in words; [] when it does not."""
    why = []
    share = figures.get("other_cpu_share")
    if share is not None and share > OTHER_SHARE_MAX:
        why.append(f"other processes used {figures['other_cpu_cores']:.2f} of {cpus} cores "
                   f"({share:.1%} of the machine; over {OTHER_SHARE_MAX:.1%} moves latency "
                   "figures beyond their interval)")
    burst = figures.get("burst_share")
    if burst is not None and burst >= BURST_TIME_MAX and (share is None
                                                        or share <= OTHER_SHARE_MAX):
        why.append(f"other processes took {BURST_OTHER_CORES:g} of a core or more for "
                   f"{figures['burst_s']:.0f} s ({burst:.1%} of the run: enough to move p99)")
    steal = figures.get("steal_share")
    if steal is not None and steal > STEAL_SHARE_MAX:
        why.append(f"steal {steal:.0%} (the hypervisor ran other guests on these cores)")
    pressure = figures.get("pressure") or {}
    memory = pressure.get("memory_some_pct")
    if memory is not None and memory > MEMORY_SOME_MAX_PCT:
        why.append(f"memory pressure: some task (the test's own included) waited for memory "
                   f"{memory:.0f}% of the run")
    io = pressure.get("io_full_pct")
    if io is not None and io > IO_FULL_MAX_PCT:
        why.append(f"IO pressure: every running task (the test's own included) waited on IO "
                   f"{io:.0f}% of the run")
    return why


def summarize(samples: Samples, start: float | None, end: float | None,
              thermal: dict[str, Any] | None = None) -> dict[str, Any]:
    """What results.json keeps as ``interference``: the figures over LoadGen's window
    [start, end] (epoch seconds), the verdict and why. A board that throttled (``thermal``
    as record.py writes it) is disturbed too, whatever the samples say."""
    covered = start is not None and end is not None and samples.covers(start, end)
    out: dict[str, Any] = {
        "window_s": round(end - start, 3) if covered else None,
        "cpus": samples.cpus or None,
        "samples": samples.count(start, end) if covered else 0}
    figures = _figures(samples, start, end) if covered else {}
    out.update({key: figures.get(key) for key in (
        "other_cpu_cores", "other_cpu_share", "test_cpu_cores", "burst_s", "burst_share",
        "steal_share", "iowait_share",
        "run_queue_mean", "run_queue_max", "blocked_mean", "pressure", "freq_mhz")})
    why = verdict(figures, samples.cpus) if covered else []
    if thermal and thermal.get("throttled"):
        why += [f"board throttled: {reason}" for reason in thermal.get("why") or ["?"]]
    return {**out, "thresholds": dict(THRESHOLDS), "why": why, "note": NOTE,
            "disturbed": True if why else (False if covered else None)}


def describe(interference: dict[str, Any] | None) -> str | None:
    """One line for the CLI when a run was disturbed, else None."""
    if not interference or not interference.get("disturbed"):
        return None
    return "DISTURBED: " + "; ".join(interference.get("why") or ["see results.json"])


def attach(monitor: Monitor, run_dir: str | Path, results: dict[str, Any]) -> dict[str, Any]:
    """Summarize the monitor over the run's LoadGen window, put it in ``results`` and write it
    as the run folder's interference.json, which its results.json names (atomically, under the
    folder's lock): results.json stays as the child wrote it. Returns the summary."""
    times = results.get("times") or {}
    thermal = (results.get("machine") or {}).get("thermal")
    summary = monitor.summary(times.get("loadgen_started_at"), times.get("loadgen_ended_at"),
                              thermal)
    results["interference"] = summary
    _write(Path(run_dir), summary, times.get("loadgen_started_at"))
    return summary


def _write(final: Path, summary: dict[str, Any], started_at: float | None) -> None:
    """Write ``final``/interference.json, holding the lock RunFolder names ``.<name>.lock``,
    and only if the folder still holds this run (its results.json has the same LoadGen
    start)."""
    try:
        with FileLock(final.parent / f".{final.name}.lock"):
            on_disk = load_run(final / RESULTS)
            if on_disk.times.get("loadgen_started_at") != started_at:
                log.warning("%s belongs to another run now; interference not added", final)
                return
            write_record(final / INTERFERENCE, InterferenceRecord(
                loadgen_started_at=started_at, summary=summary))
    except LockHeld as held:
        log.warning("another run (pid %s) is writing %s; interference not added to it",
                    held.owner or "?", final)
    except (OSError, UserError) as exc:
        log.warning("could not add interference to %s: %s", final, exc)
