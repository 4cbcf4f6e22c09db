"""Energy from the machine's counters, cut to LoadGen's window; RAPL read from sysfs."""

from __future__ import annotations

import time

import pytest

from quantmark.run.trackers import Counter, Samples, Tracker, rapl_counters


def fake_powercap(root, packages):
    for index, (energy, wrap) in enumerate(packages):
        zone = root / f"intel-rapl:{index}"
        zone.mkdir(parents=True)
        (zone / "name").write_text(f"package-{index}\n")
        (zone / "energy_uj").write_text(f"{energy}\n")
        (zone / "max_energy_range_uj").write_text(f"{wrap}\n")
        sub = root / f"intel-rapl:{index}:0"  # a sub-domain: counted inside its package
        sub.mkdir()
        (sub / "energy_uj").write_text("5\n")
    return root


def test_rapl_counters_read_package_domains(tmp_path):
    root = fake_powercap(tmp_path, [(1000, 2**32), (2000, 2**32)])
    counters = rapl_counters(root)
    assert [c.name for c in counters] == ["rapl:package-0", "rapl:package-1"]
    assert [c.read_uj() for c in counters] == [1000, 2000]
    assert counters[0].wrap_uj == 2**32
    (root / "intel-rapl:0" / "energy_uj").write_text("1500\n")
    assert counters[0].read_uj() == 1500
    assert rapl_counters(tmp_path / "absent") == []


def test_energy_between_interpolates_and_refuses_uncovered_windows():
    samples = Samples(times=[10.0, 11.0, 12.0], totals={"a": [0.0, 2e6, 6e6]})
    assert samples.energy_between(10.5, 11.5) == {"a": pytest.approx(3.0)}  # 1 J + 2 J
    assert samples.energy_between(9.0, 11.0) is None
    assert samples.energy_between(11.0, 13.0) is None


def test_tracker_unfolds_wraparound_and_reports_the_window():
    """A counter that gains 50 W and wraps every 2 J: the window's joules stay right."""
    start_clock = time.time()
    wrap = 2_000_000

    def read() -> int:
        return int((time.time() - start_clock) * 50e6) % wrap

    with Tracker(counters=[Counter("fake", read, wrap)], gpu_handles=[],
                 interval_s=0.005) as tracker:
        time.sleep(0.3)
        window = (time.time() - 0.2, time.time() - 0.05)
        time.sleep(0.05)
    report = tracker.report(*window, samples_per_s=100.0)
    energy = report["energy"]
    assert energy["watts"] == pytest.approx(50, rel=0.1)
    assert energy["joules"] == pytest.approx(50 * 0.15, rel=0.1)
    assert energy["joules_per_sample"] == pytest.approx(0.5, rel=0.1)
    assert energy["informative"] is True and "informative" in report["energy_note"]


def test_no_counters_says_so():
    with Tracker(counters=[], gpu_handles=[]) as tracker:
        pass
    report = tracker.report(0.0, 1.0, 10.0)
    assert report["energy"] is None
    assert "no readable RAPL" in report["energy_note"]
