"""Board facts and throttling, read from fake filesystem trees (a Pi 4, a Pi 5, an x86 PC)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from quantmark.ground.board import (
    board_facts,
    parse_throttled,
    thermal_snapshot,
    throttling_verdict,
)
from quantmark.ground.fingerprint import cpu_model

CPUFREQ = "sys/devices/system/cpu/cpu0/cpufreq"
# a 64-bit Raspberry Pi OS /proc/cpuinfo names no model: only the implementer and part
PI_CPUINFO = ("processor\t: 0\nBogoMIPS\t: 108.00\nFeatures\t: fp asimd evtstrm crc32 cpuid\n"
              "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\n"
              "CPU part\t: {part}\nCPU revision\t: 3\n\n"
              "processor\t: 1\nCPU implementer\t: 0x51\nCPU part\t: 0x801\n")


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def zone(root: Path, index: int, kind: str, millidegrees: str) -> None:
    write(root, f"sys/class/thermal/thermal_zone{index}/type", kind + "\n")
    write(root, f"sys/class/thermal/thermal_zone{index}/temp", millidegrees + "\n")


def pi_tree(root: Path, model: str, part: str, millidegrees: str = "81234") -> Path:
    write(root, "proc/device-tree/model", model + "\0")
    write(root, "proc/cpuinfo", PI_CPUINFO.format(part=part))
    write(root, f"{CPUFREQ}/scaling_governor", "ondemand\n")
    write(root, f"{CPUFREQ}/cpuinfo_max_freq", "1800000\n")
    write(root, f"{CPUFREQ}/scaling_cur_freq", "1500000\n")
    zone(root, 0, "cpu-thermal", millidegrees)
    return root


@pytest.fixture
def pi4(tmp_path) -> Path:
    return pi_tree(tmp_path / "pi4", "Raspberry Pi 4 Model B Rev 1.4", "0xd08")


@pytest.fixture
def pi5(tmp_path) -> Path:
    return pi_tree(tmp_path / "pi5", "Raspberry Pi 5 Model B Rev 1.0", "0xd0b", "45100")


@pytest.fixture
def x86(tmp_path) -> Path:
    root = tmp_path / "x86"
    write(root, "proc/cpuinfo", "processor\t: 0\nvendor_id\t: GenuineIntel\n"
          "model name\t: Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz\nflags\t\t: fpu avx2\n")
    write(root, f"{CPUFREQ}/scaling_governor", "performance\n")
    write(root, f"{CPUFREQ}/scaling_max_freq", "4600000\n")  # no cpuinfo_max_freq
    zone(root, 0, "acpitz", "27800")
    zone(root, 1, "INT3400 Thermal", "20000")
    zone(root, 2, "x86_pkg_temp", "52000")
    return root


def fake_vcgencmd(folder: Path, answer: str, code: int = 0) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "vcgencmd"
    script.write_text(f'#!/bin/sh\n[ "$1" = get_throttled ] || exit 9\necho "{answer}"\n'
                      f"exit {code}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def snap(raw: str | None = None, temperature: float | None = None) -> dict:
    return {"temperature_c": temperature, "throttled": parse_throttled(f"throttled={raw}")
            if raw else None}


def test_pi4_board_facts(pi4):
    assert board_facts(pi4) == {
        "model": "Raspberry Pi 4 Model B Rev 1.4", "cpu_implementer": "0x41",
        "cpu_part": "0xd08", "cpu_core": "Cortex-A72", "governor": "ondemand",
        "max_freq_khz": 1800000}
    assert cpu_model(pi4) == "Raspberry Pi 4 Model B Rev 1.4 (Cortex-A72)"


def test_pi5_core_is_a76_and_unknown_parts_have_no_name(pi5, tmp_path):
    facts = board_facts(pi5)
    assert facts["cpu_core"] == "Cortex-A76" and facts["model"].startswith("Raspberry Pi 5")
    write(pi5, "proc/cpuinfo", PI_CPUINFO.format(part="0xfff"))
    assert board_facts(pi5)["cpu_core"] is None and board_facts(pi5)["cpu_part"] == "0xfff"
    # no device tree and no model name: the core names the CPU, not "aarch64"
    bare = tmp_path / "bare"
    write(bare, "proc/cpuinfo", PI_CPUINFO.format(part="0xd0b"))
    assert cpu_model(bare) == "Cortex-A76"


def test_x86_tree(x86):
    facts = board_facts(x86)
    assert facts["model"] is None and facts["cpu_core"] is None
    assert facts["cpu_part"] is None and facts["governor"] == "performance"
    assert facts["max_freq_khz"] == 4600000
    assert cpu_model(x86) == "Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz"
    now = thermal_snapshot(x86, vcgencmd=None)
    assert now["thermal_zone"] == "x86_pkg_temp" and now["temperature_c"] == 52.0
    assert now["throttled"] is None and now["cur_freq_khz"] is None
    assert throttling_verdict(now, now) == {"throttled": False, "why": []}


def test_first_zone_when_none_is_a_cpu_zone(tmp_path):
    zone(tmp_path, 10, "gpu-thermal", "70000")
    zone(tmp_path, 2, "acpitz", "33500")
    now = thermal_snapshot(tmp_path, vcgencmd=None)
    assert (now["thermal_zone"], now["temperature_c"]) == ("acpitz", 33.5)


def test_pi4_snapshot_with_vcgencmd(pi4, tmp_path):
    before = thermal_snapshot(pi4, vcgencmd=fake_vcgencmd(tmp_path / "ok", "throttled=0x0"))
    after = thermal_snapshot(pi4, vcgencmd=fake_vcgencmd(tmp_path / "hot", "throttled=0x50005"))
    assert before["temperature_c"] == pytest.approx(81.234)
    assert before["thermal_zone"] == "cpu-thermal" and before["cur_freq_khz"] == 1500000
    assert before["throttled"]["raw"] == "0x0" and not any(
        v for k, v in before["throttled"].items() if k != "raw")
    assert after["throttled"] == {
        "raw": "0x50005", "under_voltage_now": True, "freq_capped_now": False,
        "throttled_now": True, "soft_temp_limit_now": False, "under_voltage_occurred": True,
        "freq_capped_occurred": False, "throttled_occurred": True,
        "soft_temp_limit_occurred": False}
    verdict = throttling_verdict(before, after)
    assert verdict["throttled"] is True
    assert "under-voltage after the run" in verdict["why"]
    assert "throttled during the run" in verdict["why"]
    assert "81.2 °C before the run, at or over the 80 °C soft limit" in verdict["why"]


def test_vcgencmd_failures_read_as_none(pi5, tmp_path):
    for vcgencmd in (fake_vcgencmd(tmp_path / "err", "throttled=0x4", code=1),
                     fake_vcgencmd(tmp_path / "odd", "error=1 error_msg=nope"),
                     str(tmp_path / "missing" / "vcgencmd")):
        assert thermal_snapshot(pi5, vcgencmd=vcgencmd)["throttled"] is None


def test_verdict_now_bits_in_either_snapshot():
    cool = snap("0x0", 50.0)
    assert throttling_verdict(cool, cool) == {"throttled": False, "why": []}
    verdict = throttling_verdict(snap("0x8", 50.0), cool)
    assert verdict == {"throttled": True, "why": ["soft temperature limit before the run"]}
    assert throttling_verdict(cool, snap("0x2"))["why"] == ["ARM frequency capped after the run"]


def test_verdict_occurred_bits_count_only_when_new():
    # throttled since boot, before this run began, not now: says nothing about this run
    sticky = snap("0x40000", 60.0)
    assert throttling_verdict(sticky, sticky) == {"throttled": False, "why": []}
    verdict = throttling_verdict(snap("0x0", 60.0), snap("0x80000", 60.0))
    assert verdict == {"throttled": True, "why": ["soft temperature limit during the run"]}
    # an earlier occurrence of one kind does not hide a new one of another
    verdict = throttling_verdict(snap("0x40000"), snap("0x50000"))
    assert verdict == {"throttled": True, "why": ["under-voltage during the run"]}


def test_verdict_temperature_limit_without_vcgencmd():
    assert throttling_verdict(snap(temperature=79.9), snap(temperature=79.9))["throttled"] is False
    verdict = throttling_verdict(snap(temperature=70.0), snap(temperature=80.0))
    assert verdict == {"throttled": True,
                       "why": ["80.0 °C after the run, at or over the 80 °C soft limit"]}


def test_verdict_unknown_without_evidence(tmp_path):
    empty = thermal_snapshot(tmp_path, vcgencmd=None)
    verdict = throttling_verdict(empty, empty)
    assert verdict["throttled"] is None and verdict["why"][0].startswith("unknown")
    assert throttling_verdict(None, {})["throttled"] is None  # results from older versions


def test_nothing_raises_on_an_empty_root(tmp_path):
    assert board_facts(tmp_path) == dict.fromkeys(
        ("model", "cpu_implementer", "cpu_part", "cpu_core", "governor", "max_freq_khz"))
    empty = thermal_snapshot(tmp_path / "does-not-exist", vcgencmd=None)
    assert {k: v for k, v in empty.items() if k != "time"} == {
        "temperature_c": None, "thermal_zone": None, "cur_freq_khz": None, "throttled": None}
    assert empty["time"] > 0
    # unreadable values are None too, never an exception
    write(tmp_path, "proc/cpuinfo", "CPU implementer\t: zz\nCPU part\t: 0xd08\n")
    write(tmp_path, f"{CPUFREQ}/cpuinfo_max_freq", "lots\n")
    zone(tmp_path, 0, "cpu-thermal", "n/a")
    assert board_facts(tmp_path)["cpu_core"] is None
    assert board_facts(tmp_path)["max_freq_khz"] is None
    assert thermal_snapshot(tmp_path, vcgencmd=None)["temperature_c"] is None
