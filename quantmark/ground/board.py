"""Single-board facts for the fingerprint: what board, which core, and did it throttle.

A Raspberry Pi that reaches its soft temperature limit (80 °C) or runs short of voltage lowers
its clock in the middle of a run, and the numbers it gives are not the board's steady speed.
So the runner takes a thermal snapshot just before and just after each LoadGen test, and the
report says which configurations throttled. Every reader takes ``root`` (a fake filesystem
tree in the tests) and never raises: what cannot be read is ``None``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

SOFT_LIMIT_C = 80.0  # the Raspberry Pi firmware's soft temperature limit
# ARM Ltd's (implementer 0x41) part numbers, as /proc/cpuinfo's "CPU part" gives them
ARM_CORES = {
    0xD03: "Cortex-A53", 0xD04: "Cortex-A35", 0xD05: "Cortex-A55", 0xD07: "Cortex-A57",
    0xD08: "Cortex-A72", 0xD09: "Cortex-A73", 0xD0A: "Cortex-A75", 0xD0B: "Cortex-A76",
    0xD0C: "Neoverse-N1", 0xD0D: "Cortex-A77", 0xD40: "Neoverse-V1", 0xD41: "Cortex-A78",
    0xD44: "Cortex-X1", 0xD46: "Cortex-A510", 0xD47: "Cortex-A710", 0xD48: "Cortex-X2",
    0xD49: "Neoverse-N2", 0xD4D: "Cortex-A715", 0xD4E: "Cortex-X3", 0xD4F: "Neoverse-V2",
    0xD80: "Cortex-A520", 0xD81: "Cortex-A720", 0xD82: "Cortex-X4",
}
# zone types that measure the CPU, best first; otherwise the first zone that reads
CPU_ZONES = ("cpu-thermal", "x86_pkg_temp", "soc-thermal")
# `vcgencmd get_throttled` bits: (bit, key, words for the report)
THROTTLE_BITS = ((0, "under_voltage_now", "under-voltage"),
                 (1, "freq_capped_now", "ARM frequency capped"),
                 (2, "throttled_now", "throttled"),
                 (3, "soft_temp_limit_now", "soft temperature limit"),
                 (16, "under_voltage_occurred", "under-voltage"),
                 (17, "freq_capped_occurred", "ARM frequency capped"),
                 (18, "throttled_occurred", "throttled"),
                 (19, "soft_temp_limit_occurred", "soft temperature limit"))
CPUFREQ = "sys/devices/system/cpu/cpu0/cpufreq"


def _read(root: Path, relative: str) -> str | None:
    """A file's text without trailing NULs (device-tree strings end in one) or whitespace."""
    try:
        return (root / relative).read_text(errors="replace").rstrip("\0 \t\r\n") or None
    except (OSError, ValueError):
        return None


def _int(text: str | None, base: int = 10) -> int | None:
    try:
        return int(text, base) if text is not None else None
    except ValueError:
        return None


