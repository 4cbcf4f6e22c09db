"""Trackers that watch a test from outside its process: energy and GPU memory.

They sample in a thread of the parent while the child runs LoadGen, so no SUT carries
measuring code. Energy comes from the machine's own counters where it exposes them (Intel/AMD
RAPL through Linux powercap, NVIDIA's NVML) and is cut to LoadGen's window afterwards. It is
informative only: a package counter also counts every other process on the machine. Peak RSS
needs no thread: the launcher reads it from the kernel when it reaps the child (``wait4``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

POWERCAP_ROOT = Path("/sys/class/powercap")
SAMPLE_INTERVAL_S = 0.2


@dataclass
class Counter:
    """One monotonically increasing energy counter in microjoules, with its wrap-around."""

    name: str
    read_uj: Any  # () -> int
    wrap_uj: int = 0


def rapl_counters(root: Path = POWERCAP_ROOT) -> list[Counter]:
    """The package-level RAPL domains readable here (``intel-rapl:N``; AMD uses the same
    interface). Sub-domains (``intel-rapl:N:M``) are inside their package's count."""
    counters = []
    for zone in sorted(root.glob("intel-rapl:*")):
        if zone.name.count(":") != 1:
            continue
        energy = zone / "energy_uj"
        try:
            int(energy.read_text())
        except (OSError, ValueError):
            continue  # absent, or root-only since the PLATYPUS mitigation
        try:
            wrap = int((zone / "max_energy_range_uj").read_text())
        except (OSError, ValueError):
            wrap = 0
        label = (zone / "name").read_text().strip() if (zone / "name").is_file() else zone.name
        counters.append(Counter(f"rapl:{label}", lambda f=energy: int(f.read_text()), wrap))
    return counters


def nvml_handles() -> list[Any]:
    """NVML device handles, or [] when there is no NVIDIA driver or no ``nvidia-ml-py``."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:  # noqa: BLE001 - no library, no driver, no device: nothing to track
        return []


def nvml_counters(handles: list[Any]) -> list[Counter]:
    import pynvml

    counters = []
    for index, handle in enumerate(handles):
        try:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)  # mJ; Volta and newer
        except Exception:  # noqa: BLE001 - an older GPU has no energy counter
            continue
        counters.append(Counter(f"nvml:gpu{index}", lambda h=handle: 1000 *
                                pynvml.nvmlDeviceGetTotalEnergyConsumption(h)))
    return counters


@dataclass
class Samples:
    """(epoch seconds, cumulative microjoules) per counter, wrap-arounds unfolded."""

    times: list[float] = field(default_factory=list)
    totals: dict[str, list[float]] = field(default_factory=dict)

    def energy_between(self, start: float, end: float) -> dict[str, float] | None:
        """Joules per counter over [start, end], linearly interpolated between samples; None
        when the samples do not cover the window."""
        if len(self.times) < 2 or start < self.times[0] or end > self.times[-1] or end <= start:
            return None
        return {name: (_interpolate(self.times, values, end) -
                       _interpolate(self.times, values, start)) / 1e6
                for name, values in self.totals.items()}


def _interpolate(times: list[float], values: list[float], at: float) -> float:
    for i in range(1, len(times)):
        if times[i] >= at:
            span = times[i] - times[i - 1]
            weight = (at - times[i - 1]) / span if span > 0 else 1.0
            return values[i - 1] + weight * (values[i] - values[i - 1])
    return values[-1]


class Tracker:
    """Samples the energy counters (and NVIDIA memory in use) until stopped.

    ``with Tracker() as tracker: launch(...)`` then ``tracker.report(start, end, samples)``.
    """

    def __init__(self, counters: list[Counter] | None = None,
                 gpu_handles: list[Any] | None = None,
                 interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.gpu_handles = nvml_handles() if gpu_handles is None else gpu_handles
        if counters is None:
            counters = rapl_counters() + (nvml_counters(self.gpu_handles)
                                          if self.gpu_handles else [])
        self.counters = counters
        self.interval_s = interval_s
        self.samples = Samples(totals={c.name: [] for c in counters})
        self._last_raw: dict[str, int] = {}
        self._offset: dict[str, float] = {c.name: 0.0 for c in counters}
        self.gpu_idle_mb: float | None = None
        self.gpu_peak_mb: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="quantmark-tracker", daemon=True)

    def __enter__(self) -> Tracker:
        if self.counters or self.gpu_handles:
            self.gpu_idle_mb = self._gpu_used_mb()
            self._sample()
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
            self._sample()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        now = time.time()
        try:  # every counter or none: their lists stay in step with the times
            raws = [counter.read_uj() for counter in self.counters]
        except (OSError, ValueError):
            raws = []
        if raws:
            for counter, raw in zip(self.counters, raws, strict=True):
                last = self._last_raw.get(counter.name)
                if last is not None and raw < last and counter.wrap_uj:
                    self._offset[counter.name] += counter.wrap_uj  # the counter wrapped around
                self._last_raw[counter.name] = raw
                self.samples.totals[counter.name].append(raw + self._offset[counter.name])
            self.samples.times.append(now)
        used = self._gpu_used_mb()
        if used is not None:
            self.gpu_peak_mb = max(self.gpu_peak_mb or 0.0, used)

    def _gpu_used_mb(self) -> float | None:
        if not self.gpu_handles:
            return None
        import pynvml

        return sum(pynvml.nvmlDeviceGetMemoryInfo(h).used for h in self.gpu_handles) / 2**20

    def report(self, start: float | None, end: float | None,
               samples_per_s: float | None) -> dict[str, Any]:
        """Energy over LoadGen's window [start, end] and GPU memory, labelled for the report."""
        out: dict[str, Any] = {}
        if self.gpu_idle_mb is not None and self.gpu_peak_mb is not None:
            out["gpu_memory_mb"] = round(self.gpu_peak_mb - self.gpu_idle_mb, 1)
            out["gpu_memory_note"] = "peak GPU memory in use minus in use before the test"
        if not self.counters:
            out["energy"] = None
            out["energy_note"] = "no readable RAPL powercap counter or NVML energy counter here"
            return out
        joules = (self.samples.energy_between(start, end)
                  if start is not None and end is not None else None)
        if joules is None:
            out["energy"] = None
            out["energy_note"] = "energy samples do not cover LoadGen's run"
            return out
        seconds = end - start
        total = sum(joules.values())
        out["energy"] = {
            "joules": round(total, 3), "seconds": round(seconds, 3),
            "watts": round(total / seconds, 2),
            "joules_per_sample": (round(total / seconds / samples_per_s, 5)
                                  if samples_per_s else None),
            "counters": {name: round(value, 3) for name, value in joules.items()},
            "informative": True,
        }
        out["energy_note"] = ("informative: whole-package counters over LoadGen's run, which "
                              "include every other process on the machine")
        return out
