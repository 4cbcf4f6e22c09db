"""The machine's counters as Linux shows them in /proc and /sys: CPU time, pressure stalls,
a process's CPU time and children, CPU frequency. Every reader takes ``root`` (a fake tree in
the tests) and returns None, or nothing, for what it cannot read."""

from __future__ import annotations

import os
from pathlib import Path

# system-wide CPU "full" is always 0 (some task runs whenever one waits for a core)
PRESSURE = ("cpu_some", "memory_some", "memory_full", "io_some", "io_full")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, ValueError):
        return None


def parse_cpu_stat(text: str, ticks_per_s: float,
                   allowed: set[int] | None = None) -> dict[str, float] | None:
    """/proc/stat's CPU times (ticks) over the ``allowed`` CPUs (all when None), in seconds:
    busy = user+nice+system+irq+softirq (guest time is inside user and nice), total = busy +
    idle+iowait+steal; and the run queue (``procs_running``, ``procs_blocked``)."""
    sums, out = [0] * 8, {"cpus": 0.0}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name[3:].isdigit() and name.startswith("cpu") and (
                allowed is None or int(name[3:]) in allowed):
            for index, value in enumerate(rest.split()[:8]):
                sums[index] += int(value)
            out["cpus"] += 1
        elif name in ("procs_running", "procs_blocked"):
            out[name] = int(rest)
    user, nice, system, idle, iowait, irq, softirq, steal = (v / ticks_per_s for v in sums)
    busy = user + nice + system + irq + softirq
    out.update(busy=busy, total=busy + idle + iowait + steal, iowait=iowait, steal=steal)
    return out if out["cpus"] else None


def read_cpu_stat(root: Path = Path("/"),
                  allowed: set[int] | None = None) -> dict[str, float] | None:
    text = _read(root / "proc/stat")
    try:
        return parse_cpu_stat(text, os.sysconf("SC_CLK_TCK"), allowed) if text else None
    except ValueError:
        return None


def parse_pressure(text: str) -> dict[str, int]:
    """``some avg10=.. total=US`` lines -> {"some": US, "full": US} (microseconds stalled)."""
    totals = {}
    for line in text.splitlines():
        kind, *fields = line.split()
        for item in fields:
            if item.startswith("total="):
                totals[kind] = int(item.removeprefix("total="))
    return totals


def read_pressure(root: Path = Path("/")) -> dict[str, float]:
    """Seconds stalled per ``<resource>_<some|full>`` that /proc/pressure has here."""
    out = {}
    for resource_ in ("cpu", "memory", "io"):
        text = _read(root / "proc/pressure" / resource_)
        try:
            totals = parse_pressure(text) if text else {}
        except ValueError:
            continue
        out.update({f"{resource_}_{kind}": us / 1e6 for kind, us in totals.items()
                    if f"{resource_}_{kind}" in PRESSURE})
    return out


def parse_process_cpu_s(text: str, ticks_per_s: float) -> tuple[int, float]:
    """/proc/<pid>/stat -> (parent pid, utime+stime+cutime+cstime in seconds). The name field
    may hold spaces and parentheses, so fields are counted after the last ``)``."""
    fields = text[text.rfind(")") + 2:].split()
    return int(fields[1]), sum(int(v) for v in fields[11:15]) / ticks_per_s


def read_process_cpu_s(pid: int, root: Path = Path("/")) -> float | None:
    """CPU time of one process (all its threads, and its children it has reaped)."""
    text = _read(root / f"proc/{pid}/stat")
    try:
        return parse_process_cpu_s(text, os.sysconf("SC_CLK_TCK"))[1] if text else None
    except (ValueError, IndexError):
        return None


def descendants(pid: int, root: Path = Path("/")) -> list[int]:
    """Every live process below ``pid`` (a SUT may run worker processes), from the parent
    pids in /proc/*/stat: /proc/<pid>/task/*/children is missing on many kernels."""
    children: dict[int, list[int]] = {}
    for entry in (root / "proc").glob("[0-9]*"):
        try:
            parent = parse_process_cpu_s(_read(entry / "stat") or "", 1)[0]
        except (ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found, queue = [], list(children.get(pid, []))
    while queue:
        found.append(queue.pop())
        queue.extend(children.get(found[-1], []))
    return found


def freq_files(root: Path = Path("/")) -> list[Path]:
    """The readable ``scaling_cur_freq`` files (none in most VMs and containers)."""
    return [f for f in sorted((root / "sys/devices/system/cpu").glob(
        "cpu[0-9]*/cpufreq/scaling_cur_freq")) if _read(f) is not None]


def read_freq_mhz(files: list[Path]) -> list[float]:
    return [int(text) / 1000 for text in map(_read, files) if text and text.strip().isdigit()]