def _cpuinfo_field(cpuinfo: str | None, name: str) -> str | None:
    """The first ``name : value`` line of /proc/cpuinfo (per-core fields repeat)."""
    for line in (cpuinfo or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == name.lower():
            return value.strip() or None
    return None


def core_name(implementer: str | None, part: str | None) -> str | None:
    """A human name for an ARM Ltd core ("Cortex-A76"), None for others or unknown parts."""
    if _int(implementer, 16) != 0x41:
        return None
    return ARM_CORES.get(_int(part, 16) or -1)


def board_facts(root: Path = Path("/")) -> dict[str, Any]:
    """What does not change during a run: board model, CPU core, governor, top clock."""
    cpuinfo = _read(root, "proc/cpuinfo")
    implementer = _cpuinfo_field(cpuinfo, "CPU implementer")
    part = _cpuinfo_field(cpuinfo, "CPU part")
    return {
        "model": _read(root, "proc/device-tree/model"),
        "cpu_implementer": implementer.lower() if implementer else None,
        "cpu_part": part.lower() if part else None,
        "cpu_core": core_name(implementer, part),
        "governor": _read(root, f"{CPUFREQ}/scaling_governor"),
        "max_freq_khz": (_int(_read(root, f"{CPUFREQ}/cpuinfo_max_freq"))
                         or _int(_read(root, f"{CPUFREQ}/scaling_max_freq"))),
    }


def _zones(root: Path) -> list[tuple[str | None, float]]:
    """(type, °C) of every readable thermal zone, in zone order."""
    found = []
    folder = root / "sys/class/thermal"
    try:
        names = [p.name for p in folder.glob("thermal_zone*")]
    except OSError:
        return []
    for name in sorted(names, key=lambda n: _int(n.removeprefix("thermal_zone")) or 0):
        millidegrees = _int(_read(root, f"sys/class/thermal/{name}/temp"))
        if millidegrees is not None:
            found.append((_read(root, f"sys/class/thermal/{name}/type"), millidegrees / 1000))
    return found


def parse_throttled(text: str | None) -> dict[str, Any] | None:
    """``throttled=0x50005`` -> the raw value and one bool per bit; None if not that."""
    match = re.search(r"throttled=(0x[0-9a-fA-F]+)", text or "")
    if not match:
        return None
    value = int(match[1], 16)
    return {"raw": match[1], **{key: bool(value >> bit & 1) for bit, key, _ in THROTTLE_BITS}}


def read_throttled(vcgencmd: str | None) -> dict[str, Any] | None:
    """The firmware's throttling flags (Raspberry Pi), None where there is no vcgencmd."""
    if not vcgencmd:
        return None
    try:
        proc = subprocess.run([vcgencmd, "get_throttled"], capture_output=True, text=True,
                              timeout=2)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_throttled(proc.stdout) if proc.returncode == 0 else None


def thermal_snapshot(root: Path = Path("/"),
                     vcgencmd: str | None = shutil.which("vcgencmd")) -> dict[str, Any]:
    """Temperature, clock and throttling flags now: taken before and after each run."""
    zones = _zones(root)
    zone = next((z for kind in CPU_ZONES for z in zones if z[0] == kind),
                zones[0] if zones else (None, None))
    return {"time": time.time(), "temperature_c": zone[1], "thermal_zone": zone[0],
            "cur_freq_khz": _int(_read(root, f"{CPUFREQ}/scaling_cur_freq")),
            "throttled": read_throttled(vcgencmd)}


def throttling_verdict(before: dict[str, Any] | None,
                       after: dict[str, Any] | None) -> dict[str, Any]:
    """Did the board throttle during the run? ``{"throttled": True/False/None, "why": [...]}``.

    True: a *_now flag in either snapshot, an *_occurred flag set after but not before (they
    are sticky since boot, so one already set before says nothing about this run), or a
    temperature at the soft limit. None: neither snapshot could read anything.
    """
    snapshots = {"before": before or {}, "after": after or {}}
    why: list[str] = []
    evidence = False
    for when, snap in snapshots.items():
        flags = snap.get("throttled")
        if isinstance(flags, dict):
            evidence = True
            why += [f"{words} {when} the run" for _, key, words in THROTTLE_BITS
                    if key.endswith("_now") and flags.get(key)]
        temperature = snap.get("temperature_c")
        if isinstance(temperature, int | float):
            evidence = True
            if temperature >= SOFT_LIMIT_C:
                why.append(f"{temperature:.1f} °C {when} the run, at or over the "
                           f"{SOFT_LIMIT_C:.0f} °C soft limit")
    old, new = snapshots["before"].get("throttled"), snapshots["after"].get("throttled")
    if isinstance(old, dict) and isinstance(new, dict):
        why += [f"{words} during the run" for _, key, words in THROTTLE_BITS
                if key.endswith("_occurred") and new.get(key) and not old.get(key)]
    if not evidence:
        return {"throttled": None, "why": ["unknown: no thermal zone or vcgencmd to read"]}
    return {"throttled": bool(why), "why": list(dict.fromkeys(why))}
